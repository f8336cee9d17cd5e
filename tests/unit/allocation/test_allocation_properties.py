"""Property tests of the structured allocator (``dra_driver.tools.allocation.allocate``).

Why properties: the table tests pin the answers of hand-picked cases; these generate whole clusters
(pools of one to three drivers, slices with random names and node targeting, devices with typed
attributes, shared counters, consumable capacity, taints; stale generations, incomplete and invalid
pools; claims with ``exactly`` / ``All`` / ``firstAvailable`` requests, CEL selectors, constraints,
tolerations, admin access; claims already allocated) and check what must hold for every answer:

1. validity: every allocation obeys every rule (checked by the independent ``allocation_oracle``);
   unexpected errors, and ``None`` where an error was due, are failures too;
2. existence does not depend on the pool and slice order (``rng``), the search being exhaustive;
3. with ``rng=None`` the answer does not depend on the order of the ``slices`` or ``classes`` lists;
4. on small instances ``allocate`` finds an allocation exactly when a brute-force enumeration does
   (without and with ``firstAvailable``);
5. inputs are never modified (nor aliased by the answer);
6. taking a device away (one more allocated claim) never makes an unsatisfiable pod satisfiable;
7. the 32-results-per-claim limit, on pods asking for many interchangeable devices.

Generator restrictions, each for a reason:

* devices that allow multiple allocations never consume counters: Kubernetes skips the counter check
  for such a device once some of its capacity is in use, and a generic validator cannot restate that
  without copying the search;
* allocated claims form a valid state (no counter or capacity over-consumed, no device held twice);
* the oracle's instances give admin access only to single-claim pods: within one pod the Go
  allocator lets an admin result in an earlier claim block an ordinary result in a later one but not
  the reverse, an artefact of its search order rather than a rule the oracle should restate;
* constraints never involve ``All`` requests where a property compares outcomes: a constraint that
  an ``All`` device breaks aborts the attempt with an error whose occurrence depends on which
  devices earlier requests happened to get first (see ``_all_request_constrained``);
* pods whose requests have more than ``MAX_SEARCH_SPACE`` combinations are not generated: the
  search is exponential when nothing fits, in Kubernetes as here.
"""

from __future__ import annotations

import copy
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dra_driver.jsontypes import MutableJSON
from dra_driver.tools.allocation import DEFAULT_FEATURES as DEFAULT_GATES
from dra_driver.tools.allocation import AllocationError, InvalidPoolsError, allocate
from tests.sim_objects import claim_views
from tests.unit.allocation.allocation_oracle import (
    Candidate,
    Request,
    World,
    claim_slots,
    constraint_applies,
    oracle_allocate,
    quantity,
    search_space,
    upfront_error,
    validate_allocation,
)

DEFAULT_FEATURES = frozenset(DEFAULT_GATES)

NODE = "node-a"
OTHER_NODE = "node-b"
GPU = "gpu.example.com"
NIC = "nic.example.com"
# The same pool name under two drivers on purpose: a pool is identified by (driver, pool name).
POOL_IDS = ((GPU, "pool-a"), (GPU, "pool-b"), (NIC, "pool-a"))
GiB = 2**30

NODE_OBJECT: MutableJSON = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE, "zone": "z1"}},
}


def _cel(expression: str) -> MutableJSON:
    return {"cel": {"expression": expression}}


def _attr(name: str) -> str:
    """CEL for ``name`` of the device's own driver domain, guarded so that it never errs."""
    return f'"{name}" in device.attributes[device.driver] && device.attributes[device.driver].{name}'


CLASSES: list[MutableJSON] = [
    {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu"},
        "spec": {
            "selectors": [_cel(f'device.driver == "{GPU}"')],
            "config": [{"opaque": {"driver": GPU, "parameters": {"sharing": "none"}}}],
        },
    },
    {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "nic"},
        "spec": {"selectors": [_cel(f'device.driver == "{NIC}"')]},
    },
    {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "any"}, "spec": {}},
    {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "shared"},
        "spec": {"selectors": [_cel("device.allowMultipleAllocations")]},
    },
    {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "big"},
        "spec": {"selectors": [_cel(_attr("index") + " >= 2")]},
    },
]
CLASS_NAMES = [str(c["metadata"]["name"]) for c in CLASSES]

# Safe selectors: every attribute lookup is guarded, so none of them can raise at runtime.
SELECTORS = [
    "true",
    f'device.driver == "{GPU}"',
    _attr("model") + ' == "h100"',
    _attr("index") + " >= 1",
    _attr("ecc"),
    '!("numa" in device.attributes["example.com"]) || device.attributes["example.com"].numa == 0',
    "!device.allowMultipleAllocations",
    '"bw" in device.capacity[device.driver] && device.capacity[device.driver].bw.compareTo(quantity("8Gi")) >= 0',
]
CONSTRAINT_ATTRIBUTES = [  # those every device has come twice
    f"{GPU}/model",
    f"{GPU}/model",
    f"{GPU}/index",
    f"{GPU}/index",
    f"{GPU}/slot",
    f"{NIC}/slot",
    f"{GPU}/ecc",
    "example.com/numa",
]
TOLERATIONS: list[list[MutableJSON]] = [
    [],
    [],
    [{"key": "maint", "operator": "Exists"}],
    [{"key": "maint", "operator": "Equal", "value": "yes"}],
    [{"key": "maint", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}],
    [{"operator": "Exists"}],
]
CAPACITY_REQUESTS = [None] * 8 + ["1Gi", "2Gi", "3Gi", "5Gi"]
SHARED_CAPACITY_REQUESTS = [None, "1Gi", "2Gi", "3Gi", "5Gi", "5Gi"]
REQUEST_POLICIES: list[MutableJSON | None] = [
    None,
    {"default": "1Gi", "validRange": {"min": "1Gi", "max": "8Gi", "step": "1Gi"}},
    {"default": "2Gi", "validValues": ["1Gi", "2Gi", "4Gi"]},
]


def many(maximum: int) -> st.SearchStrategy[int]:
    """1..maximum, leaning towards the upper half (and shrinking towards it): pools of one device
    rarely make a pod's requests compete."""
    middle = (maximum + 2) // 2
    return st.sampled_from([*range(middle, maximum + 1), *range(middle - 1, 0, -1)])


def few(maximum: int) -> st.SearchStrategy[int]:
    """1..maximum, small numbers more likely: big pods mostly do not fit, and a property learns
    most from pods that do."""
    return st.sampled_from([n for n in range(1, maximum + 1) for _ in range(maximum + 1 - n)])


# --------------------------------------------------------------------------------------------------
# Generators: devices, pools, clusters


def one_in(n: int) -> st.SearchStrategy[bool]:
    """True about once in ``n`` draws.  Not ``integers(...) == 0``: Hypothesis favours zero (its
    simplest value), which would make the rare case common, and shrinking should lead away from it."""
    return st.integers(0, n - 1).map(lambda k: k == n // 2)


@st.composite
def device_attributes(draw: st.DrawFn) -> MutableJSON:
    attributes: MutableJSON = {
        "model": {"string": draw(st.sampled_from(["a100", "h100", "l4"]))},
        "index": {"int": draw(st.integers(0, 3))},
        "ecc": {"bool": draw(st.booleans())},
    }
    slot = draw(st.one_of(st.none(), st.integers(0, 2)))
    if slot is not None:  # an int on some devices, a string on others: typed comparison matters
        attributes["slot"] = {"int": slot} if draw(st.booleans()) else {"string": str(slot)}
    if draw(st.booleans()):
        attributes["example.com/numa"] = {"int": draw(st.integers(0, 1))}
    return attributes


@st.composite
def counter_sets(draw: st.DrawFn) -> dict[str, dict[str, str]]:
    """The shared counters of one pool (published in their own slice, as from Kubernetes 1.35)."""
    sets: dict[str, dict[str, str]] = {
        "cs-0": {"mem": draw(st.sampled_from(["4Gi", "8Gi"])), "units": str(draw(st.integers(1, 4)))}
    }
    if draw(st.booleans()):
        sets["cs-1"] = {"mem": draw(st.sampled_from(["2Gi", "4Gi"]))}
    return sets


@st.composite
def device(draw: st.DrawFn, name: str, sets: dict[str, dict[str, str]]) -> MutableJSON:
    body: MutableJSON = {"name": name, "attributes": draw(device_attributes())}
    kind = draw(st.sampled_from(["plain", "plain", "counters", "counters", "shared"]))
    if kind == "counters" and sets:
        consumes = []
        for set_name in draw(st.lists(st.sampled_from(sorted(sets)), min_size=1, max_size=2, unique=True)):
            counters = draw(st.lists(st.sampled_from(sorted(sets[set_name])), min_size=1, unique=True))
            consumes.append(
                {
                    "counterSet": set_name,
                    "counters": {
                        c: {"value": draw(st.sampled_from(["1Gi", "2Gi", "4Gi"]) if c == "mem" else st.just("1"))}
                        for c in counters
                    },
                }
            )
        body["consumesCounters"] = consumes
    elif kind == "shared":
        body["allowMultipleAllocations"] = True
        capacity: MutableJSON = {"value": draw(st.sampled_from(["4Gi", "8Gi"]))}
        policy = draw(st.sampled_from(REQUEST_POLICIES))
        if policy is not None:
            capacity["requestPolicy"] = policy
        body["capacity"] = {"bw": capacity}
    elif draw(one_in(3)):
        body["capacity"] = {"bw": {"value": draw(st.sampled_from(["4Gi", "16Gi"]))}}
    if draw(one_in(5)):
        body["taints"] = [
            {
                "key": "maint",
                "value": draw(st.sampled_from(["yes", "no"])),
                "effect": draw(st.sampled_from(["NoSchedule", "NoExecute", "None"])),
            }
        ]
    if draw(one_in(8)):  # to be bound after scheduling; such pools are tried last
        body["bindingConditions"] = ["attached"]
        body["bindingFailureConditions"] = ["attach-failed"]
        if draw(st.booleans()):
            body["bindsToNode"] = True
    return body


ODDITIES = ["none"] * 10 + ["incomplete", "invalid", "stale", "empty-slice"]
TARGETS = ["node"] * 5 + ["all", "all", "other", "zone-match", "zone-miss", "per-device"]
DEVICE_TARGETS = ["node", "node", "all", "other", "zone-match", "zone-miss"]


def _targeting(target: str) -> MutableJSON:
    if target == "per-device":  # each device names its node(s): DRAPartitionableDevices
        return {"perDeviceNodeSelection": True}
    if target == "node":
        return {"nodeName": NODE}
    if target == "other":
        return {"nodeName": OTHER_NODE}
    if target == "all":
        return {"allNodes": True}
    zone = "z1" if target == "zone-match" else "z2"
    return {
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": [zone]}]}]
        }
    }


def _slice(name: str, driver: str, pool: str, generation: int, count: int, spec: MutableJSON) -> MutableJSON:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": driver, "pool": {"name": pool, "generation": generation, "resourceSliceCount": count}}
        | spec,
    }


@dataclass
class PoolShape:
    """Size limits for the generated pools."""

    max_device_slices: int = 3
    max_devices_per_slice: int = 4
    oddities: bool = True  # incomplete pools, invalid pools, stale generations


@st.composite
def resource_pool(draw: st.DrawFn, driver: str, pool: str, names: list[str], shape: PoolShape) -> list[MutableJSON]:
    """The slices of one pool; ``names`` supplies unique slice names (consumed from the front)."""
    generation = draw(st.integers(0, 2))
    sets = draw(counter_sets()) if draw(st.booleans()) else {}
    # At most one oddity per pool, drawn once: separate rare draws come out correlated under
    # Hypothesis (it likes to repeat values), which made odd pools the rule rather than the exception.
    oddity = draw(st.sampled_from(ODDITIES)) if shape.oddities else "none"
    sizes = [draw(many(shape.max_devices_per_slice)) for _ in range(draw(many(shape.max_device_slices)))]
    if oddity == "empty-slice":  # Kubernetes allows a slice without devices
        sizes[draw(st.integers(0, len(sizes) - 1))] = 0
    numbers = draw(st.lists(st.integers(0, 60), min_size=sum(sizes), max_size=sum(sizes), unique=True))
    device_lists: list[list[MutableJSON]] = []
    for size in sizes:
        device_lists.append([draw(device(f"dev-{numbers.pop()}", sets)) for _ in range(size)])
    targets = [draw(st.sampled_from(TARGETS)) for _ in sizes]
    for target, devices in zip(targets, device_lists, strict=True):
        if target == "per-device":
            for d in devices:
                d.update(_targeting(draw(st.sampled_from(DEVICE_TARGETS))))

    if oddity == "invalid":  # one device name twice in the slices this node sees
        seen = [i for i, t in enumerate(targets) if t in {"node", "all", "zone-match"} and device_lists[i]]
        if seen:
            index = draw(st.sampled_from(seen))
            twin = draw(device(str(device_lists[index][0]["name"]), sets))
            device_lists[draw(st.sampled_from(seen))].append(twin)

    specs: list[MutableJSON] = [
        _targeting(t) | {"devices": devices} for t, devices in zip(targets, device_lists, strict=True)
    ]
    if sets:
        specs.append(
            {
                "allNodes": True,
                "sharedCounters": [
                    {"name": n, "counters": {c: {"value": v} for c, v in counters.items()}}
                    for n, counters in sets.items()
                ],
            }
        )
    count = len(specs) + (1 if oddity == "incomplete" else 0)
    slices = [_slice(names.pop(0), driver, pool, generation, count, spec) for spec in specs]
    if oddity == "stale" and generation > 0:
        # A stale slice of the previous generation (its count never matches): never allocatable.
        stale = [draw(device(f"stale-{i}", {})) for i in range(2)]
        slices.append(
            _slice(names.pop(0), driver, pool, generation - 1, len(specs) + 3, {"nodeName": NODE, "devices": stale})
        )
    return slices


@st.composite
def cluster_slices(draw: st.DrawFn, shape: PoolShape, max_pools: int = 3) -> list[MutableJSON]:
    pools = draw(st.permutations(POOL_IDS))[: draw(many(max_pools))]
    names = draw(st.lists(st.text("abcxyz-", min_size=1, max_size=4), min_size=20, max_size=20, unique=True))
    slices: list[MutableJSON] = []
    for driver, pool in pools:
        slices += draw(resource_pool(driver, pool, names, shape))
    return list(draw(st.permutations(slices)))


# --------------------------------------------------------------------------------------------------
# Generators: claims already allocated


def _share(
    world: World, candidate: Candidate, request_amount: str | None, taken: dict[Any, Fraction]
) -> MutableJSON | None:
    """A shared allocation of ``candidate`` consuming what a request of ``request_amount`` would, if it fits."""
    request = Request(
        claim=-1,
        base="old",
        sub=None,
        class_name="any",
        selectors=[],
        all_mode=False,
        count=1,
        admin=False,
        tolerations=[],
        capacity={"bw": quantity(request_amount)} if request_amount else {},
        has_capacity=request_amount is not None,
    )
    consumed = world.consumed_capacity(request, candidate)
    if consumed is None:
        return None
    for name, amount in consumed.items():
        if taken.get((candidate.key, name), Fraction(0)) + amount > quantity(
            candidate.device["capacity"][name]["value"]
        ):
            return None
    for name, amount in consumed.items():
        taken[(candidate.key, name)] = taken.get((candidate.key, name), Fraction(0)) + amount
    return {"consumedCapacity": {name: _format_bytes(amount) for name, amount in consumed.items()}}


def _format_bytes(amount: Fraction) -> str:
    return f"{int(amount / GiB)}Gi" if amount % GiB == 0 else str(int(amount))


def _allocated_claim(index: int, results: list[MutableJSON]) -> MutableJSON:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"allocated-{index}", "namespace": "default", "uid": f"uid-allocated-{index}"},
        "spec": {
            "devices": {"requests": [{"name": "old", "exactly": {"deviceClassName": "any", "count": len(results)}}]}
        },
        "status": {"allocation": {"devices": {"results": results}}},
    }


def _fits_counters(world: World, candidate: Candidate, used: dict[Any, Fraction]) -> bool:
    pool = world.pools[candidate.key[:2]]
    wanted = {}
    for consumption in candidate.device.get("consumesCounters") or []:
        for counter, value in (consumption.get("counters") or {}).items():
            key = (candidate.key[:2], consumption["counterSet"], counter)
            wanted[key] = used.get(key, Fraction(0)) + quantity(value["value"])
            if wanted[key] > pool.counter_sets[consumption["counterSet"]][counter]:
                return False
    used.update(wanted)
    return True


@st.composite
def allocated_claims(draw: st.DrawFn, slices: list[MutableJSON]) -> list[MutableJSON]:
    """Claims allocated earlier, built from real devices of the cluster (any node), as a valid state."""
    world = World(NODE_OBJECT, slices, CLASSES, [], DEFAULT_FEATURES)
    devices: list[Candidate] = []
    for pool_key, pool in sorted(world.pools.items()):
        if not pool.complete or pool.invalid:
            continue
        for s in pool.device_slices_all_nodes:
            for d in s["spec"].get("devices") or []:
                devices.append(Candidate((pool_key[0], pool_key[1], str(d["name"])), d, s))
    if not devices:
        return []
    chosen = draw(st.lists(st.sampled_from(devices), max_size=min(4, len(devices) // 2), unique_by=lambda c: c.key))
    counters: dict[Any, Fraction] = {}
    capacity: dict[Any, Fraction] = {}
    results: list[MutableJSON] = []
    for candidate in chosen:
        result: MutableJSON = {
            "request": "old",
            "driver": candidate.key[0],
            "pool": candidate.key[1],
            "device": candidate.key[2],
        }
        if world.is_multi(candidate):
            for n in range(draw(st.integers(1, 2))):
                share = _share(world, candidate, draw(st.sampled_from(CAPACITY_REQUESTS)), capacity)
                if share is not None:
                    results.append(result | share | {"shareID": f"share-{len(results)}-{n}"})
        elif draw(one_in(4)):
            results.append(result | {"adminAccess": True})
        elif _fits_counters(world, candidate, counters):
            results.append(result)
    if not results:
        return []
    split = draw(st.integers(0, len(results)))
    groups = [g for g in (results[:split], results[split:]) if g]
    return [_allocated_claim(i, g) for i, g in enumerate(groups)]


# --------------------------------------------------------------------------------------------------
# Generators: the pod's claims


@dataclass
class ClaimShape:
    max_claims: int = 3
    max_requests: int = 3
    max_count: int = 3
    first_available: bool = True
    admin: bool = True
    all_mode: bool = True
    constraints_on_all: bool = True


@st.composite
def request_body(draw: st.DrawFn, shape: ClaimShape, *, admin_ok: bool) -> MutableJSON:
    body: MutableJSON = {"deviceClassName": draw(st.sampled_from(["any", "any", "any", "gpu", "gpu", *CLASS_NAMES]))}
    if shape.all_mode and draw(one_in(10)):
        body["allocationMode"] = "All"
    else:
        body["allocationMode"] = "ExactCount"
        body["count"] = draw(few(shape.max_count))
    selectors = draw(st.lists(st.sampled_from(SELECTORS), max_size=draw(st.sampled_from([0, 0, 1, 1, 2])), unique=True))
    if selectors:
        body["selectors"] = [_cel(s) for s in selectors]
    tolerations = draw(st.sampled_from(TOLERATIONS))
    if tolerations:
        body["tolerations"] = copy.deepcopy(tolerations)
    # Requests for the class of shared devices mostly ask for capacity: that is what request
    # policies round up (or refuse).
    amount = draw(
        st.sampled_from(SHARED_CAPACITY_REQUESTS if body["deviceClassName"] == "shared" else CAPACITY_REQUESTS)
    )
    if amount is not None:
        body["capacity"] = {"requests": {"bw": amount}}
    if admin_ok and draw(one_in(6)):
        body["adminAccess"] = True
    return body


def _all_request_constrained(claim: MutableJSON) -> bool:
    """Whether a constraint of ``claim`` covers an ``All`` (sub)request (see the module docstring)."""
    slots = claim_slots(0, claim)
    return any(
        request.all_mode and constraint_applies(constraint, request)
        for constraint in claim["spec"]["devices"].get("constraints") or []
        for slot in slots
        for request in slot.alternatives
    )


@st.composite
def resource_claim(draw: st.DrawFn, index: int, shape: ClaimShape, *, admin_ok: bool, max_requests: int) -> MutableJSON:
    requests: list[MutableJSON] = []
    scope_names: list[str] = []
    for r in range(draw(few(max_requests))):
        name = f"r{r}"
        scope_names.append(name)
        if shape.first_available and draw(one_in(4)):
            subs = []
            for s in range(draw(st.integers(1, 3))):
                subs.append({"name": f"s{s}"} | draw(request_body(shape, admin_ok=False)))
                scope_names.append(f"{name}/s{s}")
            requests.append({"name": name, "firstAvailable": subs})
        else:
            requests.append({"name": name, "exactly": draw(request_body(shape, admin_ok=admin_ok))})
    constraints = []
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 1, 2]))):
        kind = draw(st.sampled_from(["matchAttribute", "distinctAttribute"]))
        scope = draw(
            st.one_of(st.just([]), st.lists(st.sampled_from(scope_names), min_size=1, max_size=2, unique=True))
        )
        constraint: MutableJSON = {kind: draw(st.sampled_from(CONSTRAINT_ATTRIBUTES))}
        if scope:
            constraint["requests"] = scope
        constraints.append(constraint)
    claim: MutableJSON = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"claim-{index}", "namespace": "default", "uid": f"uid-claim-{index}"},
        "spec": {"devices": {"requests": requests, "constraints": constraints}},
    }
    if not shape.constraints_on_all and _all_request_constrained(claim):
        claim["spec"]["devices"]["constraints"] = []
    return claim


@st.composite
def pod_claims(draw: st.DrawFn, shape: ClaimShape, max_total_requests: int = 9) -> list[MutableJSON]:
    count = draw(few(shape.max_claims))
    claims = []
    budget = max_total_requests
    for i in range(count):
        if budget <= 0:
            break
        claim = draw(resource_claim(i, shape, admin_ok=shape.admin, max_requests=min(shape.max_requests, budget)))
        budget -= len(claim["spec"]["devices"]["requests"])
        claims.append(claim)
    return claims


# --------------------------------------------------------------------------------------------------
# Scenarios


@dataclass
class Scenario:
    """One call of the allocator: the pod's claims and everything the scheduler knows."""

    slices: list[MutableJSON]
    allocated_claims: list[MutableJSON]
    claims: list[MutableJSON]
    classes: list[MutableJSON] = field(default_factory=lambda: copy.deepcopy(CLASSES))
    node: MutableJSON = field(default_factory=lambda: copy.deepcopy(NODE_OBJECT))
    features: frozenset[str] = DEFAULT_FEATURES

    def world(self) -> World:
        return World(self.node, self.slices, self.classes, self.allocated_claims, self.features)

    def allocate(self, rng: random.Random | None = None) -> list[MutableJSON] | None:
        result: list[MutableJSON] | None = allocate(
            claims=claim_views(self.claims),
            node=self.node,
            slices=self.slices,
            classes=self.classes,
            allocated_claims=claim_views(self.allocated_claims),
            features=set(self.features),
            rng=rng,
        )
        return result


# The depth-first search is exponential: a pod that does not fit makes it try every combination of
# the earlier requests' devices.  Kubernetes does the same (in Go, some hundred times faster); pods
# with more combinations than this are not generated, so that no example takes seconds.
MAX_SEARCH_SPACE = 5000


@st.composite
def scenarios(draw: st.DrawFn, pools: PoolShape | None = None, claims: ClaimShape | None = None) -> Scenario:
    slices = draw(cluster_slices(pools or PoolShape()))
    scenario = Scenario(
        slices=slices,
        allocated_claims=draw(allocated_claims(slices)),
        claims=draw(pod_claims(claims or ClaimShape())),
    )
    assume(search_space(scenario.world(), scenario.claims) <= MAX_SEARCH_SPACE)
    return scenario


ORDER_SAFE = ClaimShape(constraints_on_all=False)
SMALL_POOLS = PoolShape(max_device_slices=2, max_devices_per_slice=2)


@st.composite
def small_scenarios(draw: st.DrawFn, first_available: bool = False) -> Scenario:
    """At most 8 devices on the node, at most 3 requests of count at most 2 (firstAvailable only
    when asked for: the brute force then tries each subrequest in turn)."""
    slices = draw(cluster_slices(SMALL_POOLS, max_pools=2))
    shape = ClaimShape(
        max_claims=2, max_requests=3, max_count=2, first_available=first_available, constraints_on_all=False
    )
    claims = draw(pod_claims(shape, max_total_requests=3))
    if len(claims) > 1:  # admin access only in single-claim pods (see the module docstring)
        for claim in claims:
            for request in claim["spec"]["devices"]["requests"]:
                request.get("exactly", {}).pop("adminAccess", None)
    return Scenario(slices=slices, allocated_claims=draw(allocated_claims(slices)), claims=claims)


# Counts whose sums often land just below, on, or just above 32.
CROWDED_COUNTS = [1, 10, 11, 12, 16, 17, 21, 22, 23]


@dataclass
class CrowdedPod:
    """A pod asking for many interchangeable devices, and what Kubernetes must answer."""

    scenario: Scenario
    expected: str  # "allocated", "unsatisfiable" or "AllocationError"


@st.composite
def crowded_pods(draw: st.DrawFn) -> CrowdedPod:
    """20-48 identical free devices and requests for up to 24 each: the only limit that can bite is
    the 32 results per claim (checked up front for the smallest choice of subrequests, and again as
    the search picks subrequests).  The pod never needs more devices than there are, so the
    depth-first search is never made to prove an exponential impossibility."""
    total = draw(st.integers(20, 48))
    devices = [{"name": f"gpu-{i}", "attributes": {"index": {"int": i % 4}}} for i in range(total)]
    half = draw(st.integers(0, total))
    names = draw(st.lists(st.text("abc", min_size=1, max_size=3), min_size=2, max_size=2, unique=True))
    slices = [
        _slice(names[0], GPU, "pool-a", 0, 2, {"nodeName": NODE, "devices": devices[:half]}),
        _slice(names[1], GPU, "pool-a", 0, 2, {"nodeName": NODE, "devices": devices[half:]}),
    ]

    def claim(index: int, requests: list[MutableJSON]) -> MutableJSON:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"claim-{index}", "namespace": "default", "uid": f"uid-claim-{index}"},
            "spec": {"devices": {"requests": requests}},
        }

    if draw(one_in(6)):  # all of them: more than 32 aborts the attempt
        request = {"name": "r0", "exactly": {"deviceClassName": "any", "allocationMode": "All"}}
        expected = "AllocationError" if total > 32 else "allocated"
        return CrowdedPod(Scenario(slices=slices, allocated_claims=[], claims=[claim(0, [request])]), expected)

    claims: list[MutableJSON] = []
    options: list[list[list[int]]] = []  # per claim, per request: the device counts it may take, in order
    budget = total
    for c in range(draw(few(2))):
        requests, counts = [], []
        for r in range(draw(few(3))):
            if budget <= 0:
                break
            sizes = [n for n in CROWDED_COUNTS if n <= budget]
            # Subrequests from most to fewest devices, as users write them ("two GPUs, else one").
            wanted = sorted(draw(st.lists(st.sampled_from(sizes), min_size=1, max_size=3)), reverse=True)
            budget -= max(wanted)
            if len(wanted) == 1 and draw(one_in(3)):
                requests.append({"name": f"r{r}", "exactly": {"deviceClassName": "any", "count": wanted[0]}})
            else:
                subs = [{"name": f"s{i}", "deviceClassName": "gpu", "count": n} for i, n in enumerate(wanted)]
                requests.append({"name": f"r{r}", "firstAvailable": subs})
            counts.append(wanted)
        if requests:
            claims.append(claim(c, requests))
            options.append(counts)
    if any(sum(min(o) for o in per_claim) > 32 for per_claim in options):
        expected = "AllocationError"
    elif all(any(sum(choice) <= 32 for choice in itertools.product(*per_claim)) for per_claim in options):
        expected = "allocated"
    else:
        expected = "unsatisfiable"
    return CrowdedPod(Scenario(slices=slices, allocated_claims=[], claims=claims), expected)


# --------------------------------------------------------------------------------------------------
# Outcomes


@dataclass(frozen=True)
class Outcome:
    kind: str  # "allocated", "unsatisfiable" or the exception's class name
    allocations: list[MutableJSON] | None = None
    message: str = ""


def run(call: Callable[[], list[MutableJSON] | None]) -> Outcome:
    try:
        result = call()
    except InvalidPoolsError as exc:
        return Outcome("InvalidPoolsError", message=str(exc))
    except AllocationError as exc:
        return Outcome("AllocationError", message=str(exc))
    if result is None:
        return Outcome("unsatisfiable")
    return Outcome("allocated", allocations=result)


def _without_share_ids(allocations: list[MutableJSON] | None) -> Any:
    stripped = copy.deepcopy(allocations)
    for item in stripped or []:
        for result in (item.get("devices") or {}).get("results") or []:
            if result.get("shareID"):
                result["shareID"] = "<share>"
    return stripped


def assert_valid(scenario: Scenario, outcome: Outcome, world: World | None = None) -> None:
    """The answer obeys every rule; errors and ``None`` only where Kubernetes gives them."""
    world = world or scenario.world()
    expected_error = upfront_error(world, scenario.claims)
    if outcome.kind == "allocated":
        assert expected_error is None, f"allocated although the attempt must abort: {expected_error}"
        assert outcome.allocations is not None
        problems = validate_allocation(world, scenario.claims, outcome.allocations)
        assert not problems, "\n".join(problems)
    elif outcome.kind == "unsatisfiable":
        assert expected_error is None, f"None although the attempt must abort: {expected_error}"
        assert not world.invalid_pools, f"None, but invalid pools {world.invalid_pools} need InvalidPoolsError"
    elif outcome.kind == "InvalidPoolsError":
        assert world.invalid_pools, f"InvalidPoolsError without an invalid pool: {outcome.message}"
    else:
        plausible = expected_error is not None or any(_all_request_constrained(c) for c in scenario.claims)
        assert plausible, f"unexpected {outcome.kind}: {outcome.message}"


# --------------------------------------------------------------------------------------------------
# The properties


@settings(max_examples=120, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=scenarios())
def test_every_allocation_obeys_every_rule(scenario: Scenario) -> None:
    """Property 1: validity of whatever ``allocate`` returns, with both device orders."""
    world = scenario.world()
    assert_valid(scenario, run(scenario.allocate), world)
    assert_valid(scenario, run(lambda: scenario.allocate(random.Random(7))), world)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=scenarios(claims=ORDER_SAFE), seeds=st.lists(st.integers(0, 2**32 - 1), min_size=2, max_size=2))
def test_existence_does_not_depend_on_device_order(scenario: Scenario, seeds: list[int]) -> None:
    """Property 2: the depth-first search is exhaustive, so shuffling pools and slices changes which
    allocation is found but never whether one is, nor which error aborts the attempt."""
    world = scenario.world()
    baseline = run(scenario.allocate)
    assert_valid(scenario, baseline, world)
    for seed in seeds:
        shuffled = run(lambda seed=seed: scenario.allocate(random.Random(seed)))
        assert_valid(scenario, shuffled, world)
        assert shuffled.kind == baseline.kind, (seed, baseline, shuffled)


@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=scenarios(), data=st.data())
def test_default_order_is_deterministic(scenario: Scenario, data: st.DataObject) -> None:
    """Property 3: with ``rng=None`` pools are sorted by (driver, pool) and slices by name, so the
    answer depends neither on the listing order of slices or classes nor on the call.  The allocator
    caches what it derives from input dicts by their identity; equal copies (every cache missed) and
    the same dicts again (every cache hit) must give the same answer."""
    first = run(scenario.allocate)
    again = run(scenario.allocate)
    copied = run(copy.deepcopy(scenario).allocate)
    shuffled = replace(
        scenario,
        slices=list(data.draw(st.permutations(scenario.slices), label="slices")),
        classes=list(data.draw(st.permutations(scenario.classes), label="classes")),
    )
    reordered = run(shuffled.allocate)
    for other in (again, copied, reordered):
        assert other.kind == first.kind
        assert _without_share_ids(other.allocations) == _without_share_ids(first.allocations)


@settings(max_examples=120, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=small_scenarios())
def test_allocates_exactly_when_brute_force_finds_an_assignment(scenario: Scenario) -> None:
    """Property 4: on small instances, compare with trying every assignment."""
    world = scenario.world()
    answer = oracle_allocate(world, scenario.claims)
    outcome = run(scenario.allocate)
    expected = {
        "allocated": "allocated",
        "unsatisfiable": "unsatisfiable",
        "invalid-pools": "InvalidPoolsError",
        "error": "AllocationError",
    }[answer.outcome]
    assert outcome.kind == expected, f"oracle: {answer.outcome} {answer.reason} {answer.picks}; allocator: {outcome}"
    assert_valid(scenario, outcome, world)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=small_scenarios(first_available=True))
def test_first_available_allocates_exactly_when_brute_force_does(scenario: Scenario) -> None:
    """Property 4 with firstAvailable: the brute force tries every subrequest of every request."""
    test_allocates_exactly_when_brute_force_finds_an_assignment.hypothesis.inner_test(scenario)


def _without_allow_multiple_allocations(claims: list[MutableJSON]) -> list[MutableJSON]:
    """The claims with no selector that reads ``device.allowMultipleAllocations`` (and class "any" for
    "shared"): whether CEL knows that field with DRAConsumableCapacity off differs between Kubernetes
    releases (a compile error in 1.34's declarations, accepted by the stored-expression environment of
    later ones), so gated-off runs stay clear of it."""
    claims = copy.deepcopy(claims)
    for claim in claims:
        for request in claim["spec"]["devices"]["requests"]:
            for body in [request.get("exactly") or {}, *(request.get("firstAvailable") or [])]:
                if body.get("deviceClassName") == "shared":
                    body["deviceClassName"] = "any"
                selectors = [s for s in body.get("selectors") or [] if "allowMultiple" not in s["cel"]["expression"]]
                if "selectors" in body:
                    body["selectors"] = selectors
    return claims


@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    scenario=small_scenarios(first_available=True),
    gates=st.sets(st.sampled_from(sorted(DEFAULT_FEATURES))),
)
def test_feature_gates_match_brute_force(scenario: Scenario, gates: set[str]) -> None:
    """Property 4 with gates off: gated fields abort the attempt, counters, taints, shared capacity
    and their slices are ignored as Kubernetes ignores them with the gate off."""
    if "DRAConsumableCapacity" not in gates:
        scenario = replace(scenario, claims=_without_allow_multiple_allocations(scenario.claims))
    test_allocates_exactly_when_brute_force_finds_an_assignment.hypothesis.inner_test(
        replace(scenario, features=frozenset(gates))
    )


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(pod=crowded_pods())
def test_never_more_than_32_results_per_claim(pod: CrowdedPod) -> None:
    """The result limit: an up-front error when even the smallest subrequests need more than 32
    devices in one claim, otherwise a subrequest choice that keeps every claim within 32, if any."""
    outcome = run(pod.scenario.allocate)
    assert outcome.kind == pod.expected, outcome
    assert_valid(pod.scenario, outcome)


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=scenarios(), seed=st.one_of(st.none(), st.integers(0, 2**32 - 1)))
def test_inputs_are_never_modified(scenario: Scenario, seed: int | None) -> None:
    """Property 5: the scheduler's informer objects are shared; the allocator must not write to them."""
    before = copy.deepcopy(scenario)
    outcome = run(lambda: scenario.allocate(None if seed is None else random.Random(seed)))
    assert scenario == before
    if outcome.allocations:  # nor may the answer alias them
        for allocated in outcome.allocations:
            for result in (allocated.get("devices") or {}).get("results") or []:
                if result.get("tolerations"):
                    result["tolerations"].append({"key": "mutated"})
            for config in (allocated.get("devices") or {}).get("config") or []:
                if isinstance(config.get("opaque"), dict):
                    config["opaque"]["mutated"] = True
        assert scenario == before, "the allocation result shares objects with the inputs"


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=scenarios(claims=ClaimShape(max_count=3, constraints_on_all=False)), data=st.data())
def test_taking_a_device_never_makes_a_pod_fit(scenario: Scenario, data: st.DataObject) -> None:
    """Property 6: one more allocated claim only removes options (monotonicity).  Not with
    constraints over ``All`` requests: their error depends on what earlier requests got first, so
    taking a device can turn that error into an allocation (the module docstring says more)."""
    world = scenario.world()
    keys = sorted(world.candidates)
    if not keys:
        return
    key = data.draw(st.sampled_from(keys), label="taken device")
    candidate = world.candidates[key]
    result: MutableJSON = {"request": "old", "driver": key[0], "pool": key[1], "device": key[2]}
    if world.is_multi(candidate):
        # A share can push a device out of an All request's fixed set (capacity no longer fits), which
        # turns "one of All's devices is unusable" into success: that is Kubernetes' rule, not a bug.
        if any(r.all_mode for c in scenario.claims for slot in claim_slots(0, c) for r in slot.alternatives):
            return
        result |= {"shareID": "share-extra", "consumedCapacity": {"bw": "1Gi"}}
    taken = replace(scenario, allocated_claims=[*scenario.allocated_claims, _allocated_claim(99, [result])])
    after = run(taken.allocate)
    if after.kind == "allocated":
        before = run(scenario.allocate)
        assert before.kind == "allocated", f"fits only after {key} was taken: {before}"


def test_no_claims_gives_an_empty_list() -> None:
    assert (
        allocate(
            claims=[], node=NODE_OBJECT, slices=[], classes=CLASSES, allocated_claims=[], features=set(DEFAULT_FEATURES)
        )
        == []
    )
