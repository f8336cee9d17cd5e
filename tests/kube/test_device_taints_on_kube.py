"""GPU fault taints honoured by the real kube-scheduler: an XID injected on GPU 1 of the only node
(`migdra sim xid`, from another process) makes the plugin taint every device of that GPU (NoSchedule);
kube-scheduler then places the seven 1g.10gb claims GPU 0 can hold on GPU 0, and an eighth pod stays
Pending with FailedScheduling although GPU 1's memory is free."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from dra_driver.devicemodel.naming import parse_mig_device_name
from dra_driver.kube.client import EVENTS, SLICES
from tests.sim_cluster import BIN, DEMO, SimCluster, versioned_cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.xdist_group("kube-taints")

DRIVER = "gpu.migdra.io"
PODS_ON_GPU_0 = 7
PODS_WAIT = 180.0
"""Eight pods through kube-controller-manager, kube-scheduler and a simulated kubelet on a busy two-core
machine beside the suite's other clusters: the bound the other kube tests give pods (once over 60 s)."""


cluster = versioned_cluster("--nodes", "1", "--gpus", "H100-SXM5-80GB:2")


def published(cluster: SimCluster) -> dict[str, dict[str, Any]]:
    """The node's devices by name, from one complete pool generation (else empty)."""
    slices = cluster.client.list(SLICES, field_selector=f"spec.nodeName=node-1,spec.driver={DRIVER}")[0]
    generations = {s["spec"]["pool"]["generation"] for s in slices}
    if len(generations) != 1 or len(slices) != slices[0]["spec"]["pool"]["resourceSliceCount"]:
        return {}
    return {d["name"]: d for s in slices for d in s["spec"].get("devices", [])}


def gpu_1_tainted(cluster: SimCluster) -> bool:
    devices = published(cluster)
    on_gpu_1 = [d for name, d in devices.items() if name.startswith("gpu-1-")]
    return bool(on_gpu_1) and all(
        any(t["key"] == f"{DRIVER}/xid" and t["effect"] == "NoSchedule" for t in d.get("taints") or [])
        for d in on_gpu_1
    )


def pod(name: str) -> str:
    return (DEMO / "01-mig-1g.yaml").read_text().split("---", 1)[1].replace("name: inference-1g", f"name: {name}")


def test_an_xid_taints_the_gpu_and_kube_scheduler_places_nothing_on_it(cluster: SimCluster) -> None:
    state = cluster.workdir / "nodes" / "node-1" / "nvml-state.json"
    injected = subprocess.run(
        [str(BIN / "migdra"), "sim", "xid", "--state", str(state), "--gpu", "1", "--xid", "79"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert injected.returncode == 0, injected.stderr
    wait_for("every device of GPU 1 to be published with the xid taint", lambda: gpu_1_tainted(cluster))

    namespace = cluster.namespace("taints")
    template = (DEMO / "01-mig-1g.yaml").read_text().split("---", 1)[0]
    names = [f"inference-{n}" for n in range(PODS_ON_GPU_0 + 1)]
    cluster.apply(namespace, template + "---" + "---".join(pod(name) for name in names))

    def seven_running() -> dict[str, dict[str, Any]] | None:
        # Any seven of the eight: kube-scheduler's queue is in creation order, but a pod that met a pool
        # being re-published backs off, and a later one may take its place.
        pods = cluster.pods(namespace)
        running = {n: p for n, p in pods.items() if (p.get("status") or {}).get("phase") == "Running"}
        return running if len(running) == PODS_ON_GPU_0 else None

    running = wait_for(
        "seven of the eight pods to run",
        seven_running,
        timeout=PODS_WAIT,
        detail=lambda: cluster.why_not_running(namespace),
    )
    assert set(running) < set(names)
    (left_out,) = set(names) - set(running)

    def unschedulable() -> list[dict[str, Any]]:
        selector = f"involvedObject.name={left_out},reason=FailedScheduling"
        return cluster.client.list(EVENTS, namespace, field_selector=selector)[0]

    event = wait_for("the eighth pod's FailedScheduling", unschedulable)[0]
    assert "cannot allocate all claims" in event["message"], event["message"]
    devices = [
        result["device"]
        for claim in cluster.claims(namespace)
        for result in ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", [])
    ]
    assert len(devices) == PODS_ON_GPU_0
    assert {(parse_mig_device_name(d) or (-1,))[0] for d in devices} == {0}, devices
    assert cluster.mig_instances() == {"node-1": PODS_ON_GPU_0}

    cluster.describe_running_claims(namespace)

    cluster.delete_all(namespace)
    wait_for("every instance to go", lambda: cluster.mig_instances() == {"node-1": 0})
