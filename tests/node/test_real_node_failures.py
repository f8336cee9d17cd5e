"""A prepare that fails on a real node: the first two GPU instance creations of the node's plugin fail
(a simulator fault plan); the kubelet reports the failure in the pod's events and status as it reports
any prepare failure (a Warning, the pod Pending in ContainerCreating), retries on its own, and the pod
runs once the fault is over -- with exactly one GPU instance, nothing left of the failed attempts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from dra_driver.kube.client import PODS
from tests.node.real_node import (
    REAL,
    claim_entries,
    gi_placements,
    mig_claim,
    pod_events,
    pod_manifest,
    real_cluster,
    wait_pods_running,
)
from tests.sim_cluster import SimCluster
from tests.waiting import wait_for

pytestmark = pytest.mark.xdist_group("real-node")

NAMESPACE = "failing"
FAULTS = {"rules": [{"symbol": "nvmlDeviceCreateGpuInstanceWithPlacement", "nth": 1, "count": 2, "error": "Unknown"}]}


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimCluster]:
    plan = json.dumps(FAULTS)
    with real_cluster(
        "--nodes", "1", "--gpus", "H100-SXM5-80GB:1", "--plugin-env", f"{REAL}:MIGDRA_SIM_FAULTS={plan}"
    ) as sim:
        yield sim


def test_a_failed_prepare_shows_in_the_pods_events_and_the_pod_runs_once_the_fault_is_over(
    cluster: SimCluster,
) -> None:
    cluster.namespace(NAMESPACE)
    cluster.apply(NAMESPACE, mig_claim("mig") + pod_manifest("unlucky", "mig"))

    def failures() -> list[dict[str, Any]] | None:
        events = pod_events(cluster, NAMESPACE, "unlucky")
        found = [e for e in events if e["reason"] == "FailedPrepareDynamicResources"]
        return found or None

    (event,) = wait_for("the kubelet's event of the failed prepare", failures, timeout=120)

    def reported() -> dict[str, Any] | None:
        """The pod's status once the kubelet has reported its sync of the pod (its sandbox condition): the
        kubelet writes the status after the Event, so a busy machine may show the Event first."""
        status = (cluster.client.get(PODS, NAMESPACE, "unlucky") or {}).get("status") or {}
        known = {c.get("type") for c in status.get("conditions") or []}
        return status if "PodReadyToStartContainers" in known else None

    # The pod's status as the kubelet reports a prepare it retries (seconds apart, so still failing here).
    status = wait_for("the kubelet's status of the pod whose prepare failed", reported, timeout=60)
    assert status["phase"] == "Pending"
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["PodReadyToStartContainers"] == "False"
    (container,) = status["containerStatuses"]
    assert container["state"]["waiting"]["reason"] == "ContainerCreating"
    assert event["type"] == "Warning"
    assert event["source"]["component"] == "kubelet"
    assert "mig" in event["message"]
    assert "Unknown" in event["message"] or "unknown" in event["message"], event["message"]
    wait_pods_running(cluster, NAMESPACE, {"unlucky"})
    (entry,) = claim_entries(cluster, NAMESPACE, "mig")
    cluster.describe_claim(NAMESPACE, "mig")
    assert [gi[4] for gi in gi_placements(cluster)] == [entry["data"]["migUUID"]]
    repeated = failures()
    assert repeated is not None
    assert sum(e.get("count", 1) for e in repeated) >= 1
