"""Plain, frozen values the NVML boundary returns.

These are migdra's own types: nothing outside ``dra_driver.nvml.backend`` ever handles a ctypes
struct or a pynvml handle.  Every value here is what NVML reported, not what the catalog predicts; the
device model compares the two.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from dra_driver.mig.catalog import Placement


class MigMode(enum.IntEnum):
    """``NVML_DEVICE_MIG_DISABLE`` / ``NVML_DEVICE_MIG_ENABLE``."""

    DISABLED = 0
    ENABLED = 1


@dataclass(frozen=True, slots=True)
class MigModeState:
    """``nvmlDeviceGetMigMode``: on Ampere ``pending`` differs from ``current`` until a GPU reset."""

    current: MigMode
    pending: MigMode

    @property
    def enabled(self) -> bool:
        return self.current is MigMode.ENABLED

    @property
    def reset_pending(self) -> bool:
        return self.current is not self.pending


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One physical GPU as NVML enumerates it."""

    index: int
    uuid: str
    name: str
    minor_number: int
    pci_bus_id: str
    pci_device_id: int
    nvml_architecture: int
    cuda_compute_capability: tuple[int, int]
    memory_total_bytes: int
    mig_mode: MigModeState | None  # None: the GPU does not support MIG at all
    numa_node: int | None = None
    # nvmlDeviceGetBrand (NVML_BRAND_*) and nvmlDeviceGetAddressingMode (NVML_DEVICE_ADDRESSING_MODE_*):
    # None where NVML does not answer (a driver without the call, or NOT_SUPPORTED on this GPU or host).
    nvml_brand: int | None = None
    nvml_addressing_mode: int | None = None
    pcie_root: str | None = None  # from sysfs, not NVML (dra_driver.host.pci); None when unknown

    @property
    def mig_capable(self) -> bool:
        return self.mig_mode is not None

    @property
    def mig_enabled(self) -> bool:
        return self.mig_mode is not None and self.mig_mode.enabled


@dataclass(frozen=True, slots=True)
class GpuInstanceProfileInfo:
    """``nvmlGpuInstanceProfileInfo_v2_t`` plus the profile's possible placements."""

    nvml_profile_index: int
    profile_id: int
    name: str
    slice_count: int
    instance_count: int
    multiprocessor_count: int
    copy_engine_count: int
    decoder_count: int
    encoder_count: int
    jpeg_count: int
    ofa_count: int
    memory_size_mb: int
    is_p2p_supported: bool
    placements: tuple[Placement, ...]


@dataclass(frozen=True, slots=True)
class ComputeInstanceProfileInfo:
    """``nvmlComputeInstanceProfileInfo_v2_t`` inside one GPU instance."""

    ci_profile_index: int
    profile_id: int
    name: str
    slice_count: int
    instance_count: int
    multiprocessor_count: int


@dataclass(frozen=True, slots=True)
class ComputeInstanceInfo:
    """A compute instance and the MIG device it exposes."""

    gpu_uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    profile_id: int
    placement: Placement
    mig_uuid: str
    multiprocessor_count: int


@dataclass(frozen=True, slots=True)
class GpuInstanceInfo:
    """A GPU instance at its placement, with the compute instances inside it."""

    gpu_uuid: str
    gpu_instance_id: int
    profile_id: int
    placement: Placement
    compute_instances: tuple[ComputeInstanceInfo, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class GpuInventory:
    """Everything NVML reports about one GPU that the device model needs."""

    gpu: GpuInfo
    profiles: tuple[GpuInstanceProfileInfo, ...]  # empty when the GPU has no MIG
    gpu_instances: tuple[GpuInstanceInfo, ...]  # every GI present, ours or not


@dataclass(frozen=True, slots=True)
class NodeInventory:
    """A snapshot of the node's GPUs, as read through NVML at one moment."""

    driver_version: str
    cuda_driver_version: str
    gpus: tuple[GpuInventory, ...]


NOT_ATTRIBUTED = 0xFFFFFFFF
"""``gpuInstanceId`` / ``computeInstanceId`` of an NVML event that no MIG instance is named in."""


class NvmlEventType(enum.Enum):
    """The NVML event kinds migdra watches for device health (``nvmlEventType*``), by migdra's name.

    The bit masks live in the backend; this is the vocabulary the rest of migdra (taints, metrics) uses.
    """

    XID = "xid"  # nvmlEventTypeXidCriticalError: eventData is the XID
    DOUBLE_BIT_ECC = "double-bit-ecc"  # nvmlEventTypeDoubleBitEccError: uncorrectable memory error
    GPU_LOST = "gpu-lost"  # nvmlEventTypeGpuUnavailableError, or the wait itself answering GPU_IS_LOST


@dataclass(frozen=True, slots=True)
class NvmlEvent:
    """One event of an NVML event set (``nvmlEventData_t``), as migdra's own value.

    ``gpu_instance_id`` / ``compute_instance_id`` are None when NVML did not attribute the event to a
    MIG instance (0xFFFFFFFF in ``nvmlEventData_t``): then the whole GPU is concerned.
    """

    gpu_uuid: str
    event_type: NvmlEventType
    xid: int | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
