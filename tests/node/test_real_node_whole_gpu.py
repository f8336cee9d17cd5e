"""A real node whose GPUs have MIG mode off: a whole GPU reaches the container through CDI, an XID on it
reaches the pod's status through the kubelet's resource health (``allocatedResourcesStatus``), and after
``kill -9`` of ``sim up``, ``sim down`` leaves the host as it found it.

The tests run in order on one cluster; the last one kills it.
"""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from dra_driver.kube.client import CLAIMS, PODS
from tests.node.real_node import (
    HOST_BEFORE,
    REAL,
    char_devices,
    claim_entries,
    container_report,
    host_state,
    pod_manifest,
    real_cluster,
    report_env,
    wait_pods_running,
)
from tests.sim_cluster import BIN, SimCluster, sim_down
from tests.waiting import wait_for

pytestmark = pytest.mark.xdist_group("real-node")

NAMESPACE = "whole"
NVIDIA_MAJOR = 195

CLAIM = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: gpu}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.migdra.io}
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimCluster]:
    with real_cluster(
        "--nodes", "1", "--gpus", "H100-SXM5-80GB:2", "--plugin-env", f"{REAL}:MIGDRA_SIM_MIG_ENABLED=false"
    ) as sim:
        yield sim


def test_a_whole_gpu_reaches_the_container_as_its_own_device_node_only(cluster: SimCluster) -> None:
    cluster.namespace(NAMESPACE)
    cluster.apply(NAMESPACE, CLAIM + pod_manifest("whole", "gpu"))
    wait_pods_running(cluster, NAMESPACE, {"whole"})
    report = container_report(cluster, "whole")
    (entry,) = claim_entries(cluster, NAMESPACE, "gpu")
    described = cluster.describe_claim(NAMESPACE, "gpu")
    assert "Mig UUID" not in described
    minor = int(entry["device"].split("-")[1])
    nodes = char_devices(report)
    assert nodes[f"nvidia{minor}"] == (NVIDIA_MAJOR, minor)
    assert [name for name in nodes if re.fullmatch(r"nvidia\d+", name)] == [f"nvidia{minor}"]  # not the other GPU
    assert not [name for name in nodes if name.startswith("nvidia-cap")]
    env = report_env(report)
    assert env["MIGDRA_GPU_UUID"] == entry["data"]["gpuUUID"]
    assert "MIGDRA_MIG_UUID" not in env
    assert entry["device"] in report  # the KEP-5304 metadata file


def test_an_xid_on_the_gpu_shows_in_the_pods_status_through_the_kubelets_resource_health(
    cluster: SimCluster,
) -> None:
    (entry,) = claim_entries(cluster, NAMESPACE, "gpu")
    state = cluster.workdir / "nodes" / REAL / "nvml-state.json"
    injected = subprocess.run(
        [str(BIN / "migdra"), "sim", "xid", "--state", str(state), "--gpu", entry["data"]["gpuUUID"], "--xid", "79"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert injected.returncode == 0, injected.stderr

    def unhealthy() -> list[dict[str, Any]] | None:
        pod = cluster.client.get(PODS, NAMESPACE, "whole") or {}
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        found = [
            resource
            for status in statuses
            for claim in status.get("allocatedResourcesStatus") or []
            for resource in claim.get("resources") or []
            if resource.get("health") == "Unhealthy"
        ]
        return found or None

    (resource,) = wait_for("the pod's status to show its GPU unhealthy", unhealthy, timeout=120)
    claim_uid = (cluster.client.get(CLAIMS, NAMESPACE, "gpu") or {})["metadata"]["uid"]
    assert (
        resource["resourceID"] == f"gpu.migdra.io/claim={claim_uid}-{entry['device']}"
    )  # the kubelet names its CDI ID


def test_sim_down_after_kill_9_of_sim_up_leaves_the_host_as_it_found_it(cluster: SimCluster) -> None:
    root = cluster.workdir.parent
    before = HOST_BEFORE[cluster.workdir]
    assert host_state(root) != before, "a running real node changes the host (else this test proves nothing)"
    cluster.client.close()
    cluster.process.send_signal(signal.SIGKILL)
    cluster.process.wait(timeout=30)
    down = sim_down(cluster.workdir)
    assert down.returncode == 0, down.stderr
    assert "restored the host" in down.stderr
    assert host_state(root) == before
    leftover = subprocess.run(["pgrep", "-f", str(cluster.workdir)], capture_output=True, text=True, check=False)
    assert leftover.stdout.strip() == "", leftover.stdout
