"""Replay a trace of claims against kube-scheduler's allocator and a placement policy, as a cluster would.

Each simulated node publishes its pool exactly as the node plugin does: the device model of its GPUs
(:func:`~dra_driver.devicemodel.pool.build_pool` on the inventory a fresh node reports), cut into
slices by the policy (:func:`~dra_driver.devicemodel.layout.plan_slices`) and re-published -- at a
new pool generation -- whenever an occupancy-aware policy's order changes.  A re-publish becomes
visible to the scheduler ``lag`` allocations later (the plugin's watch, debounce and writes take time;
a burst of pods is scheduled meanwhile); allocations themselves are seen at once, as the scheduler's
assume cache does.

Each arrival is one ResourceClaim handed to :func:`dra_driver.tools.allocation.allocate` -- the ported
structured allocator, with the 1.36+ order (pools and slices sorted) or the 1.35 one (shuffled by a
seeded ``rng``) -- node by node in the arrival's node order, until one fits.  The :class:`Oracle`
run replays the same trace with repacking: an arrival is accepted whenever *some* packing of every
live instance and the new one exists (:class:`~dra_driver.tools.packing.oracle.RepackingOracle`), an upper
bound no placement policy can beat.

Claims for shared GPU-instance devices (``mig-shared.migdra.io``) go through the same allocator with
DRAConsumableCapacity on, as in kube-scheduler 1.36: the allocated claims handed to it carry each
share's ``shareID`` and ``consumedCapacity``, so a shared device takes further shares while its
``computeSlices`` last and pays its counters once.  A node counts a shared device's memory slices once
however many shares hold it, and the compute slices in use as the shares' sizes (an exclusive device:
its GPU instance's).  The repacking oracle models exclusive devices only; for shares the comparison is
:func:`run_bound`, a simple upper bound from compute slices and memory.

Measured over the arrivals after the warm-up: acceptance, time-averaged memory-slice utilisation,
the share of time a 7g could have been placed, and the slice writes per allocation; fill traces also
give the pods placed per GPU and the share of the compute slices in use at the first reject.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.examples import example_inventory
from dra_driver.devicemodel.fragmentation import fits, free_slices
from dra_driver.devicemodel.layout import plan_slices, render_planned
from dra_driver.devicemodel.policy import DynamicPlacementPolicy, PlacementPolicy, placement_policy
from dra_driver.devicemodel.pool import Device, NodePool, build_pool
from dra_driver.devicemodel.vocabulary import COMPUTE_SLICES_CAPACITY, DEFAULT_DRIVER_NAME
from dra_driver.jsontypes import JSON
from dra_driver.resourceclaim import (
    DeviceRequestAllocationResult,
    ObjectMetaView,
    ResourceClaimSpecView,
    ResourceClaimStatusView,
    ResourceClaimView,
)
from dra_driver.tools.allocation import DEFAULT_FEATURES, allocate
from dra_driver.tools.cel import compile_selector
from dra_driver.tools.packing.oracle import RepackingOracle, RequestType
from dra_driver.tools.packing.workloads import (
    KINDS,
    SEVEN_G,
    Asked,
    ClaimKind,
    ClaimShape,
    ClusterShape,
    PodKind,
    Trace,
)

SORTED = "1.36"  # pools and slices by name
SHUFFLED = "1.35"  # pools and slices in informer / map order
ALLOCATOR_ORDERS = (SORTED, SHUFFLED)


@dataclass
class Outcome:
    """What one run measured (the window after the warm-up)."""

    arrivals: int = 0
    accepted: int = 0
    slice_time: float = 0.0  # ∫ used memory slices dt
    seven_g_time: float = 0.0  # ∫ [a 7g could be placed] dt
    window: float = 0.0
    allocations: int = 0  # all of them, warm-up included
    republishes: int = 0
    slice_writes: int = 0
    total_slices: int = 0
    filled_slices: int = 0  # fill traces: memory slices in use at the first reject
    fill: bool = False  # a fill-until-first-reject trace: utilisation is the share filled at the reject
    offered_by_kind: Counter[str] = field(default_factory=Counter)  # measured arrivals per kind
    accepted_by_kind: Counter[str] = field(default_factory=Counter)
    offered_slices: int = 0  # memory slices the measured arrivals asked for
    accepted_slices: int = 0  # of them, those placed
    gpus: int = 0
    total_compute_slices: int = 0
    filled_compute_slices: int = 0  # fill traces: compute slices in use at the first reject

    @property
    def pods_per_gpu(self) -> float:
        """Fill traces: the claims placed before the first reject, per GPU (each claim is one pod)."""
        return self.allocations / self.gpus if self.fill and self.gpus else 0.0

    @property
    def compute_use(self) -> float:
        """Fill traces: the share of the cluster's compute slices in use at the first reject."""
        return self.filled_compute_slices / self.total_compute_slices if self.total_compute_slices else 0.0

    @property
    def slice_acceptance(self) -> float:
        """Acceptance weighted by size: a rejected 7g counts as eight rejected 1g."""
        return self.accepted_slices / self.offered_slices if self.offered_slices else 1.0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.arrivals if self.arrivals else 1.0

    @property
    def utilisation(self) -> float:
        if not self.total_slices:
            return 0.0
        if self.fill:
            return self.filled_slices / self.total_slices
        if self.window <= 0:
            return 0.0
        return self.slice_time / (self.window * self.total_slices)

    @property
    def seven_g(self) -> float:
        return self.seven_g_time / self.window if self.window > 0 else 0.0

    @property
    def writes_per_allocation(self) -> float:
        return self.slice_writes / self.allocations if self.allocations else 0.0


@dataclass
class _Window:
    """The measurement window of a replay: time-weighted used slices and 7g availability from ``start``."""

    outcome: Outcome
    start: float
    clock: float = 0.0

    def account(self, until: float, used: Callable[[], int], seven_g: Callable[[], bool]) -> None:
        """Add the span from the last event to ``until``, with the state as it was during it."""
        begin = max(self.clock, self.start)
        if until > begin:
            span = until - begin
            self.outcome.window += span
            self.outcome.slice_time += span * used()
            if seven_g():
                self.outcome.seven_g_time += span
        self.clock = max(self.clock, until)


def node_object(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}


# (node name, GPU models, driver, shared devices) -> the pool and its device dicts.  Shared by every run in the process:
# the pool is a pure function of these, and the same device dict lets the allocator's CEL activation
# and verdict caches (keyed by the dict's identity, as kube-scheduler's by its informer's objects) carry
# from one policy's run to the next instead of converting every device again.
_POOLS: dict[tuple[str, tuple[str, ...], str, bool], tuple[NodePool, dict[str, dict[str, object]]]] = {}


def _pool_of(
    name: str, models: Sequence[str], driver: str, shared_devices: bool
) -> tuple[NodePool, dict[str, dict[str, object]]]:
    key = (name, tuple(models), driver, shared_devices)
    if key not in _POOLS:
        config = DeviceModelConfig(driver_name=driver, shared_devices=shared_devices)
        pool = build_pool(example_inventory(list(models)), config)
        _POOLS[key] = (pool, {device.name: device.to_api() for device in pool.devices})
    return _POOLS[key]


class SimNode:
    """One node: its pool, the slices the scheduler sees, and the claims allocated on it."""

    def __init__(
        self,
        name: str,
        models: Sequence[str],
        policy: PlacementPolicy,
        driver: str,
        lag: int,
        *,
        shared_devices: bool = False,
    ) -> None:
        self.name = name
        self.node = node_object(name)
        self.pool, self._api = _pool_of(
            name, models, driver, shared_devices
        )  # device name -> its dict, the same in every publish
        self.policy = policy
        self.lag = lag
        self.by_name: dict[str, Device] = {device.name: device for device in self.pool.devices}
        self.claims: dict[str, ResourceClaimView] = {}  # uid -> allocated claim
        self.held: dict[str, tuple[str, ...]] = {}  # uid -> device names
        self.computing: dict[str, int] = {}  # uid -> compute slices its compute instances have
        self.generation = 0
        self.visible: list[dict[str, Any]] = []
        self._pending: list[tuple[int, list[dict[str, Any]]]] = []
        self._last_order: tuple[tuple[str, ...], ...] | None = None
        self.republishes = 0
        self.slice_writes = 0
        self.memory_slices = sum(cs.memory_slices for cs in self.pool.counter_sets)
        self.publish(0)

    def _device_api(self, device: Device) -> dict[str, object]:
        return self._api[device.name]

    @property
    def allocated(self) -> frozenset[str]:
        return frozenset(name for names in self.held.values() for name in names)

    def publish(self, allocation_count: int) -> None:
        """Render the pool with the current occupancy; a changed device order is a new generation."""
        contents = plan_slices(self.pool, self.name, self.policy, self.allocated)
        order = tuple(tuple(d.name for d in c.devices) for c in contents)
        if order == self._last_order:
            return
        first = self._last_order is None
        self._last_order = order
        self.generation += 1
        slices = render_planned(contents, self.pool, self.name, self.generation, device_api=self._device_api)
        if first:
            self.visible = slices
            return
        self.republishes += 1
        self.slice_writes += len(slices)  # the publisher writes every slice at the new generation
        if self.lag <= 0:
            self.visible = slices
        else:
            self._pending.append((allocation_count + self.lag, slices))

    def advance(self, allocation_count: int) -> None:
        """Make visible what was published ``lag`` allocations ago."""
        while self._pending and self._pending[0][0] <= allocation_count:
            self.visible = self._pending.pop(0)[1]

    def try_allocate(
        self, claim: ResourceClaimView, classes: Sequence[JSON], rng: random.Random | None
    ) -> dict[str, Any] | None:
        results = allocate([claim], self.node, self.visible, classes, self.claims.values(), DEFAULT_FEATURES, rng)
        return None if results is None else results[0]

    def add(self, uid: str, claim: ResourceClaimView, allocation: dict[str, Any]) -> None:
        """Hold ``claim`` with ``allocation`` (what :meth:`try_allocate` answered) as its status."""
        allocated = claim.model_copy(
            update={"status": ResourceClaimStatusView.model_validate({"allocation": allocation})}
        )
        self.claims[uid] = allocated
        self.held[uid] = tuple(r.device for r in allocated.results)
        self.computing[uid] = sum(self._compute_slices(r) for r in allocated.results)

    def _compute_slices(self, result: DeviceRequestAllocationResult) -> int:
        """A share: the compute slices it consumed (its compute instance); else the device's GPU instance's."""
        if result.share:
            return self.share_size(result)
        return self.by_name[result.device].compute_slices

    @staticmethod
    def share_size(result: DeviceRequestAllocationResult) -> int:
        """The compute slices a share's result consumed (``computeSlices``, bare or driver-qualified)."""
        return int(result.consumed(COMPUTE_SLICES_CAPACITY, result.driver) or 0)

    def remove(self, uid: str) -> None:
        self.claims.pop(uid, None)
        self.held.pop(uid, None)
        self.computing.pop(uid, None)

    def used_slices(self) -> int:
        """Memory slices the held devices cover: a shared device once, however many shares hold it."""
        total = 0
        for name in self.allocated:
            placement = self.by_name[name].placement
            total += placement.size if placement is not None else 0
        return total

    def used_compute_slices(self) -> int:
        return sum(self.computing.values())

    def can_place(self, wanted: Iterable[Device]) -> bool:
        """Whether any of ``wanted`` (this pool's devices) fits the memory slices now."""
        free = free_slices(self.pool, self.allocated)
        return any(fits(device, free) for device in wanted)


@dataclass
class Cluster:
    """The simulated nodes of one run."""

    shape: ClusterShape
    policy_name: str
    driver: str = DEFAULT_DRIVER_NAME
    lag: int = 0
    order: str = SORTED
    nodes: list[SimNode] = field(init=False)

    def __post_init__(self) -> None:
        self.nodes = [
            SimNode(
                f"node-{index + 1}",
                models,
                self._policy(),
                self.driver,
                self.lag,
                shared_devices=self.shape.shared_devices,
            )
            for index, models in enumerate(self.shape.nodes)
        ]

    def _policy(self) -> PlacementPolicy:
        """The policy as the node plugin publishes with it for the allocator's order: on 1.35 (slices
        shuffled) ``dynamic`` is not interleaved (kubeletplugin/control_plane_version.py)."""
        policy = placement_policy(self.policy_name)
        if isinstance(policy, DynamicPlacementPolicy) and self.order == SHUFFLED:
            policy.interleave = False
        return policy


def matching_devices(kind: ClaimKind, node: SimNode, driver: str) -> list[Device]:
    program = compile_selector(kind.expression(driver))
    return [d for d in node.pool.devices if d.placement is not None and program.matches(d.to_api(), driver=driver)]


def run_policy(
    trace: Trace,
    shape: ClusterShape,
    policy_name: str,
    classes: Sequence[JSON],
    *,
    order: str = SORTED,
    seed: int = 0,
    lag: int = 0,
    driver: str = DEFAULT_DRIVER_NAME,
    kinds: Mapping[str, ClaimShape] = KINDS,
) -> Outcome:
    """Replay ``trace`` on a fresh cluster of ``shape`` whose nodes publish with ``policy_name``."""
    cluster = Cluster(shape, policy_name, driver, lag, order)
    rng = random.Random(seed) if order == SHUFFLED else None
    specs = {name: ResourceClaimSpecView.model_validate(kind.spec(driver)) for name, kind in kinds.items()}  # read once
    seven_kind = kinds.get(SEVEN_G)
    seven = (
        [matching_devices(seven_kind, node, driver) for node in cluster.nodes]
        if isinstance(seven_kind, ClaimKind)
        else [[] for _ in cluster.nodes]
    )
    outcome = Outcome(
        total_slices=sum(node.memory_slices for node in cluster.nodes),
        fill=not trace.departures,
        gpus=len(shape.gpu_models),
        total_compute_slices=shape.compute_slices(),
    )
    departures: list[tuple[float, int, int, str]] = []
    window = _Window(outcome, trace.measured_from)
    count = 0

    def account(until: float) -> None:
        window.account(
            until,
            lambda: sum(node.used_slices() for node in cluster.nodes),
            lambda: any(node.can_place(devices) for node, devices in zip(cluster.nodes, seven, strict=True)),
        )

    for index, arrival in enumerate(trace.arrivals):
        while departures and departures[0][0] <= arrival.time:
            at, _, node_index, uid = heapq.heappop(departures)
            account(at)
            node = cluster.nodes[node_index]
            node.remove(uid)
            if node.policy.uses_occupancy:
                node.publish(count)
        account(arrival.time)
        for node in cluster.nodes:
            node.advance(count)
        uid = f"claim-{index}"
        claim = ResourceClaimView(
            metadata=ObjectMetaView(name=uid, namespace="bench", uid=uid), spec=specs[arrival.kind]
        )
        placed = None
        for node_index in arrival.node_order:
            allocation = cluster.nodes[node_index].try_allocate(claim, classes, rng)
            if allocation is not None:
                placed = node_index
                break
        measured = index >= trace.warmup
        outcome.arrivals += measured
        outcome.offered_slices += measured * kinds[arrival.kind].memory_slices
        outcome.offered_by_kind[arrival.kind] += measured
        if placed is None:
            if not trace.departures:  # fill until the first reject
                break
            continue
        outcome.accepted += measured
        outcome.accepted_slices += measured * kinds[arrival.kind].memory_slices
        outcome.accepted_by_kind[arrival.kind] += measured
        node = cluster.nodes[placed]
        node.add(uid, claim, allocation)  # type: ignore[arg-type]  # placed: the loop found an allocation
        count += 1
        if node.policy.uses_occupancy:
            node.publish(count)
        if trace.departures:
            heapq.heappush(departures, (arrival.time + arrival.lifetime, index, placed, uid))
    if not trace.departures:
        outcome.filled_slices = sum(node.used_slices() for node in cluster.nodes)
        outcome.filled_compute_slices = sum(node.used_compute_slices() for node in cluster.nodes)
    outcome.allocations = count
    outcome.republishes = sum(node.republishes for node in cluster.nodes)
    outcome.slice_writes = sum(node.slice_writes for node in cluster.nodes)
    return outcome


def request_types(
    shape: ClusterShape, kinds: Mapping[str, ClaimKind | PodKind], driver: str = DEFAULT_DRIVER_NAME
) -> list[RequestType]:
    """Per kind, the profiles its selector accepts on each GPU model of the cluster (evaluated, not assumed)."""
    return accepted_profiles(shape, {name: [kind.expression(driver)] for name, kind in kinds.items()}, driver)


def accepted_profiles(
    shape: ClusterShape, selectors: Mapping[str, Sequence[str]], driver: str = DEFAULT_DRIVER_NAME
) -> list[RequestType]:
    """Per name, the profiles on each GPU model of the cluster that all of its CEL ``selectors`` accept."""
    programs = {name: [compile_selector(e) for e in expressions] for name, expressions in selectors.items()}
    accepted: dict[str, dict[str, frozenset[str]]] = {name: {} for name in selectors}
    for model in sorted(set(shape.gpu_models)):
        config = DeviceModelConfig(driver_name=driver, shared_devices=shape.shared_devices)
        pool = build_pool(example_inventory([model]), config)
        for name, compiled in programs.items():
            accepted[name][model] = frozenset(
                d.profile_name
                for d in pool.devices
                if d.profile_name is not None and all(p.matches(d.to_api(), driver=driver) for p in compiled)
            )
    return [RequestType(name, profiles) for name, profiles in accepted.items()]


def selects_shared(
    shape: ClusterShape, selectors: Mapping[str, Sequence[str]], driver: str = DEFAULT_DRIVER_NAME
) -> bool:
    """Whether some name's CEL ``selectors`` all accept a shared GPU-instance device of the cluster's models."""
    programs = [[compile_selector(e) for e in expressions] for expressions in selectors.values()]
    for model in sorted(set(shape.gpu_models)):
        config = DeviceModelConfig(driver_name=driver, shared_devices=shape.shared_devices)
        pool = build_pool(example_inventory([model]), config)
        for device in pool.devices:
            if device.shared and any(all(p.matches(device.to_api(), driver=driver) for p in c) for c in programs):
                return True
    return False


def run_oracle(
    trace: Trace,
    shape: ClusterShape,
    *,
    driver: str = DEFAULT_DRIVER_NAME,
    kinds: Mapping[str, ClaimShape] = KINDS,
    oracle: RepackingOracle | None = None,
) -> Outcome:
    """Replay ``trace`` with repacking: accept whenever some packing of the live instances and the new one exists."""
    oracle = oracle or RepackingOracle(shape.gpu_models, request_types(shape, _selector_kinds(kinds), driver))
    live: Counter[str] = Counter()
    outcome = Outcome(total_slices=shape.memory_slices(), fill=not trace.departures, gpus=len(shape.gpu_models))
    departures: list[tuple[float, int, str]] = []
    window = _Window(outcome, trace.measured_from)
    seven_possible = isinstance(kinds.get(SEVEN_G), ClaimKind) and oracle_accepts(oracle, {SEVEN_G: 1})

    def used() -> int:
        return sum(kinds[name].memory_slices * n for name, n in live.items())

    def account(until: float) -> None:
        window.account(
            until, used, lambda: seven_possible and oracle_accepts(oracle, {**live, SEVEN_G: live[SEVEN_G] + 1})
        )

    for index, arrival in enumerate(trace.arrivals):
        while departures and departures[0][0] <= arrival.time:
            at, _, name = heapq.heappop(departures)
            account(at)
            live[name] -= 1
        account(arrival.time)
        measured = index >= trace.warmup
        outcome.arrivals += measured
        outcome.offered_slices += measured * kinds[arrival.kind].memory_slices
        outcome.offered_by_kind[arrival.kind] += measured
        wanted = {**live, arrival.kind: live[arrival.kind] + 1}
        if not oracle_accepts(oracle, wanted):
            if not trace.departures:
                outcome.filled_slices = used()
                break
            continue
        outcome.accepted += measured
        outcome.accepted_slices += measured * kinds[arrival.kind].memory_slices
        outcome.accepted_by_kind[arrival.kind] += measured
        outcome.allocations += 1
        live[arrival.kind] += 1
        if trace.departures:
            heapq.heappush(departures, (arrival.time + arrival.lifetime, index, arrival.kind))
    else:
        if not trace.departures:
            outcome.filled_slices = used()
    return outcome


def _selector_kinds(kinds: Mapping[str, ClaimShape]) -> dict[str, ClaimKind | PodKind]:
    """The kinds given by one exclusive device's selector (the oracle needs one; a user's claims come with
    their own oracle, and shares have none: the oracle packs GPU instances, not compute instances)."""
    selectors: dict[str, ClaimKind | PodKind] = {
        name: kind
        for name, kind in kinds.items()
        if isinstance(kind, ClaimKind) or (isinstance(kind, PodKind) and kind.asked is Asked.EXCLUSIVE)
    }
    if len(selectors) != len(kinds):
        raise ValueError(
            "the repacking oracle models exclusive devices given by a selector only; for others pass oracle=..."
        )
    return selectors


def run_bound(trace: Trace, shape: ClusterShape, kinds: Mapping[str, PodKind]) -> Outcome:
    """A fill trace of pods against a simple upper bound: the longest prefix whose compute slices and
    memory fit the cluster's totals (every pod's compute instance has at least its compute slices, and
    the compute instances of a GPU have at most the GPU's; every pod's memory lies in GPU instances whose
    memory adds up to at most the GPU's largest instance's).  No placement -- exclusive or shared, any
    policy, any repacking -- places more of the trace; it ignores placements, memory slices and how many
    instances of a profile fit, so it may be well above what any could place."""
    if trace.departures:
        raise ValueError("the compute and memory bound is defined for fill traces (nothing leaves) only")
    compute = shape.compute_slices()
    memory = shape.mig_memory_gib()
    outcome = Outcome(
        total_slices=shape.memory_slices(), fill=True, gpus=len(shape.gpu_models), total_compute_slices=compute
    )
    used_compute = 0
    used_memory = 0.0
    for arrival in trace.arrivals:
        kind = kinds[arrival.kind]
        outcome.arrivals += 1
        outcome.offered_by_kind[arrival.kind] += 1
        if used_compute + kind.compute_slices > compute or used_memory + kind.memory_gib > memory:
            break
        used_compute += kind.compute_slices
        used_memory += kind.memory_gib
        outcome.accepted += 1
        outcome.accepted_by_kind[arrival.kind] += 1
        outcome.allocations += 1
    outcome.filled_compute_slices = used_compute
    return outcome


def oracle_accepts(oracle: RepackingOracle, demand: Mapping[str, int]) -> bool:
    return oracle.feasible({name: count for name, count in demand.items() if count > 0})
