"""A real node: the upstream kubelet and containerd (CDI) with runc run pods on devices that
``migdra kubelet-plugin`` prepared on simulated GPUs, beside a simulated node.

One cluster for the module (node-1 real, node-2 simulated), its tests in order: the kubelet registers the
plugin; three pods (a MIG device with the claim's configuration, two MIG devices of one GPU in one claim, a
share of a GPU instance) run, and each container sees its devices through the CDI edits the
runtime applied; the kubelet, the plugin and containerd restart under the running pods without creating,
losing or destroying an instance; deleting the pods unprepares everything; the host is left as it was.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_driver.kube.client import NODES, SLICES
from dra_driver.nvml.sim import DEFAULT_DRIVER_VERSION as DRIVER_VERSION
from migdra_devcluster.supervision import process_alive
from tests.node.real_node import (
    REAL,
    char_devices,
    claim_entries,
    container_id,
    container_report,
    gi_placements,
    kubelet_log,
    mig_claim,
    node_dir,
    plugin_log,
    pod_manifest,
    real_cluster,
    report_env,
    wait_pods_running,
)
from tests.sim_cluster import BIN, SimCluster
from tests.waiting import wait_for

pytestmark = pytest.mark.xdist_group("real-node")

NAMESPACE = "real"
GPUS = "H100-SXM5-80GB:3"
NVIDIA_MAJOR, NVIDIACTL_MINOR, CAPS_MAJOR = 195, 255, 509
PODS = ("mig", "pair", "share")

MANIFEST = (
    mig_claim("mig", {"HELLO": "from-the-claim"})
    + """
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: pair}}
spec:
  devices:
    requests:
    - name: a
      exactly:
        deviceClassName: mig.migdra.io
        selectors:
        - cel: {{expression: "device.attributes['gpu.migdra.io'].profile == '1g.10gb'"}}
    - name: b
      exactly:
        deviceClassName: mig.migdra.io
        selectors:
        - cel: {{expression: "device.attributes['gpu.migdra.io'].profile == '1g.10gb'"}}
    constraints:
    - requests: [a, b]
      matchAttribute: gpu.migdra.io/parentUUID
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: share}}
spec:
  devices:
    requests:
    - name: share
      exactly:
        deviceClassName: mig-shared.migdra.io
        selectors:
        - cel: {{expression: "device.attributes['gpu.migdra.io'].profile == '2g.20gb'"}}
        capacity:
          requests: {{computeSlices: "1"}}
{pods}
"""
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimCluster]:
    with real_cluster("--nodes", "2", "--gpus", GPUS, "--shared-devices") as sim:
        yield sim


def wait_running(sim: SimCluster, names: set[str]) -> dict[str, dict[str, Any]]:
    return wait_pods_running(sim, NAMESPACE, names)


def test_the_kubelet_registers_the_node_and_the_plugin_offering_both_dra_service_versions(cluster: SimCluster) -> None:
    node = cluster.client.get(NODES, None, REAL)
    assert node is not None
    assert node["status"]["nodeInfo"]["kubeletVersion"] == cluster.version
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://2.")
    # Ready means published; the kubelet's plugin watcher finds the registration socket on its own time.
    wait_for(
        "the kubelet to register the plugin",
        lambda: "registered with kubelet" in plugin_log(cluster),
        detail=lambda: plugin_log(cluster)[-3000:],
    )
    plugin = plugin_log(cluster)
    asked = re.search(r"kubelet asked for plugin info: gpu\.migdra\.io at (\S+), versions (.*)$", plugin, re.MULTILINE)
    assert asked is not None, plugin[-3000:]
    assert asked[1] == str(node_dir(cluster) / "kubelet/root/plugins/gpu.migdra.io/dra.sock")
    assert asked[2].split(", ") == ["v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth"]
    assert "driver gpu.migdra.io registered with kubelet" in plugin
    kubelet = kubelet_log(cluster)
    assert "connected=true" in kubelet
    assert "Successfully started WatchResources health stream" in kubelet  # served by default
    assert "Unimplemented" not in kubelet, "the kubelet asked the plugin for something it does not serve"
    own = [s for s in cluster.client.list(SLICES)[0] if s["spec"].get("nodeName") == REAL]
    assert own, "the plugin's slices of the real node"


def test_each_container_sees_its_devices_through_the_cdi_edits_of_the_runtime(cluster: SimCluster) -> None:
    cluster.namespace(NAMESPACE)
    cluster.apply(NAMESPACE, MANIFEST.format(pods="".join(pod_manifest(name, name) for name in PODS)))
    wait_running(cluster, set(PODS))
    reports = {name: container_report(cluster, name) for name in PODS}

    # A MIG device: its MIG UUID and the claim's configuration in the environment, the parent GPU's node
    # and the capability nodes of its GPU instance and compute instance, the control nodes.
    (mig,) = claim_entries(cluster, NAMESPACE, "mig")
    cluster.describe_claim(NAMESPACE, "mig")
    env = report_env(reports["mig"])
    assert env["HELLO"] == "from-the-claim"
    assert env["MIGDRA_MIG_UUID"] == mig["data"]["migUUID"]
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    nodes = char_devices(reports["mig"])
    gpu_minor = int(mig["device"].split("-")[1])
    assert nodes[f"nvidia{gpu_minor}"] == (NVIDIA_MAJOR, gpu_minor)
    assert nodes["nvidiactl"] == (NVIDIA_MAJOR, NVIDIACTL_MINOR)
    caps = {name: numbers for name, numbers in nodes.items() if name.startswith("nvidia-cap")}
    assert len(caps) == 2, caps  # the GPU instance's and the compute instance's
    assert all(numbers == (CAPS_MAJOR, int(name.removeprefix("nvidia-cap"))) for name, numbers in caps.items())
    assert mig["device"] in reports["mig"]  # the KEP-5304 metadata file names the device
    # What a user runs: kube-apiserver reaches the kubelet at the node's address for logs and exec.
    assert cluster.kubectl("logs", "-n", NAMESPACE, "mig").stdout == reports["mig"]

    # The kubelet finds the container for exec in its runtime cache, which may be a moment behind the
    # container's start on a busy machine ("container not found"): a user would run it again, so does this.
    def exec_caps() -> list[str] | None:
        done = cluster.kubectl("exec", "-n", NAMESPACE, "mig", "--", "ls", "/dev/nvidia-caps", check=False)
        return done.stdout.split() if done.returncode == 0 else None

    caps_seen = wait_for("kubectl exec to reach the container", exec_caps)
    assert sorted(caps_seen) == sorted(caps)

    # Two MIG devices of one GPU in one claim: both MIG UUIDs, one parent GPU, four capability nodes.
    pair = claim_entries(cluster, NAMESPACE, "pair")
    assert len(pair) == 2
    assert len({e["data"]["gpuUUID"] for e in pair}) == 1
    pair_env = report_env(reports["pair"])
    assert sorted(pair_env["MIGDRA_MIG_UUIDS"].split(",")) == sorted(e["data"]["migUUID"] for e in pair)
    assert len([n for n in char_devices(reports["pair"]) if n.startswith("nvidia-cap")]) == 4

    # A share of a GPU instance: its own compute instance's MIG UUID.
    (share,) = claim_entries(cluster, NAMESPACE, "share")
    assert report_env(reports["share"])["MIGDRA_MIG_UUID"] == share["data"]["migUUID"]

    # The driver's files of the node's driver root, mounted read-only, and what its hooks made.
    for name, report in reports.items():
        driver = report.split("== driver\n", 1)[1]
        assert f"libcuda.so.{DRIVER_VERSION}" in driver, name
        assert re.search(rf"libcuda\.so\.1 -> libcuda\.so\.{re.escape(DRIVER_VERSION)}$", driver, re.MULTILINE), name
        assert f"libcuda {DRIVER_VERSION}" in driver, name  # read through the hook's soname link
        assert "/usr/lib/x86_64-linux-gnu\n" in driver, name  # update-ldcache's folder
        assert "nvidia-smi" in driver, name
    assert len(gi_placements(cluster)) == 4  # mig, pair (2) and the share's GPU instance
    calls = re.findall(r"kubelet called (\S+)/NodePrepareResources", plugin_log(cluster))
    assert len(calls) >= len(PODS)
    assert set(calls) == {"v1.DRAPlugin"}  # the first version offered that the kubelet knows


def test_restarting_the_kubelet_keeps_the_pods_and_prepares_nothing_twice(cluster: SimCluster) -> None:
    running = ensure_pods_running(cluster)
    instances = gi_placements(cluster)
    containers = {name: container_id(cluster, name) for name in running}
    log_before = plugin_log(cluster)
    restart_process(cluster, node_dir(cluster) / "kubelet.pid", "the kubelet")
    wait_for("the kubelet to report the node Ready again", lambda: node_ready(cluster), timeout=120)
    # The kubelet wipes its node's slices when it starts; the plugin publishes them again.
    wait_for(
        "the real node's slices to be published again",
        lambda: [s for s in cluster.client.list(SLICES)[0] if s["spec"].get("nodeName") == REAL],
        timeout=120,
    )
    wait_running(cluster, set(PODS))
    assert {name: container_id(cluster, name) for name in running} == containers  # the same containers
    assert gi_placements(cluster) == instances
    # The kubelet's own checkpoint says the claims are prepared: it asks the plugin for nothing again.
    assert "kubelet called" not in plugin_log(cluster)[len(log_before) :]


def test_restarting_the_plugin_keeps_the_pods_and_a_new_pod_still_runs(cluster: SimCluster) -> None:
    ensure_pods_running(cluster)
    instances = gi_placements(cluster)
    plugin_pid = cluster.plugin_pid(REAL)
    os.kill(plugin_pid, signal.SIGKILL)
    wait_for("the plugin to be started again", lambda: cluster.plugin_pid(REAL) != plugin_pid, timeout=60)
    assert gi_placements(cluster) == instances
    cluster.apply(NAMESPACE, mig_claim("after-plugin") + pod_manifest("after-plugin", "after-plugin"))
    wait_running(cluster, {"after-plugin", *PODS})
    assert len(gi_placements(cluster) - instances) == 1


def test_restarting_containerd_keeps_the_containers_and_a_new_pod_still_runs(cluster: SimCluster) -> None:
    running = ensure_pods_running(cluster)
    containers = {name: container_id(cluster, name) for name in running}
    restart_process(cluster, node_dir(cluster) / "containerd.pid", "containerd")
    cluster.apply(
        NAMESPACE,
        mig_claim("after-containerd") + pod_manifest("after-containerd", "after-containerd"),
    )
    wait_running(cluster, {"after-containerd", *PODS})
    assert {name: container_id(cluster, name) for name in running} == containers


def test_rolling_the_plugin_side_by_side_keeps_the_pods_and_the_new_process_serves(cluster: SimCluster) -> None:
    """``migdra sim roll``: the new process (rolling-update socket names) starts beside the old one, the
    real kubelet registers it, the old one stops; the pods keep their instances and a new pod is prepared
    by the new process.  The simulated node-2 rolls the same way."""
    ensure_pods_running(cluster)
    instances = gi_placements(cluster)
    old_pid = cluster.plugin_pid(REAL)
    for node in (REAL, "node-2"):
        rolled = subprocess.run(
            [str(BIN / "migdra"), "sim", "roll", "--workdir", str(cluster.workdir), node],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert rolled.returncode == 0, rolled.stderr
        assert f"{node}: plugin rolled" in rolled.stdout
    new_pid = cluster.plugin_pid(REAL)
    assert new_pid != old_pid
    assert not process_alive(old_pid)
    infos = re.findall(r"kubelet asked for plugin info: gpu\.migdra\.io at (\S+),", plugin_log(cluster))
    assert infos[-1].endswith("/dra-r1.sock"), infos  # the kubelet took the new process's socket
    assert gi_placements(cluster) == instances
    cluster.apply(NAMESPACE, mig_claim("after-roll") + pod_manifest("after-roll", "after-roll"))
    wait_running(cluster, {"after-roll", *PODS})
    assert len(gi_placements(cluster) - instances) == 1


def test_deleting_the_pods_unprepares_every_device_and_removes_their_cdi_specs(cluster: SimCluster) -> None:
    ensure_pods_running(cluster)
    cdi = node_dir(cluster) / "cdi"
    assert list(cdi.glob("*.json")), "the running pods' CDI specs"
    cluster.delete_all(NAMESPACE)
    wait_for("every GPU instance of the real node to be destroyed", lambda: not gi_placements(cluster), timeout=120)
    wait_for("the CDI specs to go", lambda: not list(cdi.glob("*.json")), timeout=60)


def ensure_pods_running(cluster: SimCluster) -> set[str]:
    """The module's pods, running (a test run alone starts them)."""
    if not cluster.pods(NAMESPACE):
        test_each_container_sees_its_devices_through_the_cdi_edits_of_the_runtime(cluster)
    return set(wait_running(cluster, set(PODS)))


def restart_process(cluster: SimCluster, pid_file: Path, what: str) -> None:
    """SIGTERM one of the real node's processes; the cluster's supervisor starts it again (as systemd would)."""
    pid = int(pid_file.read_text().split()[0])
    os.kill(pid, signal.SIGTERM)
    wait_for(f"{what} to be started again", lambda: int(pid_file.read_text().split()[0]) != pid, timeout=90)


def node_ready(cluster: SimCluster) -> bool:
    node = cluster.client.get(NODES, None, REAL) or {}
    conditions = {c["type"]: c for c in (node.get("status") or {}).get("conditions") or []}
    return conditions.get("Ready", {}).get("status") == "True"
