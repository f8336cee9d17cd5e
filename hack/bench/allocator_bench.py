#!/usr/bin/env python3
"""Benchmark: the structured allocator (``dra_driver.tools.allocation.allocate``), with and without its caches.

What a scheduler pays to place a pod's MIG claims, in two parts:

1. **One node**: an 8x H100 node (the device model's own slices: 200 devices, 8 counter sets) that is
   0 %, 50 % and 90 % full, and three claims on it -- one 1g.10gb device; four 1g.10gb devices on one
   GPU (``matchAttribute`` on ``gpu.migdra.io/parentUUID``); and eight 1g.10gb devices on one GPU,
   which never fit (an H100 has seven 1g.10gb placements), so the search tries every combination of
   free 1g.10gb devices on every GPU before it gives up.  "x % full" means allocated claims holding
   x % of the node's memory-slice counters; they are made by the allocator itself, one claim at a
   time with a seeded mix of profiles, so devices in use and counters consumed are what a scheduler
   would have left.  Target: median < 2 ms for the fitting 1-device claim.
2. **A cluster**: ``--pods`` pods (one single-device claim each, a seeded mix of profiles) scheduled
   one by one across ``--nodes`` such nodes, the way kube-scheduler walks nodes: from a start index
   that moves on by one node per pod, calling ``allocate`` node after node until one fits; the
   result becomes an allocated claim every later call sees.  Reported: pods/s, allocate calls per
   pod, and the median and p99 of one ``allocate`` call.

**Baseline**: the same call with ``caching=False`` -- the same search (same order, same result,
checked), but every CEL selector compiled for every evaluation and every device's CEL activation
rebuilt for every evaluation.  It is what the allocator would cost without its compiled-program
cache and activation cache, nothing else removed; it is measured in the same runs as the cached
call, interleaved with it (the node part alternates the two call by call; the cluster part runs the
two passes in an order rotated from run to run), and every ratio is taken per run.  The baseline is
slow, so it is timed fewer times per run (``--baseline-repeat``) and, in the cluster part, only for
the first ``--baseline-pods`` pods; the cached pass is reported for those same pods too, and the
ratio compares like with like.

Correctness is checked on every call, outside the timings, and any violation exits non-zero: the
cached and baseline results are identical; every result is checked device by device against the
slices (the right profile, not in use, one GPU where asked, no counter of any counter set
overdrawn); whether a claim fits is decided independently by brute force over the node's free
devices, and ``None`` must come back exactly when nothing fits.  Results go to ``docs/benchmarks.md``
("Structured allocator") through ``hack/bench/run_all.py``.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import random
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib import Report, add_common_arguments, check_runs, percentile, ratios, summary

from dra_driver.devicemodel import example_inventory
from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.layout import render_slices
from dra_driver.devicemodel.pool import build_pool
from dra_driver.jsontypes import MutableJSON
from dra_driver.quantity import Quantity
from dra_driver.resourceclaim import ResourceClaimStatusView, ResourceClaimView
from dra_driver.tools.allocation import DEFAULT_FEATURES, AllocationStats, allocate
from dra_driver.tools.cel.documents import load_documents

REPO = Path(__file__).resolve().parents[2]
CLASS_DIR = REPO / "deviceclasses"
DRIVER = "gpu.migdra.io"
MIG_CLASS = "mig.migdra.io"
GPU_ATTRIBUTE = f"{DRIVER}/parentUUID"  # names the GPU a MIG placement belongs to
MODELS = ["H100-SXM5-80GB"] * 8
FILLS = (0, 50, 90)  # % of the node's memory-slice counters held by allocated claims
# Profiles of the filling claims and of the pods, with their weights (seeded, so every run is the same).
MIX: tuple[tuple[str, int], ...] = (
    ("1g.10gb", 40),
    ("1g.20gb", 10),
    ("2g.20gb", 20),
    ("3g.40gb", 15),
    ("4g.40gb", 5),
    ("7g.80gb", 10),
)
WAYS = ("cached", "baseline")
SLOW_MS = 100.0  # a node case whose call takes longer gets --slow-repeat cached calls per run, not --repeat

Request = tuple[str, str, int]  # (request name, profile, count)


# -- claims --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimShape:
    """What a claim asks for: requests of MIG profiles, optionally all on one GPU."""

    label: str
    requests: tuple[Request, ...]
    same_gpu: bool = False

    def claim(self, name: str) -> ResourceClaimView:
        """The claim as a scheduler holds it: read once into the claim model, as an informer's object."""
        return ResourceClaimView.model_validate(self.body(name))

    def body(self, name: str) -> MutableJSON:
        """The claim as a v1 ResourceClaim dict."""
        requests = [
            {
                "name": request,
                "exactly": {
                    "deviceClassName": MIG_CLASS,
                    "allocationMode": "ExactCount",
                    "count": count,
                    "selectors": [{"cel": {"expression": f"device.attributes['{DRIVER}'].profile == '{profile}'"}}],
                },
            }
            for request, profile, count in self.requests
        ]
        devices: MutableJSON = {"requests": requests}
        if self.same_gpu:
            devices["constraints"] = [
                {"requests": [request for request, _, _ in self.requests], "matchAttribute": GPU_ATTRIBUTE}
            ]
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "bench", "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, name))},
            "spec": {"devices": devices},
        }


ONE = ClaimShape("1 device (1g.10gb)", (("mig", "1g.10gb", 1),))
FOUR = ClaimShape("4 devices (1g.10gb), `matchAttribute` parentUUID", (("mig", "1g.10gb", 4),), same_gpu=True)
NEVER = ClaimShape(
    "8 devices (1g.10gb), `matchAttribute` parentUUID: cannot fit", (("mig", "1g.10gb", 8),), same_gpu=True
)
SHAPES = (ONE, FOUR, NEVER)
EXPECTED_FIT = {ONE.label: True, FOUR.label: True, NEVER.label: False}


def single(profile: str) -> ClaimShape:
    return ClaimShape(profile, (("mig", profile, 1),))


def allocated(claim: ResourceClaimView, result: MutableJSON) -> ResourceClaimView:
    """The claim once allocated: what later calls receive in ``allocated_claims``."""
    return claim.model_copy(update={"status": ResourceClaimStatusView.model_validate({"allocation": result})})


def load_classes() -> list[MutableJSON]:
    """The project's own DeviceClasses (``deviceclasses/*.yaml``, as the Helm chart ships them)."""
    return [dict(doc.body) for path in sorted(CLASS_DIR.glob("*.yaml")) for doc in load_documents(path)]


# -- what a node has, and an independent check of results -----------------------------------------


def _amount(entry: MutableJSON) -> int:
    value = Quantity.parse(str(entry["value"])).as_int64()
    if value is None:
        raise SystemExit(f"counter value {entry['value']!r} is not an integer")
    return value


@dataclass(frozen=True)
class DeviceInfo:
    profile: str
    gpu: str  # parentUUID
    consumes: tuple[tuple[str, str, int], ...]  # (counter set, counter, amount)
    memory_slices: int


@dataclass
class Node:
    """One node: its Node object, its ResourceSlices, and what its devices and counter sets are."""

    name: str
    body: MutableJSON
    slices: list[MutableJSON]
    devices: dict[str, DeviceInfo] = field(default_factory=dict)
    capacity: dict[tuple[str, str], int] = field(default_factory=dict)
    counter_sets: int = 0

    @classmethod
    def build(cls, name: str, pool: Any) -> Node:
        slices = render_slices(pool, name, generation=1)
        node = cls(name, {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}, slices)
        for body in slices:
            spec = body["spec"]
            if spec["pool"]["name"] != name or spec["driver"] != DRIVER:
                raise SystemExit(f"slice {body['metadata']['name']}: unexpected pool or driver")
            for counter_set in spec.get("sharedCounters") or []:
                node.counter_sets += 1
                for counter, entry in counter_set["counters"].items():
                    node.capacity[(counter_set["name"], counter)] = _amount(entry)
            for device in spec.get("devices") or []:
                consumes = tuple(
                    (use["counterSet"], counter, _amount(entry))
                    for use in device.get("consumesCounters") or []
                    for counter, entry in use["counters"].items()
                )
                attributes = device["attributes"]
                node.devices[device["name"]] = DeviceInfo(
                    profile=attributes["profile"]["string"],
                    gpu=attributes["parentUUID"]["string"],
                    consumes=consumes,
                    memory_slices=sum(1 for _, counter, _ in consumes if counter.startswith("memory-slice-")),
                )
        return node

    @property
    def memory_slices(self) -> int:
        return sum(1 for _, counter in self.capacity if counter.startswith("memory-slice-"))


class Ledger:
    """Devices in use and counters consumed on one node, from its allocated claims."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.in_use: set[str] = set()
        self.used: Counter[tuple[str, str]] = Counter()

    def fits(self, names: Sequence[str]) -> bool:
        """Whether these devices, together, are free and overdraw no counter."""
        if len(set(names)) != len(names) or self.in_use.intersection(names):
            return False
        used = Counter(self.used)
        for name in names:
            for counter_set, counter, amount in self.node.devices[name].consumes:
                used[(counter_set, counter)] += amount
        return all(amount <= self.node.capacity[key] for key, amount in used.items())

    def take(self, names: Sequence[str]) -> None:
        if not self.fits(names):
            raise SystemExit(f"node {self.node.name}: devices {list(names)} are in use or overdraw a counter")
        self.in_use.update(names)
        for name in names:
            for counter_set, counter, amount in self.node.devices[name].consumes:
                self.used[(counter_set, counter)] += amount

    def give_back(self, names: Sequence[str]) -> None:
        self.in_use.difference_update(names)
        for name in names:
            for counter_set, counter, amount in self.node.devices[name].consumes:
                self.used[(counter_set, counter)] -= amount

    @property
    def memory_slices_used(self) -> int:
        return sum(amount for (_, counter), amount in self.used.items() if counter.startswith("memory-slice-"))

    def free(self, profile: str) -> list[str]:
        return [name for name, info in self.node.devices.items() if info.profile == profile and name not in self.in_use]

    def can_fit(self, shape: ClaimShape) -> bool:
        """Whether the claim fits, decided by brute force over the free devices (independent of the
        allocator).  Small enough for the shapes used here: with ``same_gpu`` it tries the
        combinations of one GPU's free devices per request; without, one device per request."""
        groups: list[list[str]] = [list(self.node.devices)]
        if shape.same_gpu:
            by_gpu: dict[str, list[str]] = {}
            for name, info in self.node.devices.items():
                by_gpu.setdefault(info.gpu, []).append(name)
            groups = list(by_gpu.values())
        for group in groups:
            choices = [
                itertools.combinations([name for name in self.free(profile) if name in group], count)
                for _, profile, count in shape.requests
            ]
            for picked in itertools.product(*choices):
                if self.fits([name for names in picked for name in names]):
                    return True
        return False


def check_result(shape: ClaimShape, results: list[MutableJSON] | None, ledger: Ledger) -> list[str] | None:
    """``results`` as ``allocate`` returned them for one claim of ``shape``, checked device by device; the
    devices it allocated (``None`` when it found nothing, which must mean that nothing fits)."""
    fits = ledger.can_fit(shape)
    if results is None:
        if fits:
            raise SystemExit(f"{shape.label} on {ledger.node.name}: allocate found nothing, yet the claim fits")
        return None
    if not fits:
        raise SystemExit(f"{shape.label} on {ledger.node.name}: allocate found a result for a claim that cannot fit")
    if len(results) != 1:
        raise SystemExit(f"{shape.label}: {len(results)} allocation results for one claim")
    entries = results[0]["devices"]["results"]
    names: list[str] = []
    for request, profile, count in shape.requests:
        chosen = [entry for entry in entries if entry["request"] == request]
        if len(chosen) != count:
            raise SystemExit(f"{shape.label}: request {request} got {len(chosen)} devices, not {count}")
        for entry in chosen:
            info = ledger.node.devices.get(entry["device"])
            if entry["driver"] != DRIVER or entry["pool"] != ledger.node.name or info is None:
                raise SystemExit(f"{shape.label}: {entry} is not a device of node {ledger.node.name}")
            if info.profile != profile:
                raise SystemExit(f"{shape.label}: {entry['device']} is {info.profile}, not {profile}")
            names.append(entry["device"])
    if len(entries) != len(names):
        raise SystemExit(f"{shape.label}: results for requests the claim does not have: {entries}")
    if shape.same_gpu and len({ledger.node.devices[name].gpu for name in names}) != 1:
        raise SystemExit(f"{shape.label}: devices {names} are not on one GPU")
    if not ledger.fits(names):
        raise SystemExit(f"{shape.label}: devices {names} are in use or overdraw a counter")
    return names


# -- calling the allocator ------------------------------------------------------------------------


def call(
    claim: ResourceClaimView,
    node: Node,
    slices: list[MutableJSON],
    classes: list[MutableJSON],
    claims: list[ResourceClaimView],
    caching: bool,
    stats: AllocationStats | None = None,
) -> Any:
    return allocate(
        claims=[claim],
        node=node.body,
        slices=slices,
        classes=classes,
        allocated_claims=claims,
        features=DEFAULT_FEATURES,
        rng=None,
        caching=caching,
        stats=stats,
    )


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    """``action``'s result and how long it took, in milliseconds."""
    started = time.perf_counter()
    result = action()
    return (time.perf_counter() - started) * 1000, result


def fill(
    node: Node, classes: list[MutableJSON], percent: int, rng: random.Random
) -> tuple[list[ResourceClaimView], Ledger]:
    """Allocated claims holding ``percent`` % of the node's memory slices, made by the allocator itself.

    Claims of one device each, profiles drawn from ``MIX`` among those that do not overshoot the
    target; a profile that no longer fits is dropped from the draw, and so is one whose claim would
    leave no room for the claims the benchmark means to fit (it is not kept).  Every result is checked.
    """
    keep_room = [shape for shape in SHAPES if EXPECTED_FIT[shape.label]]
    ledger = Ledger(node)
    claims: list[ResourceClaimView] = []
    target = round(node.memory_slices * percent / 100)
    sizes = {info.profile: info.memory_slices for info in node.devices.values()}
    candidates = dict(MIX)
    while ledger.memory_slices_used < target:
        room = target - ledger.memory_slices_used
        fitting = [profile for profile in candidates if sizes[profile] <= room]
        if not fitting:
            break
        profile = rng.choices(fitting, weights=[candidates[p] for p in fitting])[0]
        shape = single(profile)
        claim = shape.claim(f"{node.name}-fill-{len(claims)}")
        results = call(claim, node, node.slices, classes, claims, True)
        names = check_result(shape, results, ledger)
        if names is None:
            del candidates[profile]
            continue
        ledger.take(names)
        if not all(ledger.can_fit(room) for room in keep_room):
            ledger.give_back(names)
            del candidates[profile]
            continue
        claims.append(allocated(claim, results[0]))
    return claims, ledger


# -- part 1: one node -----------------------------------------------------------------------------


@dataclass
class NodeCase:
    """One claim on one node at one fill; every call's result must be ``expected``."""

    percent: int
    shape: ClaimShape
    node: Node
    classes: list[MutableJSON]
    claims: list[ResourceClaimView]
    full: float  # the share of memory slices actually held
    expected: Any = None
    repeat: int = 0  # cached calls per run
    stats: AllocationStats = field(default_factory=AllocationStats)  # of the warm-up call

    @property
    def key(self) -> str:
        return f"{self.percent}:{self.shape.label}"

    def run(self, caching: bool, stats: AllocationStats | None = None) -> tuple[float, Any]:
        claim = self.shape.claim("bench-claim")
        return timed(lambda: call(claim, self.node, self.node.slices, self.classes, self.claims, caching, stats))


def node_cases(node: Node, classes: list[MutableJSON], seed: int, repeat: int, slow_repeat: int) -> list[NodeCase]:
    """The nine cases, each called twice: a warm-up, whose result is checked here and is what every
    later call must return, then a call that sorts the case (over ``SLOW_MS``: ``slow_repeat`` cached
    calls per run, else ``repeat``)."""
    cases = []
    for percent in FILLS:
        claims, ledger = fill(node, classes, percent, random.Random(f"{seed}-{percent}"))
        full = ledger.memory_slices_used / node.memory_slices * 100
        for shape in SHAPES:
            if ledger.can_fit(shape) != EXPECTED_FIT[shape.label]:
                raise SystemExit(f"scenario: at {percent} % full, {shape.label} does not fit as designed")
            case = NodeCase(percent, shape, node, classes, claims, full)
            _, result = case.run(True, case.stats)  # the first call compiles and converts: not timed
            check_result(shape, result, ledger)
            case.expected = result
            elapsed, _ = case.run(True)
            case.repeat = slow_repeat if elapsed > SLOW_MS else repeat
            cases.append(case)
    return cases


def node_run(cases: list[NodeCase], run: int, baseline_repeat: int) -> dict[str, float]:
    """One run: every case, cached ``case.repeat`` and baseline ``baseline_repeat`` times, the two
    alternating call by call (which goes first alternates too); the median of each per case."""
    values: dict[str, float] = {}
    shift = run % len(cases)
    for case in cases[shift:] + cases[:shift]:
        wanted = {"cached": case.repeat, "baseline": baseline_repeat}
        samples: dict[str, list[float]] = {way: [] for way in WAYS}
        gc.collect()
        for index in range(max(wanted.values())):
            for way in WAYS if (run + index) % 2 == 0 else WAYS[::-1]:
                if len(samples[way]) >= wanted[way]:
                    continue
                elapsed, result = case.run(way == "cached")
                if result != case.expected:
                    raise SystemExit(f"{case.key} ({way}): a result different from the first call's")
                samples[way].append(elapsed)
        for way in WAYS:
            values[f"{case.key}:{way}"] = statistics.median(samples[way])
    return values


# -- part 2: a cluster ----------------------------------------------------------------------------


@dataclass
class Pass:
    """One scheduling pass over the pods: per-call times, calls, elapsed time, and placements."""

    calls_ms: list[float] = field(default_factory=list)
    calls_per_pod: list[int] = field(default_factory=list)
    refused_by: list[list[str]] = field(default_factory=list)  # per pod, the nodes that returned None
    elapsed_s: list[float] = field(default_factory=list)  # after each pod
    placements: list[tuple[str, MutableJSON]] = field(default_factory=list)


def schedule(
    nodes: list[Node],
    slices: list[MutableJSON],
    classes: list[MutableJSON],
    pods: list[ResourceClaimView],
    caching: bool,
) -> Pass:
    """Pods one by one, as kube-scheduler would: from a start node that moves on by one per pod, the
    nodes in turn until ``allocate`` finds a place; the result becomes an allocated claim."""
    done = Pass()
    claims: list[ResourceClaimView] = []
    gc.collect()
    started = time.perf_counter()
    for index, pod_claim in enumerate(pods):
        calls = 0
        refused: list[str] = []
        for step in range(len(nodes)):
            node = nodes[(index + step) % len(nodes)]
            before = time.perf_counter()
            results = call(pod_claim, node, slices, classes, claims, caching)
            done.calls_ms.append((time.perf_counter() - before) * 1000)
            calls += 1
            if results is not None:
                claims.append(allocated(pod_claim, results[0]))
                done.placements.append((node.name, results[0]))
                break
            refused.append(node.name)
        else:
            raise SystemExit(f"pod {index} fits on no node")
        done.calls_per_pod.append(calls)
        done.refused_by.append(refused)
        done.elapsed_s.append(time.perf_counter() - started)
    return done


def check_placements(nodes: list[Node], shapes: list[ClaimShape], placed: Pass) -> None:
    """Every placement checked against the slices, in the order made, and every node that refused a
    pod checked to have had no room for it (outside the timings)."""
    ledgers = {node.name: Ledger(node) for node in nodes}
    for shape, refused, (node_name, result) in zip(shapes, placed.refused_by, placed.placements, strict=True):
        for name in refused:
            check_result(shape, None, ledgers[name])
        names = check_result(shape, [result], ledgers[node_name])
        if names is None:
            raise SystemExit("unreachable: a placement without devices")
        ledgers[node_name].take(names)


def cluster_run(
    nodes: list[Node],
    slices: list[MutableJSON],
    classes: list[MutableJSON],
    pods: list[ResourceClaimView],
    baseline_pods: int,
    run: int,
) -> tuple[dict[str, float], Pass, Pass]:
    """One run: the cached pass over every pod and the baseline pass over the first
    ``baseline_pods``, in an order that alternates from run to run."""
    passes: dict[str, Pass] = {}
    for way in WAYS if run % 2 == 0 else WAYS[::-1]:
        chosen = pods if way == "cached" else pods[:baseline_pods]
        passes[way] = schedule(nodes, slices, classes, chosen, way == "cached")
    cached, baseline = passes["cached"], passes["baseline"]
    first_calls = sum(cached.calls_per_pod[:baseline_pods])
    values = {
        "all:pods_per_s": len(pods) / cached.elapsed_s[-1],
        "all:calls_per_pod": len(cached.calls_ms) / len(pods),
        "all:p50": statistics.median(cached.calls_ms),
        "all:p99": percentile(cached.calls_ms, 0.99),
        "first:pods_per_s": baseline_pods / cached.elapsed_s[baseline_pods - 1],
        "first:calls_per_pod": first_calls / baseline_pods,
        "first:p50": statistics.median(cached.calls_ms[:first_calls]),
        "first:p99": percentile(cached.calls_ms[:first_calls], 0.99),
        "baseline:pods_per_s": baseline_pods / baseline.elapsed_s[-1],
        "baseline:calls_per_pod": len(baseline.calls_ms) / baseline_pods,
        "baseline:p50": statistics.median(baseline.calls_ms),
        "baseline:p99": percentile(baseline.calls_ms, 0.99),
    }
    return values, cached, baseline


# -- main -----------------------------------------------------------------------------------------


def collect(into: dict[str, list[float]], values: dict[str, float]) -> None:
    for name, value in values.items():
        into.setdefault(name, []).append(value)


def pod_claims(count: int, seed: int) -> tuple[list[ClaimShape], list[ResourceClaimView]]:
    rng = random.Random(f"{seed}-pods")
    profiles = rng.choices([p for p, _ in MIX], weights=[w for _, w in MIX], k=count)
    shapes = [single(profile) for profile in profiles]
    return shapes, [shape.claim(f"pod-{index}") for index, shape in enumerate(shapes)]


def progress(text: str) -> None:
    print(f"allocator_bench: {text}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--repeat", type=int, default=10, help="cached calls per node case and run (median kept)")
    parser.add_argument(
        "--slow-repeat", type=int, default=3, help=f"cached calls per run for a node case slower than {SLOW_MS:.0f} ms"
    )
    parser.add_argument(
        "--baseline-repeat", type=int, default=1, help="baseline calls per node case and run (median kept)"
    )
    parser.add_argument("--pods", type=int, default=1000, help="pods scheduled per run in the cluster part")
    parser.add_argument("--nodes", type=int, default=100, help="8x H100 nodes in the cluster part")
    parser.add_argument("--baseline-pods", type=int, default=100, help="pods the baseline schedules per run")
    parser.add_argument("--seed", type=int, default=0, help="seeds the profile mix of filling claims and pods")
    parser.add_argument("--smoke", action="store_true", help="1 run, few repeats and pods: check the script works")
    args = parser.parse_args()
    check_runs(parser, args)
    if args.smoke:
        args.runs, args.repeat, args.slow_repeat, args.baseline_repeat = 1, 2, 1, 1
        args.pods, args.baseline_pods = 100, 10
    args.baseline_pods = min(args.baseline_pods, args.pods)

    classes = load_classes()
    if MIG_CLASS not in {body["metadata"]["name"] for body in classes}:
        raise SystemExit(f"no DeviceClass {MIG_CLASS} in {CLASS_DIR}")
    pool = build_pool(example_inventory(MODELS), DeviceModelConfig())
    node = Node.build("bench-node", pool)
    progress(
        f"8x H100 node: {len(node.devices)} devices, {node.counter_sets} counter sets, "
        f"{node.memory_slices} memory slices, {len(node.slices)} ResourceSlices"
    )
    nodes = [Node.build(f"node-{index:03d}", pool) for index in range(args.nodes)]
    cluster_slices = [body for each in nodes for body in each.slices]
    shapes, pods = pod_claims(args.pods, args.seed)
    params = {
        "node": f"8x {MODELS[0]}",
        "devices_per_node": len(node.devices),
        "counter_sets_per_node": node.counter_sets,
        "memory_slices_per_node": node.memory_slices,
        "repeat": args.repeat,
        "slow_repeat": args.slow_repeat,
        "slow_ms": SLOW_MS,
        "baseline_repeat": args.baseline_repeat,
        "pods": args.pods,
        "nodes": args.nodes,
        "baseline_pods": args.baseline_pods,
        "seed": args.seed,
        "mix": dict(MIX),
    }

    report = Report("allocator", args, params)
    with report:
        cases = node_cases(node, classes, args.seed, args.repeat, args.slow_repeat)
        progress(f"node cases ready ({len(cases)}); warming up the cluster pass (not timed)")
        warm = schedule(nodes, cluster_slices, classes, pods, True)
        check_placements(nodes, shapes, warm)
        node_values: dict[str, list[float]] = {}
        cluster_values: dict[str, list[float]] = {}
        for run in range(args.runs):
            collect(node_values, node_run(cases, run, args.baseline_repeat))
            values, cached, baseline = cluster_run(nodes, cluster_slices, classes, pods, args.baseline_pods, run)
            if cached.placements != warm.placements:
                raise SystemExit(f"run {run}: the cached pass placed pods differently from the warm-up")
            if baseline.placements != warm.placements[: args.baseline_pods]:
                raise SystemExit(f"run {run}: the baseline placed pods differently from the cached pass")
            collect(cluster_values, values)
            progress(
                f"run {run + 1}/{args.runs}: 1-device claim on the empty node "
                f"{node_values[f'0:{ONE.label}:cached'][-1]:.2f} ms; "
                f"{values['all:pods_per_s']:.0f} pods/s cached, {values['baseline:pods_per_s']:.1f} pods/s baseline"
            )

    node_table = report.table(
        "node",
        "One claim on one 8x H100 node (200 devices, 8 counter sets), per `allocate` call",
        [
            "node full",
            "claim",
            "result",
            "search steps / CEL evaluations",
            "calls per run: migdra / baseline",
            "migdra (caches)",
            "baseline (no caches)",
            "baseline ÷ migdra",
        ],
    )
    for case in cases:
        with_caches, without = node_values[f"{case.key}:cached"], node_values[f"{case.key}:baseline"]
        node_table.add(
            f"{case.full:.0f} %",
            case.shape.label,
            "allocated" if case.expected is not None else "none",
            f"{case.stats.steps:,} / {case.stats.evaluations:,}",
            f"{case.repeat} / {args.baseline_repeat}",
            summary(with_caches, "ms", 2 if statistics.median(with_caches) < 100 else 0),
            summary(without, "ms", 1 if statistics.median(without) < 100 else 0),
            summary(ratios(without, with_caches), "x", 1),
        )

    cluster_table = report.table(
        "cluster",
        f"{args.pods:,} pods scheduled one by one across {args.nodes} 8x H100 nodes",
        ["pods", "way", "pods/s", "`allocate` calls per pod", "one call: median", "one call: p99"],
    )
    rows = (
        ("all", f"all {args.pods:,}", "migdra (caches)"),
        ("first", f"first {args.baseline_pods:,}", "migdra (caches)"),
        ("baseline", f"first {args.baseline_pods:,}", "baseline (no caches)"),
    )
    for key, pods_text, way in rows:
        cluster_table.add(
            pods_text,
            way,
            summary(cluster_values[f"{key}:pods_per_s"], "", 1),
            summary(cluster_values[f"{key}:calls_per_pod"], "", 2),
            summary(cluster_values[f"{key}:p50"], "ms", 2),
            summary(cluster_values[f"{key}:p99"], "ms", 2),
        )
    cluster_table.add(
        f"first {args.baseline_pods:,}",
        "migdra ÷ baseline",
        summary(ratios(cluster_values["first:pods_per_s"], cluster_values["baseline:pods_per_s"]), "x", 1),
        "",
        "",
        "",
    )
    report.note(
        "The baseline is the same allocate call with caching=False: the same search and result, every CEL "
        "selector compiled and every device activation rebuilt for every evaluation; ratios are per run."
    )
    report.finish()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
