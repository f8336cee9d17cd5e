"""The node's record of what migdra prepared: versioned, checksummed, written atomically.

This module owns the checkpoint schema (pydantic), its file format and its store.  The service
writes ``PrepareStarted`` (the intended devices: GPU, profile, placement) **before** it touches NVML;
then, per MIG device and under the GPU's lock, the GPU instances standing on the GPU just before it
asks NVML for the GI (``gpuInstancesBefore``: "creation requested"), and the GI ID as soon as NVML
returns it (before the compute instance is created); and ``PrepareCompleted`` (plus the compute
instance, MIG UUID and CDI IDs) after the CDI spec is on disk.  So after a crash the record tells
recovery exactly which instances may be migdra's, and :meth:`CheckpointStore.owned_instances` /
:meth:`~CheckpointStore.owned_placements` tell the slice publisher about an instance from the moment
it exists.  It never talks to NVML or the API server and never decides what to destroy.

File format (``<state dir>/checkpoint.json``)::

    {"checksum": "sha256:<hex>", "data": {"schemaVersion": 1, "nodeBootID": "...", "claims": {...}}}

The checksum is SHA-256 over the canonical JSON of ``data`` *as stored* (keys sorted, no spaces), so
a reader that does not know a field added later still verifies the file (NVIDIA's checkpoint broke
upgrades when new fields changed the checksum, k8s-dra-driver-gpu #1080).  A mismatch, unparsable
JSON or an unknown schema version is a :class:`CheckpointError`: the plugin refuses to start, the
file stays for an admin to inspect.  A checkpoint of another boot (``/proc/sys/kernel/random/
boot_id`` changed) is discarded: MIG instances do not survive a reboot.
"""

from __future__ import annotations

import enum
import fcntl
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dra_driver.durable import write_file_atomically
from dra_driver.mig.catalog import Placement
from kubeletplugin.prepare.errors import CheckpointError, DeviceConflictError

log = logging.getLogger(__name__)

CHECKPOINT_SCHEMA_VERSION = 1
CHECKPOINT_FILE = "checkpoint.json"
STATE_LOCK_FILE = "prepare.lock"
BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


def read_node_boot_id(path: Path = BOOT_ID_PATH) -> str:
    """The kernel's boot ID: it changes on every reboot, and MIG instances do not survive one."""
    try:
        return path.read_text(encoding="ascii").strip()
    except OSError as e:
        raise CheckpointError(f"cannot read the node boot ID from {path}: {e}") from e


class ClaimState(enum.StrEnum):
    PREPARE_STARTED = "PrepareStarted"
    PREPARE_COMPLETED = "PrepareCompleted"


class _Record(BaseModel):
    # Unknown fields are ignored (not refused) so a newer checkpoint stays readable after a downgrade;
    # the schema version guards incompatible changes.
    model_config = ConfigDict(frozen=True, extra="ignore", validate_by_name=True, validate_by_alias=True)


class DeviceIntent(_Record):
    """What a device of the claim means on this node, decided before any NVML mutation."""

    device_name: str = Field(alias="deviceName")
    request_names: tuple[str, ...] = Field(alias="requestNames")
    admin_access: bool = Field(default=False, alias="adminAccess", description="never creates or destroys")
    gpu_uuid: str = Field(alias="gpuUUID")
    gpu_minor: int = Field(alias="gpuMinor", ge=0)
    profile_id: int | None = Field(default=None, alias="profileID", description="GI profile ID; None: whole GPU")
    profile_name: str | None = Field(default=None, alias="profileName")
    placement: Placement | None = None
    multiprocessor_count: int | None = Field(
        default=None, alias="multiprocessorCount", description="SMs the GI profile advertises"
    )
    env: dict[str, str] = Field(default_factory=dict, description="effective opaque-config environment")

    @property
    def is_mig(self) -> bool:
        return self.profile_id is not None and self.placement is not None


class DeviceRecord(_Record):
    """A device's intent plus, once known, the instance realized for it (all None before)."""

    intent: DeviceIntent
    gpu_instance_id: int | None = Field(default=None, alias="gpuInstanceID")
    compute_instance_id: int | None = Field(default=None, alias="computeInstanceID")
    compute_instance_profile_id: int | None = Field(default=None, alias="computeInstanceProfileID")
    mig_uuid: str | None = Field(default=None, alias="migUUID")
    cdi_device_ids: tuple[str, ...] = Field(default=(), alias="cdiDeviceIDs")
    gpu_instances_before: tuple[int, ...] | None = Field(
        default=None,
        alias="gpuInstancesBefore",
        description="IDs of the GIs on the GPU when migdra, holding the GPU's lock and having found the placement "
        "free, was about to ask NVML for this device's GI; None: NVML was never asked",
    )

    @property
    def owns_instance(self) -> bool:
        """Whether this record names a GPU instance migdra created for this claim (admin access never)."""
        return not self.intent.admin_access and self.intent.is_mig and self.gpu_instance_id is not None

    @property
    def creation_requested(self) -> bool:
        """Whether migdra may have asked NVML for this device's GI (recorded before the call is made)."""
        return not self.intent.admin_access and self.intent.is_mig and self.gpu_instances_before is not None

    @property
    def creation_in_flight(self) -> bool:
        """NVML was (maybe) asked for the GI, and its ID is not recorded yet."""
        return self.creation_requested and self.gpu_instance_id is None


class ClaimRecord(_Record):
    claim_uid: str = Field(alias="claimUID")
    namespace: str
    name: str
    state: ClaimState
    devices: tuple[DeviceRecord, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}"


class Checkpoint(_Record):
    schema_version: Literal[1] = Field(default=1, alias="schemaVersion")
    node_boot_id: str = Field(alias="nodeBootID")
    claims: dict[str, ClaimRecord] = Field(default_factory=dict)


def compute_checksum(data: Any) -> str:
    """SHA-256 over the canonical JSON of ``data`` (sorted keys, compact separators, UTF-8)."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def build_checkpoint_file(checkpoint: Checkpoint) -> bytes:
    data = checkpoint.model_dump(mode="json", by_alias=True)
    document = {"checksum": compute_checksum(data), "data": data}
    return json.dumps(document, sort_keys=True, indent=1, ensure_ascii=False).encode("utf-8")


def parse_checkpoint_file(raw: bytes, source: Path) -> Checkpoint:
    """Verify and decode a checkpoint file; every problem is a :class:`CheckpointError` naming it."""
    try:
        document = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"checkpoint {source} is not valid JSON ({e}); refusing to start") from e
    if not isinstance(document, dict) or "data" not in document or "checksum" not in document:
        raise CheckpointError(f"checkpoint {source} lacks 'data' or 'checksum'; refusing to start")
    expected = compute_checksum(document["data"])
    if document["checksum"] != expected:
        raise CheckpointError(
            f"checkpoint {source} is corrupt: checksum {document['checksum']!r} does not match its content "
            f"({expected}); refusing to start -- inspect the file, then remove it only if no MIG instance "
            "it names is in use"
        )
    data = document["data"]
    version = data.get("schemaVersion") if isinstance(data, dict) else None
    if version != CHECKPOINT_SCHEMA_VERSION:
        raise CheckpointError(
            f"checkpoint {source} has schema version {version!r}; this migdra reads {CHECKPOINT_SCHEMA_VERSION}"
        )
    try:
        return Checkpoint.model_validate(data)
    except ValidationError as e:
        raise CheckpointError(f"checkpoint {source} does not match schema {CHECKPOINT_SCHEMA_VERSION}: {e}") from e


@dataclass(frozen=True, slots=True)
class LoadOutcome:
    """What :meth:`CheckpointStore.load` found; ``discarded``: records of another boot, dropped."""

    records: tuple[ClaimRecord, ...]
    discarded: tuple[ClaimRecord, ...]
    previous_boot_id: str | None


class CheckpointStore:
    """The checkpoint of one node, kept in memory and on disk; thread-safe.

    Each mutation rewrites the file atomically before it returns.  Records are immutable values;
    callers replace a claim's record as a whole.
    """

    def __init__(self, state_dir: Path, boot_id: str) -> None:
        self.path = state_dir / CHECKPOINT_FILE
        self.boot_id = boot_id
        self._lock = threading.Lock()
        self._checkpoint = Checkpoint(node_boot_id=boot_id)

    def load(self) -> LoadOutcome:
        """Read the file (absent = empty).  Raises :class:`CheckpointError` if it cannot be trusted."""
        with self._lock:
            try:
                raw = self.path.read_bytes()
            except FileNotFoundError:
                self._checkpoint = Checkpoint(node_boot_id=self.boot_id)
                self._write()
                return LoadOutcome((), (), None)
            except OSError as e:
                raise CheckpointError(f"cannot read checkpoint {self.path}: {e}") from e
            loaded = parse_checkpoint_file(raw, self.path)
            if loaded.node_boot_id != self.boot_id:
                log.warning(
                    "checkpoint %s is from boot %s, this is boot %s: discarding its %d claim(s) "
                    "(MIG instances do not survive a reboot)",
                    self.path,
                    loaded.node_boot_id,
                    self.boot_id,
                    len(loaded.claims),
                )
                self._checkpoint = Checkpoint(node_boot_id=self.boot_id)
                self._write()
                return LoadOutcome((), tuple(loaded.claims.values()), loaded.node_boot_id)
            self._checkpoint = loaded
            return LoadOutcome(tuple(loaded.claims.values()), (), loaded.node_boot_id)

    def get(self, claim_uid: str) -> ClaimRecord | None:
        with self._lock:
            return self._checkpoint.claims.get(claim_uid)

    def records(self) -> tuple[ClaimRecord, ...]:
        with self._lock:
            return tuple(self._checkpoint.claims.values())

    def put(self, record: ClaimRecord) -> None:
        with self._lock:
            self._replace({**self._checkpoint.claims, record.claim_uid: record})

    def begin(self, record: ClaimRecord) -> None:
        """Record ``PrepareStarted`` unless another claim already holds one of its devices.

        The check and the write are one step under the store's lock, so two claims allocated the same
        or an overlapping placement (a double allocation) never both proceed.
        """
        with self._lock:
            for other in self._checkpoint.claims.values():
                if other.claim_uid == record.claim_uid:
                    continue
                for device in record.devices:
                    held = compute_conflicting_device(device.intent, other.devices)
                    if held is not None:
                        raise DeviceConflictError(
                            f"device {device.intent.device_name}: GPU {device.intent.gpu_uuid} "
                            f"{_describe_intent(held.intent)} is already prepared for claim {other.label} "
                            f"(UID {other.claim_uid}); refusing a double allocation"
                        )
            self._replace({**self._checkpoint.claims, record.claim_uid: record})

    def drop(self, claim_uid: str) -> None:
        with self._lock:
            if claim_uid in self._checkpoint.claims:
                self._replace({uid: r for uid, r in self._checkpoint.claims.items() if uid != claim_uid})

    def update_device(self, claim_uid: str, index: int, device: DeviceRecord) -> ClaimRecord:
        """Replace device ``index`` of the claim's record (a step of its prepare); the new record.

        Raises :class:`KeyError` when the claim has no record: callers hold the claim's lock, so its
        record cannot vanish under them.
        """
        with self._lock:
            record = self._checkpoint.claims[claim_uid]
            devices = (*record.devices[:index], device, *record.devices[index + 1 :])
            updated = record.model_copy(update={"devices": devices})
            self._replace({**self._checkpoint.claims, claim_uid: updated})
            return updated

    def owned_instances(self) -> set[tuple[str, int]]:
        """(GPU UUID, GI ID) of every GPU instance a record says migdra created (admin access excluded).

        A GI counts from the intermediate write right after NVML created it, so an instance that is
        still waiting for its compute instance is migdra's, not a foreign one, in every publish round.
        """
        with self._lock:
            return {
                (device.intent.gpu_uuid, device.gpu_instance_id)
                for record in self._checkpoint.claims.values()
                for device in record.devices
                if device.owns_instance and device.gpu_instance_id is not None
            }

    def owned_placements(self) -> set[tuple[str, int, Placement]]:
        """(GPU UUID, GI profile ID, placement) of every GI NVML is being asked for, whose ID is unknown yet.

        Covers the moment between NVML creating a GI and its ID reaching the checkpoint: a GI of exactly
        that profile at exactly that placement on that GPU is migdra's.  The entry is recorded under the
        GPU's lock after the placement was found free, before the NVML call, and replaced by the GI ID
        (:meth:`owned_instances`) in one step; so, read after the node's instances were read, the two
        together name every GI migdra created.
        """
        with self._lock:
            return {
                (device.intent.gpu_uuid, device.intent.profile_id, device.intent.placement)
                for record in self._checkpoint.claims.values()
                for device in record.devices
                if device.creation_in_flight
                and device.intent.profile_id is not None
                and device.intent.placement is not None
            }

    def find_owner(self, gpu_uuid: str, profile_id: int, placement: Placement) -> DeviceRecord | None:
        """The completed, non-admin device record that created the instance at exactly this placement."""
        with self._lock:
            for record in self._checkpoint.claims.values():
                if record.state is not ClaimState.PREPARE_COMPLETED:
                    continue
                for device in record.devices:
                    intent = device.intent
                    if (
                        device.owns_instance
                        and intent.gpu_uuid == gpu_uuid
                        and intent.profile_id == profile_id
                        and intent.placement == placement
                    ):
                        return device
        return None

    def _replace(self, claims: dict[str, ClaimRecord]) -> None:
        self._checkpoint = self._checkpoint.model_copy(update={"claims": claims})
        self._write()

    def _write(self) -> None:
        write_file_atomically(self.path, build_checkpoint_file(self._checkpoint), mode=0o600)


def compute_conflicting_device(intent: DeviceIntent, others: Iterable[DeviceRecord]) -> DeviceRecord | None:
    """The first of ``others`` that holds hardware ``intent`` needs; admin access never conflicts."""
    if intent.admin_access:
        return None
    for other in others:
        held = other.intent
        if held.admin_access or held.gpu_uuid != intent.gpu_uuid:
            continue
        if held.placement is None or intent.placement is None:  # a whole GPU overlaps everything on it
            return other
        if held.placement.overlaps(intent.placement):
            return other
    return None


def _describe_intent(intent: DeviceIntent) -> str:
    if intent.placement is None:
        return "(the whole GPU)"
    return f"placement {intent.placement} ({intent.profile_name}, device {intent.device_name})"


class StateDirLock:
    """An exclusive ``flock`` on ``<state dir>/prepare.lock``: one plugin process owns the checkpoint.

    The kernel releases it when the process dies, even by SIGKILL, so a crashed plugin never blocks
    its successor; a *running* predecessor (a rolling update) is waited for up to ``timeout`` seconds.
    """

    def __init__(self, state_dir: Path, timeout: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = state_dir / STATE_LOCK_FILE
        self._timeout = timeout
        self._clock = clock
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = self._clock() + self._timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if self._clock() >= deadline:
                    os.close(fd)
                    raise CheckpointError(
                        f"{self.path} is locked by another process (another migdra kubelet plugin?) "
                        f"for more than {self._timeout:g} s; refusing to share the checkpoint"
                    ) from None
                time.sleep(0.05)
                continue
            self._fd = fd
            return

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
