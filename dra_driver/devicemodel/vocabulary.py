"""Every attribute, capacity and counter name migdra publishes, with its type and where it appears.

One place per fact: the device model writes exactly these names, ``migdra cel lint`` checks selectors
against them, and the table of docs/device-model.md is held to them by a test.  Names follow NVIDIA's
DRA driver where a name exists there, so selectors carry over (``type``, ``profile``, ``parentUUID``,
``productName``, ``architecture``, ``brand``, ``addressingMode``, ``cudaComputeCapability``; capacities
``memory`` (bytes), ``multiprocessors``, ``copyEngines``, ``decoders``, ``encoders``, ``jpegEngines``,
``ofaEngines``).

Attribute names without a domain belong to the driver's domain (the driver name, e.g.
``gpu.migdra.io``); the ``resource.kubernetes.io/`` names are Kubernetes' standard attributes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

STANDARD_DOMAIN = "resource.kubernetes.io"
DEFAULT_DRIVER_NAME = "gpu.migdra.io"


class DeviceType(enum.StrEnum):
    """Value of the ``type`` attribute."""

    MIG = "mig"  # one (profile, placement) of a MIG-enabled GPU
    GPU = "gpu"  # a whole GPU with MIG disabled


class ValueType(enum.StrEnum):
    """The DeviceAttribute value field used (``int``, ``bool``, ``string``, ``version``)."""

    INT = "int"
    BOOL = "bool"
    STRING = "string"
    VERSION = "version"


@dataclass(frozen=True, slots=True)
class AttributeSpec:
    name: str  # as published: bare for the driver's domain, qualified for standard ones
    value_type: ValueType
    on: frozenset[DeviceType]
    always: bool  # False: only when known (e.g. NUMA node)
    description: str

    def qualified(self, driver_name: str) -> str:
        return self.name if "/" in self.name else f"{driver_name}/{self.name}"


@dataclass(frozen=True, slots=True)
class CapacitySpec:
    name: str
    counter: str  # the DNS-label counter that meters this capacity per GPU
    resource_field: str  # the GPU-instance profile field (catalog and NVML) it comes from
    on: frozenset[DeviceType]
    description: str


_BOTH = frozenset({DeviceType.MIG, DeviceType.GPU})
_MIG = frozenset({DeviceType.MIG})
_GPU = frozenset({DeviceType.GPU})

ATTRIBUTES: tuple[AttributeSpec, ...] = (
    AttributeSpec("type", ValueType.STRING, _BOTH, True, "'mig' for a MIG placement, 'gpu' for a whole GPU"),
    AttributeSpec("uuid", ValueType.STRING, _GPU, True, "GPU UUID (MIG devices have none until created)"),
    AttributeSpec("parentUUID", ValueType.STRING, _MIG, True, "UUID of the GPU the placement belongs to"),
    AttributeSpec("profile", ValueType.STRING, _MIG, True, "MIG profile name, e.g. '1g.10gb' or '1g.10gb+me'"),
    AttributeSpec("productName", ValueType.STRING, _BOTH, True, "NVML device name, e.g. 'NVIDIA H100 80GB HBM3'"),
    AttributeSpec("architecture", ValueType.STRING, _BOTH, True, "'Ampere', 'Hopper' or 'Blackwell'"),
    AttributeSpec(
        "brand",
        ValueType.STRING,
        _BOTH,
        False,
        "NVML brand as NVIDIA's driver spells it, e.g. 'Nvidia'; absent where NVML does not answer",
    ),
    AttributeSpec(
        "addressingMode",
        ValueType.STRING,
        _BOTH,
        False,
        "'None', 'HMM' or 'ATS' (NVML addressing mode); absent where NVML does not answer (older drivers, vGPU guests)",
    ),
    AttributeSpec("cudaComputeCapability", ValueType.VERSION, _BOTH, True, "e.g. 9.0.0"),
    AttributeSpec("driverVersion", ValueType.VERSION, _BOTH, True, "NVIDIA driver version, e.g. 580.65.6"),
    AttributeSpec("cudaDriverVersion", ValueType.VERSION, _BOTH, True, "CUDA version the driver supports"),
    AttributeSpec("placementStart", ValueType.INT, _MIG, True, "first memory slice of the placement"),
    AttributeSpec("placementSize", ValueType.INT, _MIG, True, "memory slices the placement occupies"),
    AttributeSpec("computeSlices", ValueType.INT, _MIG, True, "compute slices (the 'Ng' of the profile)"),
    AttributeSpec(
        "shared",
        ValueType.BOOL,
        _MIG,
        False,
        "true on a shared GPU-instance device (several claims, each its own compute instance); "
        "absent on every other device",
    ),
    AttributeSpec(f"{STANDARD_DOMAIN}/pciBusID", ValueType.STRING, _BOTH, True, "PCI bus id of the (parent) GPU"),
    AttributeSpec(f"{STANDARD_DOMAIN}/pcieRoot", ValueType.STRING, _BOTH, False, "PCIe root complex, when known"),
    AttributeSpec(f"{STANDARD_DOMAIN}/numaNode", ValueType.INT, _BOTH, False, "NUMA node, when known"),
)

CAPACITIES: tuple[CapacitySpec, ...] = (
    CapacitySpec("memory", "memory", "memory_size_mb", _BOTH, "framebuffer bytes (profile MiB x 2^20)"),
    CapacitySpec("multiprocessors", "multiprocessors", "multiprocessor_count", _BOTH, "streaming multiprocessors"),
    CapacitySpec("copyEngines", "copy-engines", "copy_engine_count", _BOTH, "copy engines"),
    CapacitySpec("decoders", "decoders", "decoder_count", _BOTH, "video decoders (NVDEC)"),
    CapacitySpec("encoders", "encoders", "encoder_count", _BOTH, "video encoders (NVENC)"),
    CapacitySpec("jpegEngines", "jpeg-engines", "jpeg_count", _BOTH, "JPEG decoders (NVJPG)"),
    CapacitySpec("ofaEngines", "ofa-engines", "ofa_count", _BOTH, "optical flow accelerators (OFA)"),
)

SHARED_ATTRIBUTE = "shared"
"""Bool attribute published (``true``) on shared GPU-instance devices only: selectors guard it with
``'shared' in device.attributes[<driver>]`` (it is absent elsewhere), which compiles on every
Kubernetes version, unlike ``device.allowMultipleAllocations`` where DRAConsumableCapacity is off."""


@dataclass(frozen=True, slots=True)
class ShareCapacitySpec:
    """A capacity only shared devices publish: what each share of the GPU instance consumes.

    No counter meters it: a shared device pays its GPU instance's counters once (the first
    allocation); the shares divide the instance among themselves through this capacity alone."""

    name: str
    description: str


COMPUTE_SLICES_CAPACITY = "computeSlices"
SHARE_CAPACITIES: tuple[ShareCapacitySpec, ...] = (
    ShareCapacitySpec(
        COMPUTE_SLICES_CAPACITY,
        "compute slices of the GPU instance; each share consumes its compute instance's size "
        "(requestPolicy validValues: the profile's share sizes; while shares live, those still placeable)",
    ),
)

MEMORY_SLICE_COUNTER_PREFIX = "memory-slice-"

REALIZED_CONDITION = "realized"
"""Binding condition (``<driver>/realized``) of realize before bind: the node plugin created the
device's instance before the pod was bound (docs/prepare.md, "Realize before bind")."""
REALIZATION_FAILED_CONDITION = "realization-failed"
"""Binding failure condition (``<driver>/realization-failed``): creating the instance failed; the
scheduler deallocates the claim and places the pod anew."""


@dataclass(frozen=True, slots=True)
class BindingConditions:
    """``bindingConditions`` / ``bindingFailureConditions`` of every published device (each at most 4)."""

    conditions: tuple[str, ...]
    failure_conditions: tuple[str, ...]


def realize_before_bind_conditions(driver_name: str) -> BindingConditions:
    """The binding conditions of realize before bind, in the driver's domain (condition types are
    qualified names: ``gpu.migdra.io/realized``)."""
    return BindingConditions(
        (f"{driver_name}/{REALIZED_CONDITION}",), (f"{driver_name}/{REALIZATION_FAILED_CONDITION}",)
    )


def memory_slice_counter(index: int) -> str:
    """Counter for one memory slice (placement unit) of a GPU; each MIG device consumes its range."""
    return f"{MEMORY_SLICE_COUNTER_PREFIX}{index}"


def attribute(name: str) -> AttributeSpec:
    for spec in ATTRIBUTES:
        if spec.name == name:
            return spec
    raise KeyError(name)


def published_attribute_ids(driver_name: str) -> dict[str, frozenset[str]]:
    """Domain -> attribute ids published under it, for selector linting."""
    by_domain: dict[str, set[str]] = {}
    for spec in ATTRIBUTES:
        domain, _, ident = spec.qualified(driver_name).rpartition("/")
        by_domain.setdefault(domain, set()).add(ident)
    return {domain: frozenset(ids) for domain, ids in by_domain.items()}


def published_capacity_ids(driver_name: str) -> dict[str, frozenset[str]]:
    """Domain -> capacity ids published under it (all in the driver's domain), shared devices' included."""
    names = {spec.name for spec in CAPACITIES} | {spec.name for spec in SHARE_CAPACITIES}
    return {driver_name: frozenset(names)}
