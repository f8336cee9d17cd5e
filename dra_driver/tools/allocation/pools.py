"""``GatherPools``: the resource pools a node can use, in the order the search will try them.

Slices are grouped by (driver, pool name); only the highest ``pool.generation`` counts.  A pool is
*incomplete* while fewer slices of that generation exist (in the whole cluster) than
``resourceSliceCount`` says, *obsolete* (ignored) when a newer generation exists elsewhere, and
*invalid* with duplicate device names, duplicate counter sets, or a device consuming a counter set or
counter that does not exist.  Incomplete and invalid pools are kept as markers: ``All`` requests fail
on them, other requests skip them.

Order: kube-scheduler 1.36+ sorts pools by (driver, pool) with pools that have devices with binding
conditions last, and slices inside a pool by name.  With an ``rng`` (1.35, the ``stable`` variant)
the order is whatever the informer and Go map gave: we shuffle.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dra_driver.jsontypes import JSON
from dra_driver.tools.allocation.devices import device_fields
from dra_driver.tools.allocation.errors import AllocationError
from dra_driver.tools.allocation.features import Features
from dra_driver.tools.allocation.nodes import node_matches, node_name
from dra_driver.tools.allocation.quantities import Amount, amount_of

PoolID = tuple[str, str]


@dataclass(slots=True)
class Pool:
    driver: str
    name: str
    incomplete: bool = False
    invalid: bool = False
    invalid_reason: str = ""
    slices: list[JSON] = field(default_factory=list)  # device slices relevant for the node
    other_slices: list[JSON] = field(default_factory=list)  # same generation, not for this node
    counter_sets: dict[str, dict[str, Amount]] = field(default_factory=dict)
    counter_set_slices: dict[str, str] = field(default_factory=dict)  # counter set -> the slice that publishes it
    _devices: dict[str, JSON] | None = field(default=None, repr=False)

    @property
    def id(self) -> PoolID:
        return (self.driver, self.name)

    @property
    def label(self) -> str:
        return f"{self.driver}/{self.name}"

    @property
    def usable(self) -> bool:
        return not (self.incomplete or self.invalid)

    def devices_by_name(self) -> dict[str, JSON]:
        """Every device of the pool's slices (also those not for this node) by name."""
        if self._devices is None:
            self._devices = {
                str(device.get("name") or ""): device
                for resource_slice in (*self.slices, *self.other_slices)
                for device in _devices(spec_of(resource_slice))
            }
        return self._devices


def spec_of(resource_slice: JSON) -> JSON:
    return resource_slice.get("spec") or {}


def slice_name(resource_slice: JSON) -> str:
    return str((resource_slice.get("metadata") or {}).get("name") or "")


def _pool_of(spec: JSON) -> JSON:
    return spec.get("pool") or {}


def _generation(spec: JSON) -> int:
    return int(_pool_of(spec).get("generation") or 0)


def _devices(spec: JSON) -> Sequence[JSON]:
    return spec.get("devices") or ()


def _device_node_fields(device: JSON) -> tuple[str, bool, JSON | None]:
    fields = device_fields(device)
    return str(fields.get("nodeName") or ""), bool(fields.get("allNodes")), fields.get("nodeSelector")


def gather_pools(
    slices: Sequence[JSON], node: JSON, features: Features, rng: random.Random | None = None
) -> list[Pool]:
    name = node_name(node)
    on_node = [s for s in slices if spec_of(s).get("nodeName") == name] if name else []
    shared = [s for s in slices if not spec_of(s).get("nodeName")]
    grouped: dict[PoolID, list[JSON]] = {}
    for resource_slice in on_node + shared:
        spec = spec_of(resource_slice)
        if not features.partitionable_devices and (
            spec.get("perDeviceNodeSelection") is not None or spec.get("sharedCounters")
        ):
            continue
        if _relevant(resource_slice, spec, node):
            _add_slice(grouped, resource_slice, spec)

    plain: list[Pool] = []
    with_binding: list[Pool] = []
    for pool_id, pool_slices in grouped.items():
        first = spec_of(pool_slices[0])
        wanted = int(_pool_of(first).get("resourceSliceCount") or 0)
        all_slices: list[JSON] | None = None
        if len(pool_slices) != wanted:
            obsolete, all_slices = _slices_in_pool(slices, pool_id, _generation(first))
            if obsolete:
                continue
            if len(all_slices) != wanted:
                plain.append(Pool(pool_id[0], pool_id[1], incomplete=True))
                continue
        ordered = list(pool_slices)
        if rng is None:
            ordered.sort(key=slice_name)
        else:
            rng.shuffle(ordered)
        pool, binding = _cached_pool(pool_id, ordered, features, all_slices)
        (with_binding if binding else plain).append(pool)

    for group in (plain, with_binding):
        if rng is None:
            group.sort(key=lambda pool: (pool.driver, pool.name))
        else:
            rng.shuffle(group)
    return plain + with_binding


def _relevant(resource_slice: JSON, spec: JSON, node: JSON) -> bool:
    if spec.get("sharedCounters"):
        return True  # needed to use the pool, whatever its node selection
    slice_node = str(spec.get("nodeName") or "")
    all_nodes = bool(spec.get("allNodes"))
    selector = spec.get("nodeSelector")
    try:
        if slice_node or all_nodes or selector is not None:
            return node_matches(node, slice_node, all_nodes, selector)
        if spec.get("perDeviceNodeSelection"):
            return any(node_matches(node, *_device_node_fields(device)) for device in _devices(spec))
    except AllocationError as exc:
        raise AllocationError(
            f"gather pool information: node selection for slice {slice_name(resource_slice)}: {exc}"
        ) from exc
    return False  # some future way of selecting nodes that this version does not know


def _add_slice(grouped: dict[PoolID, list[JSON]], resource_slice: JSON, spec: JSON) -> None:
    pool_id = (str(spec.get("driver") or ""), str(_pool_of(spec).get("name") or ""))
    existing = grouped.get(pool_id)
    if existing is None:
        grouped[pool_id] = [resource_slice]
        return
    generation = _generation(spec)
    current = _generation(spec_of(existing[0]))
    if generation < current:
        return
    if generation > current:
        grouped[pool_id] = [resource_slice]
        return
    existing.append(resource_slice)


def _slices_in_pool(slices: Sequence[JSON], pool_id: PoolID, generation: int) -> tuple[bool, list[JSON]]:
    """``checkSlicesInPool``: (a newer generation exists, every slice of this generation)."""
    found: list[JSON] = []
    for resource_slice in slices:
        spec = spec_of(resource_slice)
        if spec.get("driver") != pool_id[0] or _pool_of(spec).get("name") != pool_id[1]:
            continue
        slice_generation = _generation(spec)
        if slice_generation == generation:
            found.append(resource_slice)
        elif slice_generation > generation:
            return True, []
    return False, found


# Validated pools by the identity of their slices (in order), like the CEL caches: a pool's validation
# and counter sets are a function of its slice dicts, which callers treat as immutable snapshots.
_POOL_CACHE_SIZE = 4096
_pools: dict[tuple[object, ...], tuple[tuple[JSON, ...], Pool, bool]] = {}


def _cached_pool(
    pool_id: PoolID, ordered: list[JSON], features: Features, all_slices: list[JSON] | None
) -> tuple[Pool, bool]:
    """The pool built from these slices and whether it has devices with binding conditions."""
    others = tuple(all_slices) if all_slices is not None else ()
    key = (pool_id, features.partitionable_devices, all_slices is None, *map(id, ordered), None, *map(id, others))
    entry = _pools.get(key)
    sources = (*ordered, *others)
    if (
        entry is not None
        and len(entry[0]) == len(sources)
        and all(a is b for a, b in zip(entry[0], sources, strict=True))
    ):
        return entry[1], entry[2]
    pool = _build_pool(pool_id, ordered, features, all_slices)
    binding = _has_binding_conditions(pool)
    if len(_pools) >= _POOL_CACHE_SIZE:
        _pools.clear()
    _pools[key] = (sources, pool, binding)
    return pool, binding


def _build_pool(pool_id: PoolID, ordered: list[JSON], features: Features, all_slices: list[JSON] | None) -> Pool:
    if features.partitionable_devices:
        counter_slices = [s for s in ordered if spec_of(s).get("sharedCounters")]
        device_slices = [s for s in ordered if not spec_of(s).get("sharedCounters")]
    else:
        counter_slices, device_slices = [], ordered
    problem = _duplicate_device_name(device_slices)
    if problem is None and features.partitionable_devices:
        counter_sets, problem = _counter_sets(counter_slices)
        origins = {
            str(counter_set.get("name") or ""): slice_name(resource_slice)
            for resource_slice in counter_slices
            for counter_set in spec_of(resource_slice).get("sharedCounters") or ()
        }
        if problem is None:
            problem = _unknown_counters(counter_sets, ordered)
        if problem is None and all_slices is not None and len(all_slices) != len(ordered):
            seen = {id(s) for s in ordered}
            others = [s for s in all_slices if id(s) not in seen]
            problem = _unknown_counters(counter_sets, others)
            if problem is None:
                return Pool(
                    *pool_id,
                    slices=device_slices,
                    other_slices=others,
                    counter_sets=counter_sets,
                    counter_set_slices=origins,
                )
        if problem is None:
            return Pool(*pool_id, slices=device_slices, counter_sets=counter_sets, counter_set_slices=origins)
    if problem is not None:
        return Pool(*pool_id, invalid=True, invalid_reason=problem)
    return Pool(*pool_id, slices=device_slices)


def _duplicate_device_name(device_slices: Sequence[JSON]) -> str | None:
    names: set[str] = set()
    for resource_slice in device_slices:
        for device in _devices(spec_of(resource_slice)):
            name = str(device.get("name") or "")
            if name in names:
                return f"duplicate device name {name}"
            names.add(name)
    return None


def _counter_sets(counter_slices: Sequence[JSON]) -> tuple[dict[str, dict[str, Amount]], str | None]:
    sets: dict[str, dict[str, Amount]] = {}
    for resource_slice in counter_slices:
        for counter_set in spec_of(resource_slice).get("sharedCounters") or ():
            name = str(counter_set.get("name") or "")
            if name in sets:
                return sets, f"duplicate counter set name {name}"
            sets[name] = {
                str(counter): amount_of((value or {}).get("value"), f"counter set {name} counter {counter}")
                for counter, value in (counter_set.get("counters") or {}).items()
            }
    return sets, None


def _unknown_counters(counter_sets: Mapping[str, Mapping[str, Amount]], slices: Sequence[JSON]) -> str | None:
    for resource_slice in slices:
        for device in _devices(spec_of(resource_slice)):
            for consumption in device_fields(device).get("consumesCounters") or ():
                set_name = str(consumption.get("counterSet") or "")
                counter_set = counter_sets.get(set_name)
                if counter_set is None:
                    return f"counter set {set_name} not found"
                for counter in consumption.get("counters") or {}:
                    if counter not in counter_set:
                        return f"counter {counter} not found in counter set {set_name}"
    return None


def _has_binding_conditions(pool: Pool) -> bool:
    for resource_slice in pool.slices:
        for device in _devices(spec_of(resource_slice)):
            if device.get("bindingConditions") is not None:
                return True
    return False
