"""The checkpoint's versioned record schema and file format: what migdra records per claim, how the
file is checksummed, built and parsed.

This module owns the pydantic models of the checkpoint (:class:`ClaimRecord`, :class:`DeviceRecord`,
:class:`DeviceIntent`), the file's checksum, :func:`build_checkpoint_file` /
:func:`parse_checkpoint_file`, and the pure conflict rule :func:`compute_conflicting_device`.  It
never touches files, locks, NVML or the API server
(:class:`~kubeletplugin.prepare.checkpoint.CheckpointStore` does the I/O).

File format (``<state dir>/checkpoint.json``)::

    {"checksum": "sha256:<hex>", "data": {"schemaVersion": 1, "nodeBootID": "...", "claims": {...}}}

The checksum is SHA-256 over the canonical JSON of ``data`` *as stored* (keys sorted, no spaces), so
a reader that does not know a field added later still verifies the file (NVIDIA's checkpoint broke
upgrades when new fields changed the checksum, k8s-dra-driver-gpu #1080).  A mismatch, unparsable
JSON or an unknown schema version is a :class:`~kubeletplugin.prepare.errors.CheckpointError`: the
plugin refuses to start, the file stays for an admin to inspect.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dra_driver.mig.catalog import Placement
from kubeletplugin.prepare.errors import CheckpointError

CHECKPOINT_SCHEMA_VERSION = 1


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
