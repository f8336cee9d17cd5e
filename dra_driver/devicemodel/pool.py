"""Compute the node's DRA devices and counter sets from an NVML inventory.

``build_pool`` is a pure, deterministic function of (inventory, config, instances we own): kubelet
may ask again at any time and must get the same answer for the same hardware.  It never touches
NVML, the Kubernetes API or the disk (the catalog is package data, loaded once).

What it decides:

- a MIG-enabled GPU publishes one device per (profile, placement) NVML reports, after the
  administrator's profile filters; a MIG-disabled GPU publishes one whole-GPU device and nothing else;
- every MIG device consumes its memory slices and its SM / engine / memory amounts from its GPU's
  counter set, so kube-scheduler's counter arithmetic alone forbids overlapping placements and
  engine over-subscription (a second ``+me``, anything beside ``+me.all``); the aggregate counters
  the memory slices imply are left out (:mod:`~dra_driver.devicemodel.counters`): they refuse nothing
  and cost kube-scheduler time on every node it filters;
- GPU instances we did not create (*foreign* ones) are never touched: every placement overlapping
  one is withheld, their memory slices are published as used (0) and their SMs, engines and memory
  are taken off the counter set, so whatever remains allocatable is also creatable.  Instances we own
  (from the checkpoint) stay published so their allocations remain valid;
- where the catalog knows the GPU model and a profile's GPU instance can hold several compute
  instances (``GpuInstanceProfile.share_sizes``), every published MIG placement is published twice:
  the exclusive device (the claim gets the whole GPU instance) and a *shared* device of the same
  placement (``allowMultipleAllocations``: several claims, each its own compute instance, divide the
  instance's ``computeSlices``).  Both consume the same counters, so they exclude each other through
  them; a shared device pays them once however many shares it serves.  Once shares live in its GPU
  instance, a shared device admits only the share sizes that still have a free compute-instance
  placement beside theirs (free slices alone may be scattered).  ``sharedDevices: false`` in the
  configuration publishes exclusive devices only;
- with realize before bind (a setting of the node plugin, passed in as ``binding``), every device
  carries the ``<driver>/realized`` binding condition and the ``<driver>/realization-failed``
  binding failure condition.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.counters import implied_counters
from dra_driver.devicemodel.faults import DeviceTaint
from dra_driver.devicemodel.naming import (
    counter_set_name,
    gpu_device_name,
    mig_device_name,
    profile_name,
    shared_device_name,
)
from dra_driver.devicemodel.vocabulary import (
    CAPACITIES,
    COMPUTE_SLICES_CAPACITY,
    SHARED_ATTRIBUTE,
    STANDARD_DOMAIN,
    BindingConditions,
    DeviceType,
    ValueType,
    memory_slice_counter,
)
from dra_driver.host.pci import normalise_pci_bus_id
from dra_driver.mig.catalog import (
    RESOURCE_FIELDS,
    GpuModel,
    MigCatalog,
    Placement,
    load_catalog,
    resource_amounts,
    resource_budget,
)
from dra_driver.mig.compute_placement import placeable_share_sizes
from dra_driver.nvml.types import GpuInstanceInfo, GpuInstanceProfileInfo, GpuInventory, NodeInventory

# NVML_DEVICE_ARCH_* -> the name published in the `architecture` attribute.
_ARCHITECTURE_NAMES = {7: "Ampere", 8: "Ada", 9: "Hopper", 10: "Blackwell"}

# NVML_BRAND_* -> the name published in the `brand` attribute: NVIDIA's DRA driver's spelling (from its
# NVML helper library, go-nvlib), so selectors written for it compare the same strings.
_BRAND_NAMES = {
    0: "Unknown",
    1: "Quadro",
    2: "Tesla",
    3: "NVS",
    4: "Grid",
    5: "GeForce",
    6: "Titan",
    7: "NvidiaVApps",
    8: "NvidiaVPC",
    9: "NvidiaVCS",
    10: "NvidiaVWS",
    11: "NvidiaCloudGaming",
    12: "QuadroRTX",
    13: "NvidiaRTX",
    14: "Nvidia",
    15: "GeForceRTX",
    16: "TitanRTX",
}

# NVML_DEVICE_ADDRESSING_MODE_* -> the `addressingMode` attribute, spelt as NVIDIA's driver does.
_ADDRESSING_MODE_NAMES = {0: "None", 1: "HMM", 2: "ATS"}

# catalog/NVML resource field -> its published capacity and counter.
_CAPACITY_OF_FIELD = {spec.resource_field: spec for spec in CAPACITIES}
assert set(_CAPACITY_OF_FIELD) == set(RESOURCE_FIELDS), "every GPU resource is published, once"

AttributeValue = tuple[ValueType, int | bool | str]
SharedGpuInstance = tuple[str, int, Placement]
"""A shared GPU instance by where it is: (GPU UUID, GI profile ID, GI placement)."""


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    """A capacity's ``requestPolicy`` on a shared device: what one share may consume of it.

    kube-scheduler consumes a capacity a request does not name at the policy's ``default`` (in full
    when there is no policy, which would let one sharer in), and rounds a request up to the next of
    ``valid_values`` (ascending; above all of them the device does not fit)."""

    default: int
    valid_values: tuple[int, ...]

    def to_api(self) -> dict[str, object]:
        return {"default": str(self.default), "validValues": [str(value) for value in self.valid_values]}


NOTHING_PER_SHARE = RequestPolicy(0, (0,))
"""The policy of a shared device's capacities that describe the whole GPU instance (memory, SMs,
engines): a share consumes none of them, every sharer uses all of the instance's."""


@dataclass(frozen=True, slots=True)
class Device:
    """One published device: a MIG (profile, placement) -- exclusive, or shared by several claims -- or a
    whole GPU."""

    name: str
    type: DeviceType
    gpu_uuid: str
    gpu_minor: int
    attributes: Mapping[str, AttributeValue]
    capacity: Mapping[str, int]
    profile_name: str | None = None
    profile_id: int | None = None
    placement: Placement | None = None
    compute_slices: int = 0
    counter_set: str | None = None
    consumes: Mapping[str, int] = field(default_factory=dict)
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    taints: tuple[DeviceTaint, ...] = ()  # GPU faults (dra_driver.devicemodel.taints.taint_pool)
    shared: bool = False  # a shared GPU-instance device: allowMultipleAllocations, one CI per claim
    request_policies: Mapping[str, RequestPolicy] = field(default_factory=dict)  # capacity -> policy (shared)

    def to_api(self) -> dict[str, object]:
        """The ``resource.k8s.io/v1`` Device object."""
        capacity: dict[str, object] = {}
        for key, value in self.capacity.items():
            entry: dict[str, object] = {"value": str(value)}
            policy = self.request_policies.get(key)
            if policy is not None:
                entry["requestPolicy"] = policy.to_api()
            capacity[key] = entry
        body: dict[str, object] = {
            "name": self.name,
            "attributes": {key: {kind.value: value} for key, (kind, value) in self.attributes.items()},
            "capacity": capacity,
        }
        if self.shared:
            body["allowMultipleAllocations"] = True
        if self.counter_set is not None:
            body["consumesCounters"] = [
                {"counterSet": self.counter_set, "counters": {k: {"value": str(v)} for k, v in self.consumes.items()}}
            ]
        if self.binding_conditions:
            body["bindingConditions"] = list(self.binding_conditions)
        if self.binding_failure_conditions:
            body["bindingFailureConditions"] = list(self.binding_failure_conditions)
        if self.taints:
            body["taints"] = [taint.to_api() for taint in self.taints]
        return body


@dataclass(frozen=True, slots=True)
class CounterSet:
    """A GPU's shared counters: its memory slices and what it has of each SM / engine / memory."""

    name: str
    gpu_minor: int
    memory_slices: int
    counters: Mapping[str, int]

    def to_api(self) -> dict[str, object]:
        return {"name": self.name, "counters": {k: {"value": str(v)} for k, v in self.counters.items()}}


@dataclass(frozen=True, slots=True)
class ForeignInstance:
    """A GPU instance on the node that migdra did not create: left alone, its placement withheld."""

    gpu_uuid: str
    gpu_minor: int
    gpu_instance_id: int
    profile_id: int
    profile_name: str
    placement: Placement


@dataclass(frozen=True, slots=True)
class OwnedInstances:
    """The GPU instances migdra created, as one read of its records names them: by GI ID once NVML
    returned it, by (GPU UUID, GI profile ID, placement) while NVML is being asked.

    One value from one read, because the record swaps a placement for its ID in one step: two separate
    reads (IDs, then placements) can fall on either side of that swap and name the instance in neither."""

    instances: frozenset[tuple[str, int]] = frozenset()
    placements: frozenset[tuple[str, int, Placement]] = frozenset()

    def __or__(self, other: OwnedInstances) -> OwnedInstances:
        return OwnedInstances(self.instances | other.instances, self.placements | other.placements)


@dataclass(frozen=True, slots=True)
class _Ownership:
    """Which GPU instances are migdra's: recorded by ID, or being created at a recorded placement; and
    the compute instances its shares hold in each shared GPU instance."""

    instances: frozenset[tuple[str, int]]
    placements: frozenset[tuple[str, int, Placement]]
    share_compute_instances: Mapping[SharedGpuInstance, tuple[Placement, ...]]

    def owns(self, gpu_uuid: str, gi: GpuInstanceInfo) -> bool:
        return (gpu_uuid, gi.gpu_instance_id) in self.instances or (
            gpu_uuid,
            gi.profile_id,
            gi.placement,
        ) in self.placements


@dataclass(frozen=True, slots=True)
class NodePool:
    """Everything the node publishes, before it is cut into ResourceSlices."""

    driver_name: str
    devices: tuple[Device, ...]
    counter_sets: tuple[CounterSet, ...]
    foreign_instances: tuple[ForeignInstance, ...] = ()
    excluded_gpus: tuple[str, ...] = ()


def build_pool(
    inventory: NodeInventory,
    config: DeviceModelConfig,
    owned_instances: Iterable[tuple[str, int]] = (),
    catalog: MigCatalog | None = None,
    owned_placements: Iterable[tuple[str, int, Placement]] = (),
    binding: BindingConditions | None = None,
    share_compute_instances: Mapping[SharedGpuInstance, Sequence[Placement]] | None = None,
) -> NodePool:
    """The node's devices and counter sets.

    ``owned_instances``: (GPU UUID, GI ID) of the GPU instances migdra created; ``owned_placements``:
    (GPU UUID, GI profile ID, placement) of those being created whose ID is not known yet.  Any other
    GPU instance is foreign.  ``binding``: the binding conditions every device carries (realize
    before bind; None: none, the scheduler binds at once).  ``share_compute_instances``: the CI
    placements migdra's shares hold (or are about to) in each shared GI, by (GPU UUID, GI profile ID,
    GI placement): a shared device admits only the share sizes still placeable beside them
    (:func:`~dra_driver.mig.compute_placement.placeable_share_sizes`).
    """
    catalog = catalog or load_catalog()
    shares = {key: tuple(placements) for key, placements in (share_compute_instances or {}).items()}
    owned = _Ownership(frozenset(owned_instances), frozenset(owned_placements), shares)
    devices: list[Device] = []
    counter_sets: list[CounterSet] = []
    foreign: list[ForeignInstance] = []
    excluded: list[str] = []
    for entry in sorted(inventory.gpus, key=lambda g: g.gpu.minor_number):
        gpu = entry.gpu
        if config.excludes(gpu.uuid, gpu.pci_bus_id):
            excluded.append(gpu.uuid)
            continue
        model = catalog.identify(gpu.pci_device_id, gpu.name)
        common = _common_attributes(inventory, entry, model)
        if not gpu.mig_enabled:
            devices.append(_whole_gpu_device(entry, model, common))
            continue
        gpu_devices, counter_set, gpu_foreign = _mig_devices(entry, model, common, config, owned)
        devices.extend(gpu_devices)
        counter_sets.append(counter_set)
        foreign.extend(gpu_foreign)
    if binding is not None:
        devices = [
            dataclasses.replace(
                device,
                binding_conditions=binding.conditions,
                binding_failure_conditions=binding.failure_conditions,
            )
            for device in devices
        ]
    return NodePool(config.driver_name, tuple(devices), tuple(counter_sets), tuple(foreign), tuple(excluded))


def _semver(text: str) -> str:
    """A version attribute value: NVML's ``580.65.06`` -> ``580.65.6``; ``13.0`` -> ``13.0.0``."""
    parts = [str(int(p)) for p in text.split(".")[:3] if p.isdigit()]
    return ".".join(parts + ["0"] * (3 - len(parts)))


def _common_attributes(
    inventory: NodeInventory, entry: GpuInventory, model: GpuModel | None
) -> dict[str, AttributeValue]:
    gpu = entry.gpu
    architecture = (
        model.architecture.value.capitalize()
        if model is not None
        else _ARCHITECTURE_NAMES.get(gpu.nvml_architecture, f"nvml-{gpu.nvml_architecture}")
    )
    major, minor = gpu.cuda_compute_capability
    attributes: dict[str, AttributeValue] = {
        "productName": (ValueType.STRING, gpu.name),
        "architecture": (ValueType.STRING, architecture),
        "cudaComputeCapability": (ValueType.VERSION, f"{major}.{minor}.0"),
        "driverVersion": (ValueType.VERSION, _semver(inventory.driver_version)),
        "cudaDriverVersion": (ValueType.VERSION, _semver(inventory.cuda_driver_version)),
        f"{STANDARD_DOMAIN}/pciBusID": (ValueType.STRING, normalise_pci_bus_id(gpu.pci_bus_id)),
    }
    if gpu.nvml_brand is not None:
        attributes["brand"] = (ValueType.STRING, _BRAND_NAMES.get(gpu.nvml_brand, f"nvml-{gpu.nvml_brand}"))
    if gpu.nvml_addressing_mode is not None:
        mode = gpu.nvml_addressing_mode
        attributes["addressingMode"] = (ValueType.STRING, _ADDRESSING_MODE_NAMES.get(mode, f"nvml-{mode}"))
    if gpu.pcie_root is not None:
        attributes[f"{STANDARD_DOMAIN}/pcieRoot"] = (ValueType.STRING, gpu.pcie_root)
    if gpu.numa_node is not None:
        attributes[f"{STANDARD_DOMAIN}/numaNode"] = (ValueType.INT, gpu.numa_node)
    return attributes


def _whole_gpu_device(entry: GpuInventory, model: GpuModel | None, common: dict[str, AttributeValue]) -> Device:
    gpu = entry.gpu
    capacity = {"memory": gpu.memory_total_bytes}
    if model is not None:
        budget = model.resource_budget
        for resource_field, spec in _CAPACITY_OF_FIELD.items():
            if spec.name != "memory":
                capacity[spec.name] = budget[resource_field]
        capacity["multiprocessors"] = model.sm_total
    return Device(
        name=gpu_device_name(gpu.minor_number),
        type=DeviceType.GPU,
        gpu_uuid=gpu.uuid,
        gpu_minor=gpu.minor_number,
        attributes={"type": (ValueType.STRING, DeviceType.GPU.value), "uuid": (ValueType.STRING, gpu.uuid), **common},
        capacity=capacity,
    )


def _as_counters(amounts: Mapping[str, int]) -> dict[str, int]:
    """Resource amounts in catalog units (MiB for memory) as counter values (bytes for memory)."""
    return {
        spec.counter: amounts[resource_field] * (2**20 if resource_field == "memory_size_mb" else 1)
        for resource_field, spec in _CAPACITY_OF_FIELD.items()
    }


def _consumption(profile: GpuInstanceProfileInfo) -> dict[str, int]:
    """Counter name -> amount for the SM / engine / memory share of one instance (zeros left out)."""
    return {counter: value for counter, value in _as_counters(resource_amounts(profile)).items() if value}


def _mig_devices(
    entry: GpuInventory,
    model: GpuModel | None,
    common: dict[str, AttributeValue],
    config: DeviceModelConfig,
    owned: _Ownership,
) -> tuple[list[Device], CounterSet, list[ForeignInstance]]:
    gpu = entry.gpu
    profiles_by_id = {p.profile_id: p for p in entry.profiles}
    names = {p.profile_id: profile_name(p, model) for p in entry.profiles}
    foreign_gis: list[GpuInstanceInfo] = [gi for gi in entry.gpu_instances if not owned.owns(gpu.uuid, gi)]

    # The counter set: the whole GPU's slices and resources, less what foreign instances hold.
    slices = max((p.end for profile in entry.profiles for p in profile.placements), default=0)
    taken = {s for gi in foreign_gis for s in gi.placement.slices()}
    available = _as_counters(resource_budget(entry.profiles))
    for gi in foreign_gis:
        if gi.profile_id in profiles_by_id:
            for counter, value in _consumption(profiles_by_id[gi.profile_id]).items():
                available[counter] = max(0, available[counter] - value)
    counters = {memory_slice_counter(i): 0 if i in taken else 1 for i in range(slices)}
    counters.update(available)
    set_name = counter_set_name(gpu.minor_number)

    devices: list[Device] = []
    shared: list[Device] = []
    profile_filter = config.profile_filter(model.key if model else None)
    for profile in entry.profiles:
        name = names[profile.profile_id]
        if not profile_filter.admits(name):
            continue
        consumption = _consumption(profile)
        if any(consumption[c] > available[c] for c in consumption):
            continue  # foreign instances already hold what this profile needs
        for placement in profile.placements:
            if any(placement.overlaps(gi.placement) for gi in foreign_gis):
                continue
            consumes = {memory_slice_counter(i): 1 for i in placement.slices()}
            consumes.update(consumption)
            devices.append(
                Device(
                    name=mig_device_name(gpu.minor_number, name, profile.profile_id, placement.start),
                    type=DeviceType.MIG,
                    gpu_uuid=gpu.uuid,
                    gpu_minor=gpu.minor_number,
                    attributes={
                        "type": (ValueType.STRING, DeviceType.MIG.value),
                        "profile": (ValueType.STRING, name),
                        "parentUUID": (ValueType.STRING, gpu.uuid),
                        **common,
                        "placementStart": (ValueType.INT, placement.start),
                        "placementSize": (ValueType.INT, placement.size),
                        "computeSlices": (ValueType.INT, profile.slice_count),
                    },
                    capacity={spec.name: consumption.get(spec.counter, 0) for spec in CAPACITIES},
                    profile_name=name,
                    profile_id=profile.profile_id,
                    placement=placement,
                    compute_slices=profile.slice_count,
                    counter_set=set_name,
                    consumes=consumes,
                )
            )
            sizes = _share_sizes(model, profile.profile_id) if config.shared_devices else ()
            if sizes and model is not None:
                present = owned.share_compute_instances.get((gpu.uuid, profile.profile_id, placement), ())
                if present:
                    sizes = placeable_share_sizes(model.profile_by_id(profile.profile_id), present)
                name_shared = shared_device_name(gpu.minor_number, name, profile.profile_id, placement.start)
                shared.append(_shared_device(devices[-1], name_shared, sizes))
    devices.extend(shared)  # after the GPU's exclusive devices: a stable order for every policy
    # Counters the memory slices imply cost kube-scheduler time on every node it filters and refuse nothing.
    implied = implied_counters(
        [(frozenset(d.placement.slices()), d.consumes) for d in devices if d.placement is not None], available
    )
    if implied:
        counters = {name: value for name, value in counters.items() if name not in implied}
        devices = [
            dataclasses.replace(d, consumes={c: v for c, v in d.consumes.items() if c not in implied}) for d in devices
        ]
    foreign = [
        ForeignInstance(
            gpu_uuid=gpu.uuid,
            gpu_minor=gpu.minor_number,
            gpu_instance_id=gi.gpu_instance_id,
            profile_id=gi.profile_id,
            profile_name=names.get(gi.profile_id, f"profile-{gi.profile_id}"),
            placement=gi.placement,
        )
        for gi in foreign_gis
    ]
    return devices, CounterSet(set_name, gpu.minor_number, slices, counters), foreign


def _share_sizes(model: GpuModel | None, profile_id: int) -> tuple[int, ...]:
    """The share sizes of a GI profile (empty: no shared device): only for a model and profile the catalog
    knows, since a share's compute-instance profile comes from the catalog."""
    if model is None:
        return ()
    try:
        return model.profile_by_id(profile_id).share_sizes
    except KeyError:
        return ()


def _shared_device(exclusive: Device, name: str, sizes: tuple[int, ...]) -> Device:
    """The shared device ``name`` of ``exclusive``'s placement: its attributes plus ``shared``, its
    counters, its capacities at no cost per share, and ``computeSlices`` divided among shares of ``sizes``."""
    policies = dict.fromkeys(exclusive.capacity, NOTHING_PER_SHARE)
    policies[COMPUTE_SLICES_CAPACITY] = RequestPolicy(sizes[0], sizes)
    return dataclasses.replace(
        exclusive,
        name=name,
        attributes={**exclusive.attributes, SHARED_ATTRIBUTE: (ValueType.BOOL, True)},
        capacity={**exclusive.capacity, COMPUTE_SLICES_CAPACITY: exclusive.compute_slices},
        shared=True,
        request_policies=policies,
    )
