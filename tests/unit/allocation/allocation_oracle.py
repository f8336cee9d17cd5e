"""An independent checker and brute-force oracle for the structured allocator's property tests.

Why a second implementation: the properties in ``test_allocation_properties.py`` must be able to fail
when ``dra_driver.tools.allocation`` is wrong, so nothing here imports it.  This module restates the
Kubernetes rules (``docs/allocation.md`` and ``docs/resource-api.md``, from the Go allocator in
``k8s.io/dynamic-resource-allocation/structured``) in the plainest form that can be checked, not
searched efficiently:

* :class:`World` gathers what a node sees (pools at their newest generation, complete or not, valid or
  not), what allocated claims already hold (exclusive devices, shared capacity) and the classes.
* :func:`validate_allocation` checks an allocator answer against every rule: visibility, selectors,
  counts, ``All``, ``firstAvailable`` naming, exclusivity, counters, consumable capacity, constraints,
  taints, the 32-result limit and the shape of each result (``adminAccess``, ``tolerations``,
  ``shareID``, ``consumedCapacity``, binding conditions, class config, node selector).
* :func:`oracle_allocate` enumerates every assignment (combinations per request, pruned only by rules
  that can never be repaired by adding devices) and says whether *any* valid one exists.
* :func:`search_space` bounds how much work a depth-first search may do, for the generators.

Where Kubernetes' rule is a property of its search rather than of the answer, the checker states the
answer-side consequence: a request never gets the same device twice (from 1.36 the search for its
next device resumes after the previous one), devices taken with admin access still consume counters
(``allocateDevice`` reserves them for every request), and between claims of one pod only ordinary
results exclude each other (Go also lets an admin result block an ordinary one in a *later* claim;
the generators avoid relying on either reading).

Selectors are evaluated with ``dra_driver.tools.cel`` (a separate component with its own tests); quantities
are parsed here, independently of the allocator's own parser.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from dra_driver.jsontypes import MutableJSON
from dra_driver.tools.cel import compile_selector

DeviceKey = tuple[str, str, str]  # (driver, pool, device)
PoolKey = tuple[str, str]  # (driver, pool)

MAX_RESULTS_PER_CLAIM = 32  # resourceapi.AllocationResultsMaxSize
PREVENTING_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})  # None and unknown effects are ignored

GATE_ADMIN = "DRAAdminAccess"
GATE_PRIORITIZED = "DRAPrioritizedList"
GATE_PARTITIONABLE = "DRAPartitionableDevices"
GATE_TAINTS = "DRADeviceTaints"
GATE_BINDING = "DRADeviceBindingConditions"
GATE_STATUS = "DRAResourceClaimDeviceStatus"
GATE_CAPACITY = "DRAConsumableCapacity"

# --------------------------------------------------------------------------------------------------
# Quantities


_QUANTITY = re.compile(r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)(?:(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|[eE]([+-]?\d+))?$")
_SUFFIX: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


def quantity(value: Any) -> Fraction:
    """The exact value of a Kubernetes quantity (``"4Gi"``, ``"500m"``, ``"1e3"``, ``3``)."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    match = _QUANTITY.match(str(value).strip())
    if match is None:
        raise ValueError(f"not a quantity: {value!r}")
    sign, number, suffix, exponent = match.groups()
    amount = Fraction(number) * (_SUFFIX[suffix] if suffix else Fraction(10) ** int(exponent or 0))
    return -amount if sign == "-" else amount


def _ceil(value: Fraction) -> int:
    """``resource.Quantity.Value()``: rounded up to a whole number."""
    return math.ceil(value)


# --------------------------------------------------------------------------------------------------
# Requests of a claim


@dataclass
class Request:
    """One request, or one subrequest of a ``firstAvailable`` request, with defaults applied."""

    claim: int
    base: str
    sub: str | None
    class_name: str
    selectors: list[str]
    all_mode: bool
    count: int
    admin: bool
    tolerations: list[MutableJSON]
    capacity: dict[str, Fraction]
    has_capacity: bool

    @property
    def result_name(self) -> str:
        return f"{self.base}/{self.sub}" if self.sub is not None else self.base


@dataclass
class Slot:
    """A request of a claim: one alternative for ``exactly``, the subrequests in order otherwise."""

    claim: int
    name: str
    alternatives: list[Request]
    first_available: bool


def _request(claim: int, base: str, sub: str | None, body: Mapping[str, Any]) -> Request:
    mode = body.get("allocationMode") or "ExactCount"
    capacity = (body.get("capacity") or {}).get("requests") or {}
    return Request(
        claim=claim,
        base=base,
        sub=sub,
        class_name=str(body.get("deviceClassName") or ""),
        selectors=[str(s["cel"]["expression"]) for s in body.get("selectors") or []],
        all_mode=mode == "All",
        count=int(body.get("count") or 1) if mode != "All" else 0,
        admin=bool(body.get("adminAccess")),
        tolerations=list(body.get("tolerations") or []),
        capacity={str(k): quantity(v) for k, v in capacity.items()},
        has_capacity=body.get("capacity") is not None,
    )


def claim_slots(claim_index: int, claim: Mapping[str, Any]) -> list[Slot]:
    slots = []
    for request in claim["spec"]["devices"].get("requests") or []:
        name = str(request["name"])
        if request.get("firstAvailable"):
            alternatives = [_request(claim_index, name, str(sub["name"]), sub) for sub in request["firstAvailable"]]
            slots.append(Slot(claim_index, name, alternatives, True))
        else:
            slots.append(Slot(claim_index, name, [_request(claim_index, name, None, request["exactly"])], False))
    return slots


def constraint_applies(constraint: Mapping[str, Any], request: Request) -> bool:
    names = constraint.get("requests") or []
    return not names or request.base in names or (request.sub is not None and request.result_name in names)


# --------------------------------------------------------------------------------------------------
# What the node sees


def _selector_requirement_matches(requirement: Mapping[str, Any], value: str | None) -> bool:
    operator = requirement.get("operator")
    values = requirement.get("values") or []
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    raise ValueError(f"node selector operator {operator!r} is not modelled here")


def node_selector_matches(selector: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """A core NodeSelector: terms are ORed, requirements inside a term ANDed."""
    labels = node.get("metadata", {}).get("labels") or {}
    fields = {"metadata.name": node.get("metadata", {}).get("name")}
    for term in selector.get("nodeSelectorTerms") or []:
        expressions = term.get("matchExpressions") or []
        field_reqs = term.get("matchFields") or []
        if not expressions and not field_reqs:
            continue  # an empty term matches nothing
        if all(_selector_requirement_matches(r, labels.get(r["key"])) for r in expressions) and all(
            _selector_requirement_matches(r, fields.get(r["key"])) for r in field_reqs
        ):
            return True
    return False


def _node_matches(node: Mapping[str, Any], node_name: Any, all_nodes: Any, selector: Any) -> bool:
    if node_name:
        return bool(node_name == node["metadata"]["name"])
    if all_nodes:
        return True
    if selector is not None:
        return node_selector_matches(selector, node)
    return False


@dataclass
class Candidate:
    """A device the node could be given: in a complete, valid pool, in a slice that targets the node."""

    key: DeviceKey
    device: MutableJSON
    slice: MutableJSON

    @property
    def driver(self) -> str:
        return self.key[0]


@dataclass
class NodePool:
    key: PoolKey
    complete: bool
    invalid: str | None = None
    candidates: list[Candidate] = field(default_factory=list)
    device_slices_all_nodes: list[MutableJSON] = field(default_factory=list)
    counter_sets: dict[str, dict[str, Fraction]] = field(default_factory=dict)


class World:
    """Everything the allocator reads, digested the way the Kubernetes rules describe it."""

    def __init__(
        self,
        node: Mapping[str, Any],
        slices: Sequence[Mapping[str, Any]],
        classes: Sequence[Mapping[str, Any]],
        allocated_claims: Sequence[Mapping[str, Any]],
        features: frozenset[str] | set[str],
    ) -> None:
        self.node = node
        self.features = frozenset(features)
        self.partitionable = GATE_PARTITIONABLE in self.features
        self.taints = GATE_TAINTS in self.features
        self.consumable = GATE_CAPACITY in self.features
        self.binding = GATE_BINDING in self.features and GATE_STATUS in self.features
        self.classes: dict[str, MutableJSON] = {str(c["metadata"]["name"]): dict(c) for c in classes}
        self.pools: dict[PoolKey, NodePool] = self._gather(slices)
        self.candidates: dict[DeviceKey, Candidate] = {
            c.key: c for pool in self.pools.values() if pool.complete and not pool.invalid for c in pool.candidates
        }
        self.allocated_exclusive: set[DeviceKey] = set()
        self.allocated_capacity: dict[DeviceKey, dict[str, Fraction]] = defaultdict(lambda: defaultdict(Fraction))
        for claim in allocated_claims:
            allocation = (claim.get("status") or {}).get("allocation") or {}
            for result in (allocation.get("devices") or {}).get("results") or []:
                if result.get("adminAccess"):
                    continue  # admin access never makes a device "allocated"
                key = (str(result["driver"]), str(result["pool"]), str(result["device"]))
                if self.consumable and result.get("shareID"):
                    for name, value in (result.get("consumedCapacity") or {}).items():
                        self.allocated_capacity[key][str(name)] += quantity(value)
                    continue
                self.allocated_exclusive.add(key)
        self._match_cache: dict[tuple[int, DeviceKey, str], bool] = {}

    # -- pools ---------------------------------------------------------------------------------

    def _relevant(self, slice_: Mapping[str, Any]) -> bool:
        spec = slice_["spec"]
        if not self.partitionable and (spec.get("perDeviceNodeSelection") is not None or spec.get("sharedCounters")):
            return False
        if spec.get("sharedCounters"):
            return True  # counter sets are needed whatever node they name
        if spec.get("nodeName") or spec.get("allNodes") or spec.get("nodeSelector") is not None:
            return _node_matches(self.node, spec.get("nodeName"), spec.get("allNodes"), spec.get("nodeSelector"))
        if spec.get("perDeviceNodeSelection"):
            return any(
                _node_matches(self.node, d.get("nodeName"), d.get("allNodes"), d.get("nodeSelector"))
                for d in spec.get("devices") or []
            )
        return False

    def _gather(self, slices: Sequence[Mapping[str, Any]]) -> dict[PoolKey, NodePool]:
        by_pool: dict[PoolKey, list[MutableJSON]] = defaultdict(list)
        for s in slices:
            by_pool[(str(s["spec"]["driver"]), str(s["spec"]["pool"]["name"]))].append(dict(s))
        pools: dict[PoolKey, NodePool] = {}
        for key, pool_slices in by_pool.items():
            relevant = [s for s in pool_slices if self._relevant(s)]
            if not relevant:
                continue
            generation = max(int(s["spec"]["pool"]["generation"]) for s in relevant)
            relevant = [s for s in relevant if int(s["spec"]["pool"]["generation"]) == generation]
            wanted = int(relevant[0]["spec"]["pool"]["resourceSliceCount"])
            at_generation = [s for s in pool_slices if int(s["spec"]["pool"]["generation"]) == generation]
            if len(relevant) != wanted:
                if any(int(s["spec"]["pool"]["generation"]) > generation for s in pool_slices):
                    continue  # obsolete: the driver is replacing this generation
                if len(at_generation) != wanted:
                    pools[key] = NodePool(key, complete=False)
                    continue
            else:
                at_generation = relevant
            pools[key] = self._build_pool(key, relevant, at_generation)
        return pools

    def _build_pool(self, key: PoolKey, relevant: list[MutableJSON], at_generation: list[MutableJSON]) -> NodePool:
        pool = NodePool(key, complete=True)
        counter_slices = [s for s in relevant if self.partitionable and s["spec"].get("sharedCounters")]
        device_slices = [s for s in relevant if not (self.partitionable and s["spec"].get("sharedCounters"))]
        names = Counter(str(d["name"]) for s in device_slices for d in s["spec"].get("devices") or [])
        duplicates = sorted(n for n, c in names.items() if c > 1)
        if duplicates:
            pool.invalid = f"duplicate device name {duplicates[0]}"
            return pool
        for s in counter_slices:
            for counter_set in s["spec"]["sharedCounters"]:
                name = str(counter_set["name"])
                if name in pool.counter_sets:
                    pool.invalid = f"duplicate counter set name {name}"
                    return pool
                pool.counter_sets[name] = {
                    str(c): quantity(v["value"]) for c, v in (counter_set.get("counters") or {}).items()
                }
        relevant_names = {str(s["metadata"]["name"]) for s in relevant}
        pool.device_slices_all_nodes = device_slices + [
            s
            for s in at_generation
            if str(s["metadata"]["name"]) not in relevant_names and not s["spec"].get("sharedCounters")
        ]
        if self.partitionable:
            for s in pool.device_slices_all_nodes:
                for device in s["spec"].get("devices") or []:
                    for consumption in device.get("consumesCounters") or []:
                        counter_set = pool.counter_sets.get(str(consumption["counterSet"]))
                        if counter_set is None:
                            pool.invalid = f"counter set {consumption['counterSet']} not found"
                            return pool
                        for counter in consumption.get("counters") or {}:
                            if str(counter) not in counter_set:
                                pool.invalid = f"counter {counter} not found in counter set {consumption['counterSet']}"
                                return pool
        for s in device_slices:
            for device in s["spec"].get("devices") or []:
                pool.candidates.append(Candidate((key[0], key[1], str(device["name"])), dict(device), s))
        return pool

    @property
    def incomplete_or_invalid_pools(self) -> list[PoolKey]:
        return sorted(k for k, p in self.pools.items() if not p.complete or p.invalid)

    @property
    def invalid_pools(self) -> list[PoolKey]:
        return sorted(k for k, p in self.pools.items() if p.complete and p.invalid)

    # -- per device and request ------------------------------------------------------------------

    def is_multi(self, candidate: Candidate) -> bool:
        return self.consumable and bool(candidate.device.get("allowMultipleAllocations"))

    def _matches(self, expressions: list[str], candidate: Candidate, cache_id: int) -> bool:
        for expression in expressions:
            cache_key = (cache_id, candidate.key, expression)
            if cache_key not in self._match_cache:
                self._match_cache[cache_key] = compile_selector(expression).matches(
                    candidate.device, driver=candidate.driver
                )
            if not self._match_cache[cache_key]:
                return False
        return True

    def selectable(self, request: Request, candidate: Candidate) -> bool:
        """Class selectors, request selectors, per-device node selection, binding conditions."""
        device = candidate.device
        if not self.binding and device.get("bindingConditions"):
            return False
        device_class = self.classes[request.class_name]
        class_selectors = [str(s["cel"]["expression"]) for s in device_class.get("spec", {}).get("selectors") or []]
        if not self._matches(class_selectors, candidate, 0):
            return False
        if not self._matches(request.selectors, candidate, 1):
            return False
        if candidate.slice["spec"].get("perDeviceNodeSelection"):
            return _node_matches(self.node, device.get("nodeName"), device.get("allNodes"), device.get("nodeSelector"))
        return True

    def taints_tolerated(self, request: Request, candidate: Candidate) -> bool:
        if not self.taints:
            return True
        return all(
            taint.get("effect") not in PREVENTING_TAINT_EFFECTS or any(tolerates(t, taint) for t in request.tolerations)
            for taint in candidate.device.get("taints") or []
        )

    def consumed_capacity(self, request: Request, candidate: Candidate) -> dict[str, Fraction] | None:
        """What one allocation for ``request`` takes from each capacity of the device (every one of its
        capacities, requested or not), or None when the request cannot be served by it at all (asks for a
        capacity the device lacks, or an amount its request policy forbids)."""
        capacities = candidate.device.get("capacity") or {}
        if any(name not in capacities for name in request.capacity):
            return None
        consumed = {}
        for name, capacity in capacities.items():
            amount = consumed_amount(request.capacity.get(str(name)), capacity)
            if violates_policy(amount, capacity.get("requestPolicy")):
                return None
            consumed[str(name)] = amount
        return consumed

    def capacity_fits_alone(self, request: Request, candidate: Candidate) -> bool:
        """The capacity check with nothing else of this attempt on the device (what ``All`` uses)."""
        if not self.consumable:
            return True
        consumed = self.consumed_capacity(request, candidate)
        if consumed is None:
            return False
        already = self.allocated_capacity.get(candidate.key, {})
        return all(
            already.get(name, Fraction(0)) + amount <= quantity(candidate.device["capacity"][name]["value"])
            for name, amount in consumed.items()
        )

    def allocatable_alone(self, request: Request, candidate: Candidate) -> bool:
        """Everything about one pick that does not depend on the other picks of the attempt."""
        if not self.partitionable and candidate.device.get("consumesCounters"):
            return False
        if not request.admin and not self.is_multi(candidate) and candidate.key in self.allocated_exclusive:
            return False
        return self.taints_tolerated(request, candidate) and self.capacity_fits_alone(request, candidate)

    def all_devices(self, request: Request) -> list[Candidate]:
        """The fixed device set of an ``allocationMode: All`` request."""
        return [
            c
            for pool in self.pools.values()
            for c in pool.candidates
            if self.selectable(request, c) and self.capacity_fits_alone(request, c)
        ]


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """``resourceclaim.ToleratesTaint``."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("key") and toleration.get("key") != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Equal":
        return bool((toleration.get("value") or "") == (taint.get("value") or ""))
    return operator == "Exists"


def consumed_amount(requested: Fraction | None, capacity: Mapping[str, Any]) -> Fraction:
    """How much one allocation takes from a capacity: the request rounded up by the request policy,
    or the policy default (else the whole value) when nothing was requested."""
    policy = capacity.get("requestPolicy")
    if requested is None:
        if policy and policy.get("default") is not None:
            return quantity(policy["default"])
        return quantity(capacity["value"])
    if not policy:
        return requested
    valid_range = policy.get("validRange")
    if valid_range and valid_range.get("min") is not None:
        minimum = quantity(valid_range["min"])
        if requested < minimum:
            return minimum
        if valid_range.get("step") is None:
            return requested
        step, base = _ceil(quantity(valid_range["step"])), _ceil(minimum)
        steps = -(-(_ceil(requested) - base) // step)
        return Fraction(base + step * steps)
    for value in policy.get("validValues") or []:
        if requested <= quantity(value):
            return quantity(value)
    return requested


def violates_policy(amount: Fraction, policy: Mapping[str, Any] | None) -> bool:
    if not policy:
        return False
    if policy.get("default") is not None and amount == quantity(policy["default"]):
        return False
    valid_range = policy.get("validRange")
    if valid_range is not None:
        if valid_range.get("max") is not None and amount > quantity(valid_range["max"]):
            return True
        if valid_range.get("step") is not None:
            base = _ceil(quantity(valid_range.get("min") or 0))
            return (_ceil(amount) - base) % _ceil(quantity(valid_range["step"])) != 0
        return False
    values = policy.get("validValues") or []
    if values:
        return all(amount != quantity(v) for v in values)
    return False


def lookup_attribute(candidate: Candidate, name: str) -> tuple[str, Any] | None:
    """A fully-qualified attribute of a device as a typed value; the driver's own domain may be omitted."""
    attributes = candidate.device.get("attributes") or {}
    value = attributes.get(name)
    if value is None and "/" in name:
        domain, ident = name.split("/", 1)
        if domain == candidate.driver:
            value = attributes.get(ident)
    if value is None:
        return None
    for kind in ("int", "bool", "string", "version"):
        if kind in value:
            return (kind, value[kind])
    return None


# --------------------------------------------------------------------------------------------------
# Rules over a set of picks


@dataclass
class Pick:
    """One device given to one (sub)request."""

    request: Request
    candidate: Candidate
    consumed: dict[str, Fraction] | None  # for devices that allow multiple allocations


def _counter_use(device: Mapping[str, Any]) -> Iterator[tuple[str, str, Fraction]]:
    for consumption in device.get("consumesCounters") or []:
        for counter, value in (consumption.get("counters") or {}).items():
            yield str(consumption["counterSet"]), str(counter), quantity(value["value"])


def pick_violations(world: World, claims: Sequence[Mapping[str, Any]], picks: Sequence[Pick]) -> list[str]:
    """Rules that adding more picks can never repair: exclusivity, counters, shared capacity,
    constraints.  Per-pick rules (selectors, taints, ...) are checked where the pick is made."""
    problems: list[str] = []
    # Exclusivity.  A device that does not allow multiple allocations is taken by at most one
    # non-admin result in the whole pod, never when an allocated claim holds it, and at most once per
    # claim even with admin access.
    ordinary: Counter[DeviceKey] = Counter()
    per_claim: Counter[tuple[int, DeviceKey]] = Counter()
    for p in picks:
        if world.is_multi(p.candidate):
            continue
        per_claim[(p.request.claim, p.candidate.key)] += 1
        if not p.request.admin:
            ordinary[p.candidate.key] += 1
            if p.candidate.key in world.allocated_exclusive:
                problems.append(f"{p.candidate.key} is already allocated to another claim")
    problems += [f"{k} given to {n} non-admin results" for k, n in ordinary.items() if n > 1]
    problems += [f"{k} given {n} times in claim #{c}" for (c, k), n in per_claim.items() if n > 1]
    per_request = Counter((p.request.claim, p.request.result_name, p.candidate.key) for p in picks)
    problems += [f"{k} given {n} times to request {r} of claim #{c}" for (c, r, k), n in per_request.items() if n > 1]

    # Counters, per pool: sets minus what allocated claims' devices consume minus the new devices.
    touched = {p.candidate.key[:2] for p in picks if p.candidate.device.get("consumesCounters")}
    for pool_key in touched:
        pool = world.pools[pool_key]
        left = {s: dict(c) for s, c in pool.counter_sets.items()}
        for s in pool.device_slices_all_nodes:
            for device in s["spec"].get("devices") or []:
                if (pool_key[0], pool_key[1], str(device["name"])) in world.allocated_exclusive:
                    for counter_set, counter, value in _counter_use(device):
                        left[counter_set][counter] -= value
        for p in picks:
            if p.candidate.key[:2] == pool_key and not world.is_multi(p.candidate):
                for counter_set, counter, value in _counter_use(p.candidate.device):
                    left[counter_set][counter] -= value
        problems += [
            f"pool {pool_key}: counter {s}/{c} over-consumed by {-v}"
            for s, counters in left.items()
            for c, v in counters.items()
            if v < 0
        ]

    # Consumable capacity of devices that allow multiple allocations.
    used: dict[DeviceKey, dict[str, Fraction]] = defaultdict(lambda: defaultdict(Fraction))
    devices: dict[DeviceKey, Candidate] = {}
    for p in picks:
        if world.is_multi(p.candidate) and p.consumed is not None:
            devices[p.candidate.key] = p.candidate
            for name, amount in p.consumed.items():
                used[p.candidate.key][name] += amount
    for key, by_name in used.items():
        for name, amount in by_name.items():
            total = amount + world.allocated_capacity.get(key, {}).get(name, Fraction(0))
            limit = quantity(devices[key].device["capacity"][name]["value"])
            if total > limit:
                problems.append(f"{key}: capacity {name} over-consumed ({total} > {limit})")

    # Constraints of each claim.
    for claim_index, claim in enumerate(claims):
        for constraint in claim["spec"]["devices"].get("constraints") or []:
            members = [p for p in picks if p.request.claim == claim_index and constraint_applies(constraint, p.request)]
            name = constraint.get("matchAttribute") or constraint.get("distinctAttribute")
            values = [lookup_attribute(p.candidate, str(name)) for p in members]
            if any(v is None for v in values):
                problems.append(f"claim #{claim_index}: a device lacks constrained attribute {name}")
            elif constraint.get("matchAttribute") and len(set(map(repr, values))) > 1:
                problems.append(f"claim #{claim_index}: matchAttribute {name} differs: {values}")
            elif constraint.get("distinctAttribute") and len(set(map(repr, values))) < len(values):
                problems.append(f"claim #{claim_index}: distinctAttribute {name} repeats: {values}")
    return problems


# --------------------------------------------------------------------------------------------------
# Checking an allocator answer


def config_problems(world: World, chosen: Sequence[Request], configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Class configs: each one of a used class is there (once per class, Kubernetes lists the requests
    it applies to; no list means all), none of an unused class, and all of them before claim configs."""
    problems = []
    from_class = [c for c in configs if c.get("source") == "FromClass"]
    for request in chosen:
        for config in world.classes[request.class_name].get("spec", {}).get("config") or []:
            if not any(
                c.get("opaque") == config.get("opaque")
                and (not c.get("requests") or request.result_name in c["requests"])
                for c in from_class
            ):
                problems.append(f"class config {config.get('opaque')} of {request.result_name} is missing")
    for c in from_class:
        users = [
            r
            for r in chosen
            if any(
                x.get("opaque") == c.get("opaque")
                for x in world.classes[r.class_name].get("spec", {}).get("config") or []
            )
        ]
        named = c.get("requests") or [r.result_name for r in users]
        if not users or any(name not in {r.result_name for r in users} for name in named):
            problems.append(f"class config {c} applied to requests of other classes")
    sources = [c.get("source") for c in configs]
    if sources != sorted(sources, key=lambda s: s != "FromClass"):
        problems.append(f"class configs must come before claim configs: {sources}")
    return problems


def _expected_node_selector(world: World, picks: Sequence[Pick]) -> tuple[str, Any]:
    """("exact", selector) when a node-local device pins the claim to the node, ("contains",
    requirements) when only node selectors of slices apply, ("none", None) when usable anywhere."""
    requirements: list[Any] = []
    for p in picks:
        spec = p.candidate.slice["spec"]
        source = p.candidate.device if spec.get("perDeviceNodeSelection") else spec
        if source.get("nodeName") or p.candidate.device.get("bindsToNode"):
            name = world.node["metadata"]["name"]
            return "exact", {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}]
            }
        if source.get("nodeSelector"):
            for term in source["nodeSelector"].get("nodeSelectorTerms") or []:
                requirements += term.get("matchExpressions") or []
                requirements += term.get("matchFields") or []
    if requirements:
        return "contains", requirements
    return "none", None


def _same_node_selector(actual: Any, expected: Any) -> bool:
    def normal(selector: Any) -> Any:
        return [
            (sorted(map(repr, t.get("matchFields") or [])), sorted(map(repr, t.get("matchExpressions") or [])))
            for t in (selector or {}).get("nodeSelectorTerms") or []
        ]

    return bool(normal(actual) == normal(expected))


def validate_allocation(
    world: World, claims: Sequence[Mapping[str, Any]], allocations: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Every rule an allocator answer must satisfy; an empty list when it does."""
    problems: list[str] = []
    if len(allocations) != len(claims):
        return [f"{len(allocations)} allocation results for {len(claims)} claims"]
    picks: list[Pick] = []
    for claim_index, (claim, allocation) in enumerate(zip(claims, allocations, strict=True)):
        where = f"claim #{claim_index}"
        slots = claim_slots(claim_index, claim)
        by_result_name = {alt.result_name: alt for slot in slots for alt in slot.alternatives}
        results = list(((allocation or {}).get("devices") or {}).get("results") or [])
        if len(results) > MAX_RESULTS_PER_CLAIM:
            problems.append(f"{where}: {len(results)} results, more than {MAX_RESULTS_PER_CLAIM}")
        claim_picks: list[Pick] = []
        for result in results:
            request = by_result_name.get(str(result.get("request")))
            key = (str(result.get("driver")), str(result.get("pool")), str(result.get("device")))
            if request is None:
                problems.append(f"{where}: result for unknown request {result.get('request')!r}")
                continue
            candidate = world.candidates.get(key)
            if candidate is None:
                problems.append(f"{where}: {key} is not an allocatable device on this node")
                continue
            label = f"{where} {request.result_name} {key}"
            if not world.selectable(request, candidate):
                problems.append(f"{label}: device does not match class and request selectors")
            if not world.allocatable_alone(request, candidate):
                problems.append(f"{label}: device is taken, untolerated, or lacks capacity")
            if bool(result.get("adminAccess")) != request.admin:
                problems.append(f"{label}: adminAccess {result.get('adminAccess')!r}, request says {request.admin}")
            if list(result.get("tolerations") or []) != request.tolerations:
                problems.append(f"{label}: tolerations {result.get('tolerations')!r} not the request's")
            consumed = None
            if world.is_multi(candidate):
                consumed = world.consumed_capacity(request, candidate)
                if not result.get("shareID"):
                    problems.append(f"{label}: shared device without a shareID")
                reported = {str(k): quantity(v) for k, v in (result.get("consumedCapacity") or {}).items()}
                if consumed is not None and reported != consumed:
                    problems.append(f"{label}: consumedCapacity {reported} but expected {consumed}")
            elif result.get("shareID") or result.get("consumedCapacity"):
                problems.append(f"{label}: exclusive device with shareID/consumedCapacity")
            for name in ("bindingConditions", "bindingFailureConditions"):
                expected = list(candidate.device.get(name) or []) if world.binding else []
                if list(result.get(name) or []) != expected:
                    problems.append(f"{label}: {name} {result.get(name)!r}, the device has {expected!r}")
            claim_picks.append(Pick(request, candidate, consumed))
        picks += claim_picks

        # Counts, All, firstAvailable.
        chosen: list[Request] = []
        for slot in slots:
            got = [p for p in claim_picks if p.request.base == slot.name]
            subs = {p.request.sub for p in got}
            if slot.first_available:
                if len(subs) != 1:
                    problems.append(f"{where} {slot.name}: results from subrequests {sorted(map(str, subs))}")
                    continue
                request = got[0].request
            else:
                request = slot.alternatives[0]
            chosen.append(request)
            if request.all_mode:
                want = sorted(c.key for c in world.all_devices(request))
                have = sorted(p.candidate.key for p in got)
                if not want or have != want:
                    problems.append(f"{where} {request.result_name}: All gave {have}, matching devices are {want}")
            elif len(got) != request.count:
                problems.append(f"{where} {request.result_name}: {len(got)} devices for count {request.count}")
        if len(chosen) == len(slots):
            configs = list(((allocation or {}).get("devices") or {}).get("config") or [])
            problems += [f"{where}: {p}" for p in config_problems(world, chosen, configs)]
        kind, expected = _expected_node_selector(world, claim_picks)
        actual = (allocation or {}).get("nodeSelector")
        if kind == "exact" and not _same_node_selector(actual, expected):
            problems.append(f"{where}: nodeSelector {actual!r}, expected {expected!r}")
        elif kind == "contains":
            terms = (actual or {}).get("nodeSelectorTerms") or []
            present = [r for t in terms[:1] for r in (t.get("matchExpressions") or []) + (t.get("matchFields") or [])]
            if len(terms) != 1 or any(r not in present for r in expected):
                problems.append(f"{where}: nodeSelector {actual!r} lacks requirements {expected!r}")
        elif kind == "none" and actual:
            problems.append(f"{where}: nodeSelector {actual!r} for devices usable on every node")
    problems += pick_violations(world, claims, picks)
    return problems


# --------------------------------------------------------------------------------------------------
# The brute-force oracle

Outcome = Literal["allocated", "unsatisfiable", "invalid-pools", "error"]


@dataclass
class OracleAnswer:
    outcome: Outcome
    picks: list[Pick] | None = None
    reason: str = ""


def upfront_error(world: World, claims: Sequence[Mapping[str, Any]]) -> str | None:
    """Errors that abort the attempt before any device is tried (Go's per-request validation)."""
    for claim_index, claim in enumerate(claims):
        minimum = 0
        for slot in claim_slots(claim_index, claim):
            if slot.first_available and GATE_PRIORITIZED not in world.features:
                return f"claim #{claim_index} {slot.name}: firstAvailable with the gate off"
            counts = []
            for request in slot.alternatives:
                if request.has_capacity and GATE_CAPACITY not in world.features:
                    return f"{request.result_name}: capacity requests with the gate off"
                if request.admin and GATE_ADMIN not in world.features:
                    return f"{request.result_name}: admin access with the gate off"
                if request.class_name not in world.classes:
                    return f"{request.result_name}: unknown device class {request.class_name}"
                if request.all_mode:
                    if world.incomplete_or_invalid_pools:
                        return f"{request.result_name}: All with pools {world.incomplete_or_invalid_pools}"
                    counts.append(len(world.all_devices(request)))
                else:
                    counts.append(request.count)
            minimum += min(counts)
        if minimum > MAX_RESULTS_PER_CLAIM:
            return f"claim #{claim_index}: at least {minimum} devices"
    return None


def _choices(world: World, request: Request) -> Iterator[list[Pick]]:
    """Every way to serve one (sub)request on its own: the fixed set for All, else every set of eligible
    devices of the requested size.  Never the same device twice for one request, even one that allows
    multiple allocations: from Kubernetes 1.36 the search for a request's next device resumes after
    the previous one (docs/allocation.md, "The search order"); other requests and claims may share it."""

    def pick(candidate: Candidate) -> Pick:
        consumed = world.consumed_capacity(request, candidate) if world.is_multi(candidate) else None
        return Pick(request, candidate, consumed)

    if request.all_mode:
        devices = world.all_devices(request)
        if devices and all(world.allocatable_alone(request, c) for c in devices):
            yield [pick(c) for c in devices]
        return
    eligible = [
        c
        for pool in world.pools.values()
        if pool.complete and not pool.invalid
        for c in pool.candidates
        if world.selectable(request, c) and world.allocatable_alone(request, c)
    ]
    for combination in itertools.combinations(eligible, request.count):
        yield [pick(c) for c in combination]


def oracle_allocate(world: World, claims: Sequence[Mapping[str, Any]]) -> OracleAnswer:
    """Whether any assignment satisfies every rule, found by trying them all."""
    error = upfront_error(world, claims)
    if error is not None:
        return OracleAnswer("error", reason=error)
    slots = [slot for index, claim in enumerate(claims) for slot in claim_slots(index, claim)]

    def search(position: int, picks: list[Pick]) -> list[Pick] | None:
        if position == len(slots):
            return picks
        slot = slots[position]
        for request in slot.alternatives:
            for chosen in _choices(world, request):
                attempt = picks + chosen
                in_claim = sum(1 for p in attempt if p.request.claim == slot.claim)
                if in_claim > MAX_RESULTS_PER_CLAIM or pick_violations(world, claims, attempt):
                    continue
                found = search(position + 1, attempt)
                if found is not None:
                    return found
        return None

    found = search(0, [])
    if found is not None:
        return OracleAnswer("allocated", picks=found)
    if world.invalid_pools:
        return OracleAnswer("invalid-pools", reason=f"invalid pools {world.invalid_pools}")
    return OracleAnswer("unsatisfiable")


def search_space(world: World, claims: Sequence[Mapping[str, Any]]) -> int:
    """How many ways there are to serve the pod's requests one by one, each on its own: the number
    of leaves a depth-first search may visit before it can prove that nothing fits.  Generators keep
    it small, since the Kubernetes algorithm (and a faithful port) is exponential in it."""
    size = 1
    for index, claim in enumerate(claims):
        for slot in claim_slots(index, claim):
            ways = 0
            for request in slot.alternatives:
                if request.all_mode:
                    ways += 1
                    continue
                eligible = sum(
                    1
                    for c in world.candidates.values()
                    if world.selectable(request, c) and world.allocatable_alone(request, c)
                )
                ways += math.comb(eligible, request.count)
            size *= max(ways, 1)
    return size
