"""Realize before bind on `migdra sim up --realize-before-bind`: real plugin processes, kube-scheduler's
DynamicResources plugin waiting for migdra's binding condition (and, on ``realization-failed``,
unreserving the claim and placing the pod again, on another device), the simulated kubelet.

One cluster of two nodes serves both tests.  node-1's plugin fails its first GPU-instance creation
(a simulator fault plan passed with `--plugin-env`), node-2's creates slowly (a simulated latency), so
that the wait for the binding condition is long enough to be seen.  Every wait polls observable state
(the API, the NVML state files) with a bounded deadline.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from dra_driver.devicemodel.naming import parse_mig_device_name
from dra_driver.kube.client import CLAIMS, EVENTS, PODS
from dra_driver.nvml.session import open_nvml
from dra_driver.nvml.settings import build_nvml_settings
from tests.sim_cluster import DEMO, SimCluster, versioned_cluster
from tests.waiting import WAIT, wait_for

DRIVER = "gpu.migdra.io"
REALIZED = f"{DRIVER}/realized"
FAILED = f"{DRIVER}/realization-failed"
FAIL_FIRST_CREATION = {
    "rules": [
        {"symbol": "nvmlDeviceCreateGpuInstanceWithPlacement", "nth": 1, "count": 1, "error": "InsufficientResources"}
    ]
}
# 3 s: long enough for a poller on a loaded machine to see the pod waiting for its binding condition.
SLOW_CREATION = {"latency": {"nvmlDeviceCreateGpuInstanceWithPlacement": 3.0}}

pytestmark = pytest.mark.xdist_group("e2e-realize-before-bind")


cluster = versioned_cluster(
    "--nodes",
    "2",
    "--gpus",
    "H100-SXM5-80GB:1",
    "--realize-before-bind",
    "--plugin-env",
    f"node-1:MIGDRA_SIM_FAULTS={json.dumps(FAIL_FIRST_CREATION)}",
    "--plugin-env",
    f"node-2:MIGDRA_SIM_FAULTS={json.dumps(SLOW_CREATION)}",
)


def pinned_pod(node: str) -> str:
    """demo/01-mig-1g.yaml (a template and one pod asking for a 1g.10gb), the pod pinned to ``node``."""
    pinned = f"spec:\n  nodeSelector:\n    kubernetes.io/hostname: {node}\n  containers:"
    return (DEMO / "01-mig-1g.yaml").read_text().replace("spec:\n  containers:", pinned)


def the_claim(cluster: SimCluster, namespace: str) -> dict[str, Any] | None:
    claims = cluster.claims(namespace)
    return claims[0] if len(claims) == 1 else None


def allocated_device(claim: dict[str, Any] | None) -> str | None:
    results = ((claim or {}).get("status", {}).get("allocation") or {}).get("devices", {}).get("results") or []
    return results[0]["device"] if results else None


def condition(claim: dict[str, Any], condition_type: str) -> dict[str, Any] | None:
    for entry in claim.get("status", {}).get("devices") or []:
        for found in entry.get("conditions") or []:
            if found.get("type") == condition_type and found.get("status") == "True":
                return found
    return None


def instances(cluster: SimCluster, node: str) -> list[tuple[int, int, int, list[str]]]:
    """(GPU minor, GI profile ID, placement start, [MIG UUIDs]) of every GI on ``node``."""
    state = cluster.workdir / "nodes" / node / "nvml-state.json"
    found = []
    with open_nvml(build_nvml_settings(nvml="simulated", sim_state=state)) as nvml:
        for gpu in nvml.list_gpus():
            for gi in nvml.gpu_instances(gpu.uuid):
                uuids = [ci.mig_uuid for ci in nvml.compute_instances(gpu.uuid, gi.gpu_instance_id)]
                found.append((gpu.minor_number, gi.profile_id, gi.placement.start, uuids))
    return found


def test_a_failed_realization_sends_the_pod_to_another_placement_and_leaves_no_instance(
    cluster: SimCluster,
) -> None:
    namespace = cluster.namespace("realize-fails")
    cluster.apply(namespace, pinned_pod("node-1"))

    def failed_binding() -> list[dict[str, Any]]:
        selector = "involvedObject.name=inference-1g,reason=FailedScheduling"
        events = cluster.client.list(EVENTS, namespace, field_selector=selector)[0]
        return [e for e in events if "device binding failed" in e.get("message", "")]

    event = wait_for("the binding on node-1 to fail on realization-failed", failed_binding)[0]
    # kube-scheduler's words with the plugin's condition: reason RealizationFailed, the plugin's message
    assert "reason=RealizationFailed" in event["message"], event["message"]
    failed = re.search(r"device (gpu-[\w-]+): ", event["message"])
    assert failed is not None, event["message"]
    failed_device = failed.group(1)
    assert "NVML_ERROR_INSUFFICIENT_RESOURCES" in event["message"] or "nsufficient" in event["message"]

    # Re-placing takes the scheduler's retry, a second allocation, a realization and kubelet's prepare:
    # with both CPUs busy beside the suite that chain once took over 60 s, so it gets longer (bounded).
    pod = wait_for(
        "the pod to run on another placement", lambda: cluster.running(namespace, {"inference-1g"}), timeout=3 * WAIT
    )["inference-1g"]
    assert pod["spec"]["nodeName"] == "node-1"
    claim = cluster.claims(namespace)[0]
    placed = allocated_device(claim)
    assert placed is not None
    assert placed != failed_device, "the scheduler avoided the device whose realization failed"
    assert condition(claim, REALIZED) is not None
    assert condition(claim, FAILED) is None
    minor, profile_id, start = parse_mig_device_name(placed) or (-1, -1, -1)
    on_node = instances(cluster, "node-1")
    assert [(m, p, s) for m, p, s, _ in on_node] == [(minor, profile_id, start)], "no instance left behind"
    assert instances(cluster, "node-2") == []

    cluster.describe_running_claims(namespace)

    cluster.delete_all(namespace)
    wait_for("the instance to go with the pod", lambda: instances(cluster, "node-1") == [])


def test_the_pod_binds_only_once_realized_and_kubelet_creates_nothing_new(cluster: SimCluster) -> None:
    namespace = cluster.namespace("realize-ok")
    cluster.apply(namespace, pinned_pod("node-2"))
    waited = False
    realized_uuids: list[str] | None = None

    def running() -> bool:  # every look at a bound pod must find its claim realized already
        nonlocal waited, realized_uuids
        pod = cluster.client.get(PODS, namespace, "inference-1g") or {}
        claim = the_claim(cluster, namespace)  # read after the pod: realized is written before the bind
        if claim is not None and allocated_device(claim) is not None:
            realized = condition(claim, REALIZED) is not None
            if pod.get("spec", {}).get("nodeName"):
                assert realized, "bound before its device was realized"
            elif not realized:
                waited = True  # allocated, not realized, not bound: the scheduler waits for the condition
            if realized and realized_uuids is None:
                realized_uuids = [u for *_, uuids in instances(cluster, "node-2") for u in uuids]
        return bool(pod.get("status", {}).get("phase") == "Running")

    wait_for("the pod to run", running)
    assert waited, "the pod was never seen waiting for its binding condition"
    pod = wait_for("the pod to run", lambda: cluster.running(namespace, {"inference-1g"}))["inference-1g"]
    assert pod["spec"]["nodeName"] == "node-2"
    claim = cluster.client.get(CLAIMS, namespace, cluster.claims(namespace)[0]["metadata"]["name"])
    assert claim is not None
    on_node = instances(cluster, "node-2")
    assert len(on_node) == 1, "kubelet's prepare created nothing new"
    assert realized_uuids is not None
    assert on_node[0][3] == realized_uuids, "the same MIG device as realized"
    identity = wait_for(
        "the claim's MIG identity",
        lambda: next(
            (
                e.get("data")
                for e in (cluster.claims(namespace)[0].get("status", {}).get("devices") or [])
                if e.get("data")
            ),
            None,
        ),
    )
    assert [identity["migUUID"]] == realized_uuids
    cdi = json.loads(pod["metadata"]["annotations"]["sim.migdra.io/cdi-devices"])
    assert cdi
    assert all(cdi.values())

    cluster.describe_running_claims(namespace)

    cluster.delete_all(namespace)
    wait_for("the instance to go with the pod", lambda: instances(cluster, "node-2") == [])
