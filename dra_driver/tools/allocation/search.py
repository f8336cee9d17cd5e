"""The depth-first search of kube-scheduler's structured allocator (``allocateOne``/``allocateDevice``).

Claims are allocated one after another, each request (or the chosen ``firstAvailable`` sub-request)
device by device.  For each needed device the pools are walked in order, slices in order, devices in
list order; a candidate that is free, selected, tolerated and within counters, constraints and
capacity is taken tentatively and the search recurses.  The next device of the *same* request
resumes after the previous one (combinations, not permutations); a new request or claim starts at the
first pool again.  The first complete solution wins; on failure every tentative step is undone.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dra_driver.jsontypes import JSON
from dra_driver.quantity import Quantity
from dra_driver.resourceclaim import ExactDeviceRequest, ResourceClaimView
from dra_driver.tools.allocation import capacity
from dra_driver.tools.allocation.constraints import Constraint, DistinctAttribute, MatchAttribute
from dra_driver.tools.allocation.counters import CounterBook
from dra_driver.tools.allocation.devices import Candidate, DeviceFactsCache, DeviceID, device_fields, device_id_text
from dra_driver.tools.allocation.errors import AllocationError
from dra_driver.tools.allocation.features import Features
from dra_driver.tools.allocation.nodes import node_matches
from dra_driver.tools.allocation.pools import Pool, spec_of
from dra_driver.tools.allocation.requests import (
    ALL,
    EXACT_COUNT,
    RequestData,
    RequestSpec,
    claim_label,
)
from dra_driver.tools.allocation.selection import SelectorEvaluator, selector_expression
from dra_driver.tools.allocation.state import AllocatedState, ConsumedCapacity
from dra_driver.tools.allocation.taints import taint_prevents_allocation

RequestKey = tuple[int, int, int]  # claim, request, sub-request
MAX_RESULTS = 32  # resourceapi.AllocationResultsMaxSize


class MaxSizeExceeded(Exception):
    """Not an error: this branch would put more than 32 devices into one claim's result."""


@dataclass(slots=True)
class DeviceResult:
    request: str  # the request, or the sub-request
    parent: str  # the request holding the sub-request, or ""
    candidate: Candidate
    spec: RequestSpec
    admin_access: bool = False
    share_id: str | None = None
    consumed_capacity: dict[str, Quantity] = field(default_factory=dict)  # by published name

    @property
    def request_name(self) -> str:
        return f"{self.parent}/{self.request}" if self.parent else self.request


@dataclass(slots=True)
class _Undo:
    counters_reserved: bool = False
    constraints_added: int = 0
    device_marked: bool = False
    capacity_inserted: bool = False
    capacity_existed: bool = False
    consumed: dict[str, Quantity] = field(default_factory=dict)
    result_added: bool = False
    previous_results: int = 0


class Search:
    """One allocation attempt for one pod's claims on one node."""

    def __init__(
        self,
        claims: Sequence[ResourceClaimView],
        node: JSON,
        pools: list[Pool],
        classes: Mapping[str, JSON],
        allocated: AllocatedState,
        features: Features,
        evaluator: SelectorEvaluator,
        facts: DeviceFactsCache,
    ) -> None:
        self.claims = claims
        self.node = node
        self.pools = pools
        self.classes = classes
        self.allocated = allocated
        self.features = features
        self.evaluator = evaluator
        self.facts = facts
        self.request_data: dict[RequestKey, RequestData] = {}
        self.constraints: list[list[Constraint]] = []
        self.matches: dict[tuple[DeviceID, RequestKey], bool] = {}
        self.allocating: dict[DeviceID, set[int]] = {}
        self.allocating_capacity: dict[DeviceID, ConsumedCapacity] = {}
        self.counters = CounterBook(allocated, facts)
        self.results: list[list[DeviceResult]] = [[] for _ in claims]
        self.steps = 0  # allocateOne invocations: the work the search did

    # -- validation (before the search, as Allocate does) ---------------------------------------

    def validate(self) -> None:
        for claim_index, claim in enumerate(self.claims):
            label = claim_label(claim)
            minimum = 0
            for request_index, request in enumerate(claim.spec.devices.requests):
                name = request.name
                sub_requests = request.first_available
                if sub_requests and not self.features.prioritized_list:
                    raise AllocationError(
                        f"claim {label}, request {name}: has subrequests,"
                        " but the DRAPrioritizedList feature is disabled"
                    )
                exactly = request.exactly
                if not self.features.consumable_capacity:
                    if exactly is not None and exactly.capacity is not None:
                        raise AllocationError(
                            f"claim {label}, request {name}: has capacity requests,"
                            " but the DRAConsumableCapacity feature is disabled"
                        )
                    for sub in sub_requests:
                        if sub.capacity is not None:
                            raise AllocationError(
                                f"claim {label}, subrequest {sub.name}: has capacity requests,"
                                " but the DRAConsumableCapacity feature is disabled"
                            )
                if sub_requests:
                    parent = RequestSpec.exact(name, exactly if exactly is not None else ExactDeviceRequest())
                    fewest = None
                    for sub_index, sub in enumerate(sub_requests):
                        key = (claim_index, request_index, sub_index)
                        data = self._validate_request(RequestSpec.sub(sub), parent, key)
                        self.request_data[key] = data
                        fewest = data.num_devices if fewest is None else min(fewest, data.num_devices)
                    minimum += fewest or 0
                else:
                    if exactly is None:
                        raise AllocationError(
                            f"claim {label}, request {name}: missing device class name (unsupported request type?)"
                        )
                    key = (claim_index, request_index, 0)
                    data = self._validate_request(RequestSpec.exact(name, exactly), None, key)
                    self.request_data[key] = data
                    minimum += data.num_devices
            if minimum > MAX_RESULTS:
                raise AllocationError(
                    f"claim {label}: number of requested devices {minimum} exceeds the claim limit of {MAX_RESULTS}"
                )
            self.constraints.append(self._constraints(claim, label))

    def _validate_request(self, spec: RequestSpec, parent: RequestSpec | None, key: RequestKey) -> RequestData:
        label = claim_label(self.claims[key[0]])
        data = RequestData(request=spec, parent=parent)
        expressions = []
        for index, selector in enumerate(spec.selectors):
            expression = selector_expression(selector) if isinstance(selector, Mapping) else None
            if expression is None:
                raise AllocationError(
                    f"claim {label}, request {spec.name}, selector #{index}:"
                    " CEL expression empty (unsupported selector type?)"
                )
            expressions.append(expression)
        data.request_expressions = tuple(expressions)
        data.claim_owner = f"claim {label}"
        if not self.features.admin_access and spec.has_admin_access:
            raise AllocationError(
                f"claim {label}, request {spec.name}: admin access is requested, but the feature is disabled"
            )
        if not spec.class_name:
            raise AllocationError(
                f"claim {label}, request {spec.name}: missing device class name (unsupported request type?)"
            )
        device_class = self.classes.get(spec.class_name)
        if device_class is None:
            raise AllocationError(
                f"claim {label}, request {spec.name}: could not retrieve device class {spec.class_name}:"
                f' deviceclass.resource.k8s.io "{spec.class_name}" not found'
            )
        data.device_class = device_class
        data.class_selectors = tuple((device_class.get("spec") or {}).get("selectors") or ())
        data.class_owner = f"class {(device_class.get('metadata') or {}).get('name', '')}"
        class_expressions = []
        for index, selector in enumerate(data.class_selectors):
            expression = selector_expression(selector) if isinstance(selector, Mapping) else None
            if expression is None:
                raise AllocationError(
                    f"{data.class_owner}: selector #{index}: CEL expression empty (unsupported selector type?)"
                )
            class_expressions.append(expression)
        data.class_expressions = tuple(class_expressions)
        if spec.mode == EXACT_COUNT:
            data.num_devices = spec.count
        elif spec.mode == ALL:
            for pool in self.pools:
                if pool.incomplete:
                    raise AllocationError(
                        f"claim {label}, request {spec.name}: asks for all devices,"
                        f" but resource pool {pool.label} is currently being updated"
                    )
                if pool.invalid:
                    raise AllocationError(
                        f"claim {label}, request {spec.name}: asks for all devices,"
                        f" but resource pool {pool.label} is currently invalid"
                    )
                for candidate in self._candidates(pool):
                    if not self.selectable(key, data, candidate):
                        continue
                    if self.features.consumable_capacity and not capacity.fits(
                        candidate,
                        spec.capacity,
                        self.allocated.capacity.get(candidate.id),
                        self.allocating_capacity.get(candidate.id),
                    ):
                        continue
                    data.all_devices.append(candidate)
            data.num_devices = len(data.all_devices)
        else:
            raise AllocationError(f"claim {label}, request {spec.name}: unsupported count mode {spec.mode}")
        return data

    def _constraints(self, claim: ResourceClaimView, label: str) -> list[Constraint]:
        constraints: list[Constraint] = []
        for index, constraint in enumerate(claim.spec.devices.constraints):
            requests = list(constraint.requests)
            if constraint.match_attribute:
                constraints.append(MatchAttribute(requests, constraint.match_attribute))
            elif constraint.distinct_attribute:
                constraints.append(DistinctAttribute(requests, constraint.distinct_attribute))
            else:
                raise AllocationError(
                    f"claim {label}, constraint #{index}: empty constraint (unsupported constraint type?)"
                )
        return constraints

    def _candidates(self, pool: Pool) -> list[Candidate]:
        found = []
        for resource_slice in pool.slices:
            spec = spec_of(resource_slice)
            for device in spec.get("devices") or ():
                device_id = (pool.driver, pool.name, str(device.get("name") or ""))
                found.append(Candidate(device_id, device, resource_slice, pool, self.facts.get(device)))
        return found

    # -- selection ------------------------------------------------------------------------------

    def selectable(self, key: RequestKey, data: RequestData, candidate: Candidate) -> bool:
        """``isSelectable``: class selectors, request selectors, per-device node selection."""
        if not self.features.binding_and_status and candidate.facts.binding_conditions:
            return False
        cache_key = (candidate.id, key)
        known = self.matches.get(cache_key)
        if known is not None:
            return known
        verdict = self._selectable(key, data, candidate)
        self.matches[cache_key] = verdict
        return verdict

    def _selectable(self, key: RequestKey, data: RequestData, candidate: Candidate) -> bool:
        evaluator = self.evaluator
        device, device_id = candidate.device, candidate.id
        if data.class_expressions and not evaluator.all_match(
            data.class_expressions, device, device_id, data.class_owner
        ):
            return False
        if data.request_expressions and not evaluator.all_match(
            data.request_expressions, device, device_id, data.claim_owner
        ):
            return False
        if spec_of(candidate.slice).get("perDeviceNodeSelection"):
            fields = device_fields(candidate.device)
            if not node_matches(
                self.node, str(fields.get("nodeName") or ""), bool(fields.get("allNodes")), fields.get("nodeSelector")
            ):
                return False
        return True

    # -- the search -----------------------------------------------------------------------------

    def run(self) -> bool:
        return self.allocate_one((0, 0, 0, 0), False, (0, 0, 0))

    def allocate_one(self, r: tuple[int, int, int, int], allocate_sub: bool, start: tuple[int, int, int]) -> bool:
        self.steps += 1
        claim_index, request_index, sub_index, device_index = r
        if claim_index >= len(self.claims):
            return True
        requests = self.claims[claim_index].spec.devices.requests
        if request_index >= len(requests):
            try:
                return self.allocate_one((claim_index + 1, 0, 0, 0), False, (0, 0, 0))
            except MaxSizeExceeded:
                return False

        key = (claim_index, request_index, sub_index)
        data = self.request_data[key]
        if not allocate_sub and data.parent is not None:
            all_exceeded = True
            sub = 0
            while (claim_index, request_index, sub) in self.request_data:
                try:
                    success = self.allocate_one((claim_index, request_index, sub, device_index), True, (0, 0, 0))
                except MaxSizeExceeded:
                    sub += 1
                    continue
                all_exceeded = False
                if success:
                    self.request_data[key].selected_sub_request = sub
                    return True
                sub += 1
            if all_exceeded:
                raise MaxSizeExceeded
            return False

        spec = data.request
        do_all = spec.mode == ALL
        if do_all and not data.all_devices:
            return False
        if device_index >= data.num_devices:
            return self.allocate_one((claim_index, request_index + 1, 0, 0), False, (0, 0, 0))
        if len(self.results[claim_index]) + data.num_devices - device_index > MAX_RESULTS:
            raise MaxSizeExceeded

        if do_all:
            candidate = data.all_devices[device_index]
            undo = self.allocate_device(r, candidate, True)
            if undo is None:
                return False
            try:
                done = self.allocate_one(
                    (claim_index, request_index, sub_index, device_index + 1), allocate_sub, (0, 0, 0)
                )
            except MaxSizeExceeded:
                self.rollback(r, candidate, undo)
                raise
            if not done:
                self.rollback(r, candidate, undo)
            return done

        allocated_devices = self.allocated.devices
        allocating = self.allocating
        admin = spec.admin_access
        pools = self.pools
        for pool_index in range(start[0], len(pools)):
            pool = pools[pool_index]
            if not pool.usable:
                continue
            slice_start = start[1] if pool_index == start[0] else 0
            pool_slices = pool.slices
            for slice_index in range(slice_start, len(pool_slices)):
                resource_slice = pool_slices[slice_index]
                devices = spec_of(resource_slice).get("devices") or ()
                device_start = start[2] if pool_index == start[0] and slice_index == start[1] else 0
                for position in range(device_start, len(devices)):
                    device = devices[position]
                    device_id = (pool.driver, pool.name, device.get("name") or "")
                    holders = allocating.get(device_id)
                    if admin:
                        if holders and claim_index in holders:
                            continue
                    elif device_id in allocated_devices or holders:
                        continue
                    candidate = Candidate(device_id, device, resource_slice, pool, self.facts.get(device))
                    if not self.selectable(key, data, candidate):
                        continue
                    if self.features.consumable_capacity and not capacity.fits(
                        candidate,
                        spec.capacity,
                        self.allocated.capacity.get(device_id),
                        self.allocating_capacity.get(device_id),
                    ):
                        continue
                    undo = self.allocate_device(r, candidate, False)
                    if undo is None:
                        continue
                    try:
                        done = self.allocate_one(
                            (claim_index, request_index, sub_index, device_index + 1),
                            allocate_sub,
                            (pool_index, slice_index, position + 1),
                        )
                    except MaxSizeExceeded:
                        self.rollback(r, candidate, undo)
                        raise
                    if done:
                        return True
                    self.rollback(r, candidate, undo)
        return False

    def allocate_device(self, r: tuple[int, int, int, int], candidate: Candidate, must: bool) -> _Undo | None:
        """``allocateDevice``: take the candidate tentatively, or None (nothing changed) if it cannot be."""
        claim_index = r[0]
        data = self.request_data[(r[0], r[1], r[2])]
        spec = data.request
        device_id = candidate.id
        facts = candidate.facts
        allow_multiple = self.features.consumable_capacity and facts.allow_multiple
        holders = self.allocating.get(device_id)
        if not allow_multiple and spec.admin_access and holders and claim_index in holders:
            return None
        if not spec.admin_access and (device_id in self.allocated.devices or holders):
            return None
        if not self.features.partitionable_devices and facts.consumes:
            return None
        skip_counters = allow_multiple and (
            device_id in self.allocated.capacity or device_id in self.allocating_capacity
        )
        undo = _Undo(previous_results=len(self.results[claim_index]))
        if not skip_counters and facts.consumes:
            if not self.counters.reserve(candidate):
                return None
            undo.counters_reserved = True

        if data.parent is None:
            base, sub = spec.name, ""
        else:
            base, sub = data.parent.name, spec.name

        if self.features.device_taints and taint_prevents_allocation(facts.taints, spec.tolerations):
            self._undo(r, candidate, base, sub, undo)
            return None

        for constraint in self.constraints[claim_index]:
            if not constraint.add(base, sub, candidate.device, device_id):
                self._undo(r, candidate, base, sub, undo)
                if must:
                    raise AllocationError(
                        f"claim {claim_label(self.claims[claim_index])}, request {spec.name}: cannot add device"
                        f" {device_id_text(device_id)} because a claim constraint would not be satisfied"
                    )
                return None
            undo.constraints_added += 1

        if not allow_multiple:
            self.allocating.setdefault(device_id, set()).add(claim_index)
            undo.device_marked = True

        share_id: str | None = None
        consumed_published: dict[str, Quantity] = {}
        if self.features.consumable_capacity:
            if not capacity.fits(
                candidate,
                spec.capacity,
                self.allocated.capacity.get(device_id),
                self.allocating_capacity.get(device_id),
            ):
                self._undo(r, candidate, base, sub, undo)
                return None
            if allow_multiple:
                consumed, consumed_published = capacity.consumption(candidate, spec.capacity)
                share_id = str(uuid.uuid4())
                existing = self.allocating_capacity.get(device_id)
                undo.capacity_existed = existing is not None
                if existing is None:
                    self.allocating_capacity[device_id] = dict(consumed)
                else:
                    for name, amount in consumed.items():
                        existing[name] = existing[name].add(amount) if name in existing else amount
                undo.capacity_inserted = True
                undo.consumed = consumed

        self.results[claim_index].append(
            DeviceResult(
                request=spec.name,
                parent=data.parent.name if data.parent is not None else "",
                candidate=candidate,
                spec=spec,
                admin_access=spec.admin_access,
                share_id=share_id,
                consumed_capacity=consumed_published,
            )
        )
        undo.result_added = True
        return undo

    def rollback(self, r: tuple[int, int, int, int], candidate: Candidate, undo: _Undo) -> None:
        data = self.request_data[(r[0], r[1], r[2])]
        if data.parent is None:
            base, sub = data.request.name, ""
        else:
            base, sub = data.parent.name, data.request.name
        self._undo(r, candidate, base, sub, undo)

    def _undo(self, r: tuple[int, int, int, int], candidate: Candidate, base: str, sub: str, undo: _Undo) -> None:
        claim_index = r[0]
        device_id = candidate.id
        if undo.result_added:
            del self.results[claim_index][undo.previous_results :]
        if undo.capacity_inserted:
            existing = self.allocating_capacity.get(device_id)
            if existing is not None:
                for name, amount in undo.consumed.items():
                    if name in existing:
                        existing[name] = existing[name].sub(amount)
                if all(amount.sign() == 0 for amount in existing.values()):
                    if undo.capacity_existed:
                        self.allocating_capacity[device_id] = {}
                    else:
                        del self.allocating_capacity[device_id]
        if undo.device_marked:
            holders = self.allocating[device_id]
            holders.discard(claim_index)
            if not holders:
                del self.allocating[device_id]
        constraints = self.constraints[claim_index]
        for index in range(undo.constraints_added - 1, -1, -1):
            constraints[index].remove(base, sub, candidate.device, device_id)
        if undo.counters_reserved:
            self.counters.release(candidate)
