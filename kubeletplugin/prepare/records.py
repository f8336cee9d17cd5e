"""The checkpoint's versioned record schema and file formats: what migdra records per claim, how the
files are checksummed, built and parsed.

This module owns the pydantic models of the checkpoint (:class:`ClaimRecord`, :class:`DeviceRecord`,
:class:`DeviceIntent`), the files' checksum, their build/parse functions, and the pure conflict rule
:func:`compute_conflicting_device`.  It never touches files, locks, NVML or the API server
(:class:`~kubeletplugin.prepare.checkpoint.CheckpointStore` does the I/O and owns the layout).

Every file is one checksummed document::

    {"checksum": "sha256:<hex>", "data": {"schemaVersion": N, ...}}

Schema version 2, one file per claim, so that a change of a claim rewrites that claim alone:

- ``<state dir>/claims/<boot ID>/<claim UID>.json``: ``data`` = ``{"schemaVersion": 2, "nodeBootID":
  "...", "claim": {<ClaimRecord>}}`` (:func:`build_claim_file` / :func:`parse_claim_file`);
- ``<state dir>/checkpoint.json``: ``data`` = ``{"schemaVersion": 2, "claimsDirectory": "claims"}``,
  a marker that says where the records are and in which version (:func:`build_checkpoint_marker` /
  :func:`parse_checkpoint_marker`).  It is read before anything else, so a release that changes the
  layout can tell an older state directory from its own, and an older migdra refuses a newer one.

(Version 1, one ``checkpoint.json`` holding every claim, was never released; a file of it is refused
like any version this migdra does not read.)

The checksum is SHA-256 over the canonical JSON of ``data`` *as stored* (keys sorted, no spaces), so
a reader that does not know a field added later still verifies the file (NVIDIA's checkpoint broke
upgrades when new fields changed the checksum, k8s-dra-driver-gpu #1080).  A mismatch, unparsable
JSON or an unknown schema version is a :class:`~kubeletplugin.prepare.errors.CheckpointError` naming
the file: the plugin refuses to start, the file stays for an admin to inspect.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dra_driver.mig.catalog import Placement
from kubeletplugin.prepare.errors import CheckpointError

_M = TypeVar("_M", bound=BaseModel)

CHECKPOINT_SCHEMA_VERSION = 2
"""One file per claim, and ``checkpoint.json`` the marker saying so.  A release that changes what a
record means -- not only adds a field an older reader may ignore -- raises it, so an older migdra
refuses the record instead of acting on half of it."""
CLAIMS_DIRECTORY = "claims"


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
    memory_bytes: int | None = Field(
        default=None, alias="memoryBytes", ge=0, description="memory the GI profile advertises (claim status)"
    )
    env: dict[str, str] = Field(default_factory=dict, description="effective opaque-config environment")
    share_id: str | None = Field(
        default=None,
        alias="shareID",
        description="the allocation result's shareID of a share of a shared GPU instance; None: not a share (a "
        "shared device allocated without shareID is the whole GI, like an exclusive device)",
    )
    share_size: int | None = Field(
        default=None, alias="shareComputeSlices", gt=0, description="compute slices of the share's CI"
    )

    @property
    def is_mig(self) -> bool:
        return self.profile_id is not None and self.placement is not None

    @property
    def is_share(self) -> bool:
        """A share of a shared GPU instance: its own compute instance in a GI other claims may share."""
        return self.share_id is not None and self.is_mig and not self.admin_access


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

    created_gpu_instance: bool = Field(
        default=False,
        alias="createdGpuInstance",
        description="a share: this claim created the shared GI (else it reused the GI of another share's record)",
    )
    compute_instances_before: tuple[int, ...] | None = Field(
        default=None,
        alias="computeInstancesBefore",
        description="a share: IDs of the CIs in the GI when migdra, holding the GPU's lock, was about to ask NVML "
        "for this share's CI at computeInstancePlacement; None: NVML was never asked",
    )
    compute_instance_placement: Placement | None = Field(
        default=None, alias="computeInstancePlacement", description="a share: its CI's placement in the GI"
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

    # -- the steps of a device's life, each the record as it must say next (docs/prepare.md) -------

    def requesting_gpu_instance(self, standing: Iterable[int]) -> DeviceRecord:
        """About to ask NVML for the GI: the GIs standing on the GPU (under its lock, placement free)."""
        return self.model_copy(update={"gpu_instances_before": tuple(sorted(standing))})

    def with_gpu_instance(self, gpu_instance_id: int) -> DeviceRecord:
        """The GI NVML created for this exclusive device (recorded before any compute instance exists)."""
        return self.model_copy(update={"gpu_instance_id": gpu_instance_id})

    def with_shared_gpu_instance(self, gpu_instance_id: int, *, created: bool) -> DeviceRecord:
        """The shared GI this share uses: created by this claim, or joined (another share's record names it)."""
        return self.model_copy(update={"gpu_instance_id": gpu_instance_id, "created_gpu_instance": created})

    def requesting_compute_instance(
        self, standing: Iterable[int], placement: Placement, profile_id: int
    ) -> DeviceRecord:
        """A share about to ask NVML for its CI at ``placement``: the CIs standing in the GI."""
        return self.model_copy(
            update={
                "compute_instances_before": tuple(sorted(standing)),
                "compute_instance_placement": placement,
                "compute_instance_profile_id": profile_id,
            }
        )

    def with_compute_instance(
        self, compute_instance_id: int, mig_uuid: str, profile_id: int | None = None
    ) -> DeviceRecord:
        """The compute instance realized for the device (``profile_id``: when not recorded with the request)."""
        update: dict[str, object] = {"compute_instance_id": compute_instance_id, "mig_uuid": mig_uuid}
        if profile_id is not None:
            update["compute_instance_profile_id"] = profile_id
        return self.model_copy(update=update)

    def with_stray_compute_instance(
        self, compute_instance_id: int, mig_uuid: str, placement: Placement
    ) -> DeviceRecord:
        """A share's CI that NVML created elsewhere and would not destroy: recorded, so a release destroys it."""
        return self.model_copy(
            update={
                "compute_instance_id": compute_instance_id,
                "mig_uuid": mig_uuid,
                "compute_instance_placement": placement,
            }
        )

    def with_instance_of(self, owner: DeviceRecord) -> DeviceRecord:
        """Admin access: the identity of the instance ``owner`` (another claim's device) created."""
        return self.model_copy(
            update={
                "gpu_instance_id": owner.gpu_instance_id,
                "compute_instance_id": owner.compute_instance_id,
                "compute_instance_profile_id": owner.compute_instance_profile_id,
                "mig_uuid": owner.mig_uuid,
            }
        )

    def gpu_instance_alone(self, gpu_instance_id: int) -> DeviceRecord:
        """An exclusive device being released: its GI, no compute instance (written before the CIs go)."""
        return self.model_copy(
            update={
                "gpu_instance_id": gpu_instance_id,
                "compute_instance_id": None,
                "compute_instance_profile_id": None,
                "mig_uuid": None,
            }
        )

    def share_compute_instance_gone(self) -> DeviceRecord:
        """A share whose own CI is destroyed: the shared GI alone (written before the GI's turn)."""
        return self.model_copy(
            update={
                "compute_instance_id": None,
                "compute_instance_profile_id": None,
                "mig_uuid": None,
                "compute_instances_before": None,
                "compute_instance_placement": None,
            }
        )

    def with_cdi_device_ids(self, cdi_device_ids: tuple[str, ...]) -> DeviceRecord:
        return self.model_copy(update={"cdi_device_ids": cdi_device_ids})


class ClaimRecord(_Record):
    claim_uid: str = Field(alias="claimUID")
    namespace: str
    name: str
    pod_claim_name: str | None = Field(
        default=None,
        alias="podClaimName",
        description="the pod's name for a claim generated from a template (its resource.kubernetes.io/pod-claim-name "
        "annotation): the device metadata's container path; absent for other claims",
    )
    state: ClaimState
    devices: tuple[DeviceRecord, ...] = ()
    realized_ahead: bool = Field(
        default=False,
        alias="realizedAhead",
        description="realized before the pod was bound (realize before bind) and not yet returned to kubelet's "
        "NodePrepareResources: the realizer tears it down if the claim loses its allocation; absent: False",
    )

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def device_names(self) -> tuple[str, ...]:
        return tuple(device.intent.device_name for device in self.devices)

    def completed(self, devices: tuple[DeviceRecord, ...]) -> ClaimRecord:
        """Every device realized and its files written: PrepareCompleted."""
        return self.model_copy(update={"state": ClaimState.PREPARE_COMPLETED, "devices": devices})

    def being_released(self, devices: tuple[DeviceRecord, ...] | None = None) -> ClaimRecord:
        """PrepareStarted again: being released or rolled back (``devices``: what is left of it)."""
        update: dict[str, object] = {"state": ClaimState.PREPARE_STARTED}
        if devices is not None:
            update["devices"] = devices
        return self.model_copy(update=update)

    def with_device(self, index: int, device: DeviceRecord) -> ClaimRecord:
        return self.model_copy(update={"devices": (*self.devices[:index], device, *self.devices[index + 1 :])})

    def claimed_by_kubelet(self) -> ClaimRecord:
        """A record realized ahead that kubelet's prepare returned: from now on kubelet owns its unprepare."""
        return self.model_copy(update={"realized_ahead": False})


class ClaimFile(_Record):
    """One claim's record file (schema version 2), stamped with the boot that wrote it."""

    schema_version: Literal[2] = Field(default=2, alias="schemaVersion")
    node_boot_id: str = Field(alias="nodeBootID")
    claim: ClaimRecord


class CheckpointMarker(_Record):
    """``checkpoint.json`` of schema version 2: the records are one file per claim, in this directory."""

    schema_version: Literal[2] = Field(default=2, alias="schemaVersion")
    claims_directory: Literal["claims"] = Field(default="claims", alias="claimsDirectory")


def compute_checksum(data: Any) -> str:
    """SHA-256 over the canonical JSON of ``data`` (sorted keys, compact separators, UTF-8)."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _build_document(model: BaseModel) -> bytes:
    data = model.model_dump(mode="json", by_alias=True)
    document = {"checksum": compute_checksum(data), "data": data}
    return json.dumps(document, sort_keys=True, indent=1, ensure_ascii=False).encode("utf-8")


def build_claim_file(node_boot_id: str, record: ClaimRecord) -> bytes:
    return _build_document(ClaimFile(node_boot_id=node_boot_id, claim=record))


def build_checkpoint_marker() -> bytes:
    return _build_document(CheckpointMarker())


def _verified_data(raw: bytes, source: Path) -> tuple[dict[str, Any], object]:
    """``data`` of a checksummed document, and its schema version; every problem a CheckpointError."""
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
    if not isinstance(data, dict):
        raise CheckpointError(f"checkpoint {source}: 'data' is not an object; refusing to start")
    return data, data.get("schemaVersion")


def _validated(model: type[_M], data: dict[str, Any], source: Path, version: object) -> _M:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise CheckpointError(f"checkpoint {source} does not match schema {version}: {e}") from e


def parse_checkpoint_marker(raw: bytes, source: Path) -> CheckpointMarker:
    """``checkpoint.json``, verified; any other schema version is a :class:`CheckpointError` naming it."""
    data, version = _verified_data(raw, source)
    if version != CHECKPOINT_SCHEMA_VERSION:
        raise CheckpointError(
            f"checkpoint {source} has schema version {version!r}; this migdra reads {CHECKPOINT_SCHEMA_VERSION}"
        )
    return _validated(CheckpointMarker, data, source, version)


def parse_claim_file(raw: bytes, source: Path) -> ClaimFile:
    """One claim's record file, verified; every problem is a :class:`CheckpointError` naming it."""
    data, version = _verified_data(raw, source)
    if version != CHECKPOINT_SCHEMA_VERSION:
        raise CheckpointError(
            f"checkpoint record {source} has schema version {version!r}; this migdra reads {CHECKPOINT_SCHEMA_VERSION}"
        )
    return _validated(ClaimFile, data, source, version)


def compute_conflicting_device(intent: DeviceIntent, others: Iterable[DeviceRecord]) -> DeviceRecord | None:
    """The first of ``others`` that holds hardware ``intent`` needs; admin access never conflicts."""
    if intent.admin_access:
        return None
    for other in others:
        held = other.intent
        if held.admin_access or held.gpu_uuid != intent.gpu_uuid:
            continue
        if intent.is_share and held.is_share and held.device_name == intent.device_name:
            continue  # two shares of one shared GPU instance: each gets a compute instance of its own
        if held.placement is None or intent.placement is None:  # a whole GPU overlaps everything on it
            return other
        if held.placement.overlaps(intent.placement):
            return other
    return None
