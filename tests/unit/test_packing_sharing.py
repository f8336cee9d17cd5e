"""Shares of shared GPU instances in the packing simulation, ``migdra plan`` and the sharing benchmark:
several claims on one shared device while its computeSlices last, counters paid once and never
over-committed beside exclusive devices, the 8th one-slice share of an H100's 7g refused with its
reason, and the benchmark's pods per GPU never above the compute and memory bound."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from dra_driver.cli.plan_command import plan_document
from dra_driver.deviceclasses import DEVICECLASS_DIR, deviceclass_documents
from dra_driver.devicemodel.policy import placement_policy
from dra_driver.resourceclaim import ResourceClaimSpecView
from dra_driver.tools.packing.bench import BOUND, ORACLE, BenchConfig, pods_rows, run_bench
from dra_driver.tools.packing.plan import PlannedClaim, parse_nodes, plan
from dra_driver.tools.packing.simulation import SimNode, run_bound, run_oracle, run_policy
from dra_driver.tools.packing.workloads import (
    KINDS,
    Asked,
    ClaimShape,
    PodKind,
    sharing_workloads,
)
from dra_driver.tools.validation import validate
from tests.sim_objects import claim_view

DRIVER = "gpu.migdra.io"
CLASSES = deviceclass_documents(DEVICECLASS_DIR, DRIVER)
H100 = "H100-SXM5-80GB"
SEVEN_G_SHARED = "gpu-0-shared-7g80gb-0-0"
ONE_H100_SHARING = replace(parse_nodes([f"{H100}=1"]), shared_devices=True)  # sharedDevices: true


def claim(uid: str, kind: ClaimShape) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": uid, "namespace": "t", "uid": uid},
        "spec": kind.spec(DRIVER),
    }


def valid_claim(spec: dict[str, Any]) -> bool:
    """Whether kube-apiserver's validation (the port) admits a ResourceClaim with ``spec``."""
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "p", "namespace": "t"}}
    return not validate("resource.k8s.io", "v1", "ResourceClaim", {**body, "spec": spec}, None, None)


def place(node: SimNode, uid: str, kind: ClaimShape) -> dict[str, Any] | None:
    """Allocate one claim of ``kind`` on ``node`` and record it, as the simulation does; None: no fit."""
    wanted = claim_view(claim(uid, kind))
    allocation = node.try_allocate(wanted, CLASSES, None)
    if allocation is not None:
        node.add(uid, wanted, allocation)
        node.publish(len(node.claims))
    return allocation


def h100_node(policy: str = "dynamic") -> SimNode:
    return SimNode("node-1", [H100], placement_policy(policy), DRIVER, lag=0, shared_devices=True)


def test_the_same_shared_device_takes_shares_until_its_compute_slices_are_used() -> None:
    node = h100_node()
    two = PodKind("two", 2, 8, Asked.SHARED_7G)
    one = PodKind("one", 1, 4, Asked.SHARED_7G)
    share_ids = set()
    for index in range(3):
        allocation = place(node, f"two-{index}", two)
        assert allocation is not None
        (result,) = allocation["devices"]["results"]
        assert result["device"] == SEVEN_G_SHARED
        assert result["consumedCapacity"]["computeSlices"] == "2"
        share_ids.add(result["shareID"])
    assert place(node, "two-3", two) is None  # 6 of 7 compute slices taken: no room for 2 more
    allocation = place(node, "one-0", one)
    assert allocation is not None
    assert allocation["devices"]["results"][0]["device"] == SEVEN_G_SHARED
    share_ids.add(allocation["devices"]["results"][0]["shareID"])
    assert len(share_ids) == 4  # one share each
    assert place(node, "one-1", one) is None
    assert node.used_slices() == 8  # the 7g's memory slices once, not once per share
    assert node.used_compute_slices() == 7
    node.remove("two-1")
    assert node.used_compute_slices() == 5
    assert place(node, "two-again", two) is not None  # the freed share's slices are reused on the same device
    assert node.held["two-again"] == (SEVEN_G_SHARED,)


def test_a_share_is_refused_where_an_exclusive_device_holds_its_counters() -> None:
    node = h100_node()
    assert place(node, "seven", KINDS["7g"]) is not None  # the exclusive 7g.80gb
    assert place(node, "share", PodKind("share", 1, 4, Asked.SHARED)) is None
    fallback = PodKind("either", 1, 4, Asked.SHARED_OR_EXCLUSIVE)
    assert place(node, "either", fallback) is None  # nor any exclusive device: the GPU is taken


def _holders(node: SimNode) -> tuple[Counter[tuple[int, int]], dict[str, int]]:
    """Per (GPU, memory slice) how many distinct held devices cover it; per shared device the compute
    slices its shares consumed."""
    covered: Counter[tuple[int, int]] = Counter()
    for name in node.allocated:
        device = node.by_name[name]
        assert device.placement is not None
        for memory_slice in device.placement.slices():
            covered[(device.gpu_minor, memory_slice)] += 1
    consumed: Counter[str] = Counter()
    for allocated in node.claims.values():
        for result in allocated.results:
            if result.share:
                consumed[result.device] += int(result.consumed_capacity["computeSlices"])
    return covered, dict(consumed)


@pytest.mark.parametrize("policy", ["dynamic", "name-order"])
def test_shares_and_exclusive_claims_never_over_commit_a_gpu(policy: str) -> None:
    """Random arrivals and departures of exclusive claims and shares on two H100: after every step no
    memory slice is held by two devices (an exclusive and a shared device of overlapping placements
    exclude each other through counters) and no shared device gives out more compute slices than it has."""
    kinds: list[ClaimShape] = [
        KINDS["1g"],
        KINDS["2g"],
        KINDS["3g"],
        PodKind("s1", 1, 6, Asked.SHARED),
        PodKind("s2", 2, 12, Asked.SHARED),
        PodKind("e1", 1, 12, Asked.SHARED_OR_EXCLUSIVE),
    ]
    rng = random.Random(7)
    node = SimNode("node-1", [H100, H100], placement_policy(policy), DRIVER, lag=0, shared_devices=True)
    placed = shares = 0
    for step in range(120):
        if node.claims and rng.random() < 0.3:
            node.remove(rng.choice(sorted(node.claims)))
        allocation = place(node, f"c-{step}", rng.choice(kinds))
        if allocation is not None:
            placed += 1
            shares += any(r.get("shareID") for r in allocation["devices"]["results"])
        covered, consumed = _holders(node)
        assert all(count == 1 for count in covered.values()), covered
        for name, used in consumed.items():
            assert used <= node.by_name[name].compute_slices, (name, used)
    assert placed > 40
    assert shares > 10  # shares were really exercised


def test_plan_seven_one_slice_shares_fit_an_h100_the_eighth_does_not() -> None:
    share = PodKind("share", 1, 4, Asked.SHARED_7G)
    spec = share.spec(DRIVER)
    assert valid_claim(spec)
    result = plan(
        ONE_H100_SHARING,
        [PlannedClaim("share", ResourceClaimSpecView.model_validate(spec), 8)],
        CLASSES,
        "dynamic",
        DRIVER,
    )
    assert result.placed["share"] == 7
    assert result.first_failure == ("share", 8)
    assert result.oracle_placed is None  # the oracle does not model shares
    assert "capacity" in result.why
    (use,) = result.shares
    assert (use.device, use.compute_slices, use.used) == (SEVEN_G_SHARED, 7, 7)
    assert [name for name, _ in use.shares] == [f"share-{n}" for n in range(1, 8)]
    document = plan_document(result)
    assert document["claims"]["share"] == {"requested": 8, "placed": 7, "oraclePlaced": None}
    assert document["firstFailure"]["verdict"] == "unknown"
    assert document["sharedDevices"][0]["usedComputeSlices"] == 7
    assert len(document["sharedDevices"][0]["shares"]) == 7


def test_plan_exclusive_claims_keep_the_oracle_and_take_the_gpu_from_shares() -> None:
    """An exclusive 4g first: shares of the 7g no longer fit (counters); shares of a smaller shared GPU
    instance in the other half of the GPU do -- the 2g.20gb at slices 4-5, the smallest shared device
    that fits (slices 6-7 hold only 1g instances, which have none); the oracle is off as soon as a claim
    may be a share."""
    nodes = ONE_H100_SHARING
    four = PlannedClaim("four", ResourceClaimSpecView.model_validate(KINDS["4g"].spec(DRIVER)), 1)
    alone = plan(nodes, [four], CLASSES, "dynamic", DRIVER)
    assert alone.oracle_placed == {"four": 1}
    whole = PlannedClaim(
        "whole", ResourceClaimSpecView.model_validate(PodKind("whole", 1, 4, Asked.SHARED_7G).spec(DRIVER)), 1
    )
    blocked = plan(nodes, [four, whole], CLASSES, "dynamic", DRIVER)
    assert blocked.placed == Counter({"four": 1})
    assert blocked.first_failure == ("whole", 1)
    assert "counters" in blocked.why
    small = PlannedClaim(
        "small", ResourceClaimSpecView.model_validate(PodKind("small", 1, 4, Asked.SHARED).spec(DRIVER)), 4
    )
    mixed = plan(nodes, [four, small], CLASSES, "dynamic", DRIVER)
    assert mixed.placed == Counter({"four": 1, "small": 2})
    assert mixed.first_failure == ("small", 3)
    (use,) = mixed.shares
    assert (use.device, use.used) == ("gpu-0-shared-2g20gb-14-4", 2)
    assert mixed.oracle_placed is None


def test_pod_kinds_are_valid_claims_each_way() -> None:
    for asked in Asked:
        spec = PodKind("p", 2, 18, asked).spec(DRIVER)
        assert valid_claim(spec), asked
    either = PodKind("p", 2, 18, Asked.SHARED_OR_EXCLUSIVE).spec(DRIVER)["devices"]["requests"][0]
    assert [sub["deviceClassName"] for sub in either["firstAvailable"]] == ["mig-shared.migdra.io", "mig.migdra.io"]
    assert either["firstAvailable"][0]["capacity"] == {"requests": {"computeSlices": "2"}}
    with pytest.raises(ValueError, match="exclusive devices only"):
        PodKind("p", 1, 4, Asked.SHARED).expression(DRIVER)


def test_no_placement_exceeds_the_bound_and_the_exclusive_oracle_is_under_it() -> None:
    for workload in sharing_workloads():
        pods = {name: kind for name, kind in workload.kinds.items() if isinstance(kind, PodKind)}
        trace = workload.trace(3, 100, 1.0)
        bound = run_bound(trace, workload.cluster, pods)
        outcome = run_policy(trace, workload.cluster, "dynamic", CLASSES, kinds=workload.kinds)
        assert 0 < outcome.allocations <= bound.allocations
        assert outcome.pods_per_gpu == outcome.allocations / 8
        assert 0 < outcome.compute_use <= 1
        if workload.oracle_models_it:
            oracle = run_oracle(trace, workload.cluster, kinds=workload.kinds)
            assert outcome.allocations <= oracle.allocations <= bound.allocations


def test_the_sharing_benchmark_reports_pods_per_gpu() -> None:
    names = ("fill-pods-memory-exclusive@1x8-H100", "fill-pods-memory-shared-or-exclusive@1x8-H100")
    config = BenchConfig(seeds=2, arrivals=80, workloads=names, policies=("dynamic",), orders=("1.36",), jobs=1)
    report = run_bench(config, CLASSES)
    exclusive, shared = (report["workloads"][name] for name in names)
    assert set(exclusive) == {BOUND, ORACLE, "dynamic"}
    assert set(shared) == {BOUND, "dynamic"}  # no oracle for shares
    for runs in (exclusive, shared):
        for run in runs.values():
            low, high = run["pods_per_gpu_range"]
            assert 0 < low <= run["pods_per_gpu_median"] <= high <= 7  # at most 7 compute instances per H100
            assert run["of_bound"] <= 1
        assert runs[BOUND]["of_bound"] == 1
    pods = report["params"]["workloads"][names[1]]["pods"]
    assert pods["1c-12g"] == {"computeSlices": 1, "memoryGiB": 12, "asked": "shared-or-exclusive", "weight": 0.25}
    rows = pods_rows(report)
    assert [row[0] for row in rows] == list(names)
    assert rows[1][2] == "-"  # the oracle column of the shared workload
