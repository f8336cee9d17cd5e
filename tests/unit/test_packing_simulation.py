"""The packing benchmark's harness: traces, the simulated publish (with its lag), invariants against
the oracle (the whole benchmark's short run is tests/integration/test_plan_cli.py's)."""

from __future__ import annotations

import pytest

from dra_driver.deviceclasses import DEVICECLASS_DIR, deviceclass_documents
from dra_driver.devicemodel.policy import DynamicPlacementPolicy, placement_policy
from dra_driver.tools.packing.bench import COMPARED_POLICIES, mean_ci
from dra_driver.tools.packing.simulation import SHUFFLED, SORTED, Cluster, SimNode, run_oracle, run_policy
from dra_driver.tools.packing.workloads import CLUSTERS, KINDS, MIXES, fill_trace, poisson_trace
from tests.sim_objects import claim_view

CLASSES = deviceclass_documents(DEVICECLASS_DIR, "gpu.migdra.io")
H100 = CLUSTERS["1x8-H100"]


def test_traces_are_reproducible_and_differ_by_seed() -> None:
    one = poisson_trace(MIXES["uniform"], H100, seed=3, arrivals=50)
    assert one == poisson_trace(MIXES["uniform"], H100, seed=3, arrivals=50)
    assert one != poisson_trace(MIXES["uniform"], H100, seed=4, arrivals=50)
    assert len(one.arrivals) == 50
    assert one.warmup == 12
    assert all(a.time <= b.time for a, b in zip(one.arrivals, one.arrivals[1:], strict=False))
    bursty = poisson_trace(MIXES["bursty"], H100, seed=3, arrivals=200)
    same_time = sum(a.time == b.time for a, b in zip(bursty.arrivals, bursty.arrivals[1:], strict=False))
    assert same_time > 100  # bursts of 6 on average arrive together


def test_a_republish_becomes_visible_only_after_the_lag() -> None:
    node = SimNode("node-1", ["H100-SXM5-80GB"], placement_policy("dynamic"), "gpu.migdra.io", lag=2)
    before = node.visible
    claim = claim_view({"metadata": {"name": "c", "namespace": "t", "uid": "c"}, "spec": KINDS["3g"].spec()})
    allocation = node.try_allocate(claim, CLASSES, None)
    assert allocation is not None
    node.add("c", claim, allocation)
    node.publish(1)
    assert node.republishes == 1
    assert node.slice_writes == len(before)
    node.advance(2)
    assert node.visible is before  # published at allocation 1, visible from allocation 3
    node.advance(3)
    assert node.visible is not before
    assert {s["spec"]["pool"]["generation"] for s in node.visible} == {2}


@pytest.mark.parametrize("policy", COMPARED_POLICIES)
def test_no_policy_fills_beyond_the_oracle(policy: str) -> None:
    """Fill until the first reject: the oracle rejects a prefix's next claim only when no packing of the
    prefix fits it, so a policy, which places that same prefix first, cannot get further."""
    for seed in (1, 2):
        trace = fill_trace(MIXES["uniform"], H100, seed, arrivals=60)
        oracle = run_oracle(trace, H100)
        for order in (SORTED, SHUFFLED):
            outcome = run_policy(trace, H100, policy, CLASSES, order=order, seed=seed)
            assert outcome.allocations <= oracle.allocations
            assert outcome.utilisation <= oracle.utilisation + 1e-9


def test_confidence_interval() -> None:
    mean, low, high = mean_ci([0.5, 0.7])
    assert mean == pytest.approx(0.6)
    assert (low, high) == pytest.approx((0.6 - 12.706 * 0.1, 0.6 + 12.706 * 0.1), rel=1e-3)
    assert mean_ci([0.4]) == (0.4, 0.4, 0.4)


@pytest.mark.parametrize(("order", "interleaved"), [(SORTED, True), (SHUFFLED, False)])
def test_the_simulated_nodes_publish_as_the_plugin_does_for_that_allocator_order(order: str, interleaved: bool) -> None:
    """On 1.35 (slices shuffled) the node plugin publishes ``dynamic`` without interleaving
    (kubeletplugin/control_plane_version.py); the benchmark's 1.35 column must measure that."""
    cluster = Cluster(H100, "dynamic", order=order)
    policy = cluster.nodes[0].policy
    assert isinstance(policy, DynamicPlacementPolicy)
    assert policy.interleave is interleaved
