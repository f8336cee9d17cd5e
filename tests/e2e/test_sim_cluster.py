"""`migdra sim up` end to end on the upstream control plane: kube-apiserver validates, kube-scheduler
allocates, kube-controller-manager's resourceclaim controller makes the claims of templates and
deallocates them; real processes, real sockets, the real kubectl.

One simulated cluster (2 nodes x 4 H100 80GB, one `migdra kubelet-plugin` process per node) per
Kubernetes version of the tier serves the tests of this module, each in its own namespace and cleaning
up after itself; more clusters check `migdra sim down`.  Every wait polls observable state (the API,
the NVML state files, the process table) with a bounded deadline.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dra_driver.kube.client import CLAIMS, EVENTS, SLICES
from dra_driver.nvml.session import open_nvml
from dra_driver.nvml.settings import build_nvml_settings
from migdra_devcluster.supervision import process_alive
from tests.kubelet_client import short_socket_dir
from tests.sim_cluster import BIN, DEMO, SimCluster, sim_down, start_cluster, versioned_cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.xdist_group("e2e-sim-cluster")

UPSTREAM = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


cluster = versioned_cluster("--nodes", "2", "--gpus", "H100-SXM5-80GB:4")


def _results(claim: dict[str, Any]) -> list[dict[str, Any]]:
    return claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])


def _owned(claims: list[dict[str, Any]], pod: str) -> dict[str, Any]:
    return next(c for c in claims if any(r["name"] == pod for r in c["metadata"].get("ownerReferences", [])))


def test_the_demo_workloads_run_on_mig_devices_and_go_away_without_a_trace(cluster: SimCluster) -> None:
    namespace = cluster.namespace("demo")
    cluster.kubectl("apply", "-n", namespace, "-f", str(DEMO))
    expected = {
        "inference-1g",
        "training-3g",
        "notebook-20gi",
        "pipeline-same-gpu",
        "batch-3g-or-2g",
        "legacy-device-plugin-pod",
    }
    pods = wait_for("the demo pods to run", lambda: cluster.running(namespace, expected))
    claims = cluster.claims(namespace)
    published = cluster.client.list(SLICES)[0]
    slices = {d["name"]: d for s in published for d in s["spec"].get("devices", [])}

    def profiles(pod: str) -> list[str]:
        return [slices[r["device"]]["attributes"]["profile"]["string"] for r in _results(_owned(claims, pod))]

    assert profiles("inference-1g") == ["1g.10gb"]
    assert profiles("training-3g") == ["3g.40gb"]
    notebook = _results(_owned(claims, "notebook-20gi"))[0]
    assert int(slices[notebook["device"]]["capacity"]["memory"]["value"]) >= 20 * 2**30
    pair = _results(_owned(claims, "pipeline-same-gpu"))
    assert sorted(r["request"] for r in pair) == ["stage-a", "stage-b"]
    parents = {slices[r["device"]]["attributes"]["parentUUID"]["string"] for r in pair}
    assert len(parents) == 1, "matchAttribute parentUUID: both devices on one GPU"
    fallback = _results(_owned(claims, "batch-3g-or-2g"))[0]
    assert fallback["request"] in ("mig/big", "mig/small")
    legacy = pods["legacy-device-plugin-pod"]
    extended = legacy["status"]["extendedResourceClaimStatus"]
    assert extended["resourceClaimName"].startswith("legacy-device-plugin-pod-extended-resources-")
    assert extended["requestMappings"] == [
        {"containerName": "app", "resourceName": "nvidia.com/mig-1g.10gb", "requestName": "container-0-request-0"}
    ]
    assert profiles("legacy-device-plugin-pod") == ["1g.10gb"]
    for name in expected:
        cdi = json.loads(pods[name]["metadata"]["annotations"]["sim.migdra.io/cdi-devices"])
        assert cdi, name
        assert all(ids for ids in cdi.values()), (name, cdi)
        assert pods[name]["spec"]["nodeName"] in ("node-1", "node-2")
    assert sum(cluster.mig_instances().values()) == 7  # six pods, the pipeline holds two

    def failed() -> list[dict[str, Any]]:
        selector = "involvedObject.name=too-big,reason=FailedScheduling"
        events = cluster.client.list(EVENTS, namespace, field_selector=selector)[0]
        return [e for e in events if "cannot allocate all claims" in e["message"]]

    event = wait_for("the FailedScheduling Event of too-big", failed)[0]
    assert event["type"] == "Warning"
    assert event["message"].startswith("0/2 nodes are available: 2 cannot allocate all claims.")
    assert cluster.pods(namespace)["too-big"]["status"]["phase"] == "Pending"
    # kube-scheduler logs at level 2 in sim up: each binding, and why a pod waits (docs/local-cluster.md)
    scheduler_log = (cluster.workdir / "kube" / "kube-scheduler.log").read_text(errors="replace")
    for line in ('"Unable to schedule pod; no fit; waiting" pod="demo/too-big"', 'pod="demo/inference-1g" node="node-'):
        assert line in scheduler_log, (line, scheduler_log[-2000:])
    training_claim = _owned(claims, "training-3g")["metadata"]["name"]
    described = cluster.kubectl("describe", "resourceclaim", "-n", namespace, training_claim)
    assert "3g.40gb" in described.stdout
    assert "Reserved For" in described.stdout
    for shown in ("Type:                  Reserved", "Type:                  Ready", "Mig UUID:", "Gpu UUID:"):
        assert shown in described.stdout, shown
    assert re.search(r"Placement:\s+Size:\s+4\s+Start:\s+[04]", described.stdout), described.stdout

    cluster.describe_running_claims(namespace)

    cluster.delete_all(namespace)
    wait_for("the generated claims to be deleted", lambda: not cluster.claims(namespace))
    assert cluster.mig_instances() == {"node-1": 0, "node-2": 0}


def test_a_pods_claim_is_reserved_then_ready_with_the_instance_the_simulated_nvml_holds(cluster: SimCluster) -> None:
    namespace = cluster.namespace("reserved")
    cluster.kubectl("apply", "-n", namespace, "-f", str(DEMO / "02-mig-3g.yaml"))
    wait_for("training-3g to run", lambda: cluster.running(namespace, {"training-3g"}))

    def entry() -> dict[str, Any] | None:
        (claim,) = cluster.claims(namespace)
        (device,) = claim.get("status", {}).get("devices") or [None]
        if device is None:
            return None
        types = {c["type"]: c for c in device.get("conditions", [])}
        return device if "Reserved" in types and "Ready" in types else None

    device = wait_for("Reserved and Ready on the claim", entry)
    conditions = {c["type"]: c for c in device["conditions"]}
    assert (conditions["Reserved"]["status"], conditions["Reserved"]["reason"]) == ("True", "Allocated")
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("True", "MigInstanceReady")
    data = device["data"]
    assert data["schemaVersion"] == "v1"
    node = data["node"]
    assert node == cluster.pods(namespace)["training-3g"]["spec"]["nodeName"]
    state = cluster.workdir / "nodes" / node / "nvml-state.json"
    with open_nvml(build_nvml_settings(nvml="simulated", sim_state=state)) as nvml:
        instances = [(gpu, gi) for gpu in nvml.list_gpus() for gi in nvml.gpu_instances(gpu.uuid)]
    (gpu, gi), *others = [
        (g, i) for g, i in instances if i.compute_instances and i.compute_instances[0].mig_uuid == data["migUUID"]
    ]
    assert not others
    assert data["gpuUUID"] == gpu.uuid
    assert data["gpuMinor"] == gpu.minor_number
    assert data["placement"] == {"start": gi.placement.start, "size": gi.placement.size}
    assert data["gpuInstanceID"] == gi.gpu_instance_id
    assert data["computeInstanceID"] == gi.compute_instances[0].compute_instance_id
    assert data["profile"] == "3g.40gb"

    (claim,) = cluster.claims(namespace)
    described = cluster.kubectl("describe", "resourceclaim", "-n", namespace, claim["metadata"]["name"]).stdout
    for text in ("Reserved", "Allocated", "MigInstanceReady", data["migUUID"], data["gpuUUID"], "Schema Version"):
        assert text in described, text
    cluster.describe_running_claims(namespace)
    cluster.delete_all(namespace)


CONFIGURED_CLAIM = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: configured
spec:
  devices:
    requests:
    - name: mig
      exactly:
        deviceClassName: mig.migdra.io
        selectors:
        - cel:
            expression: device.attributes['gpu.migdra.io'].profile == '1g.10gb'
    config:
    - requests: [mig]
      opaque:
        driver: gpu.migdra.io
        parameters:
          apiVersion: gpu.migdra.io/v1alpha1
          kind: MigDeviceConfig
          env:
            NCCL_DEBUG: INFO
---
apiVersion: v1
kind: Pod
metadata:
  name: configured
spec:
  containers:
  - name: app
    image: registry.example/app:latest
    resources:
      claims:
      - name: gpu
  resourceClaims:
  - name: gpu
    resourceClaimName: configured
"""


def test_a_claim_with_opaque_configuration_shows_reserved_ready_and_its_mig_uuid(cluster: SimCluster) -> None:
    """The claim docs/prepare.md describes, applied with kubectl: its status is written (the API server
    once refused it as an allocation change), and the container gets the configured environment."""
    namespace = cluster.namespace("configured")
    cluster.apply(namespace, CONFIGURED_CLAIM)
    wait_for("the configured pod to run", lambda: cluster.running(namespace, {"configured"}))

    def ready_entry() -> dict[str, Any] | None:
        claim = next(c for c in cluster.claims(namespace) if c["metadata"]["name"] == "configured")
        (device,) = claim.get("status", {}).get("devices") or [None]
        types = {c["type"]: c["status"] for c in (device or {}).get("conditions", [])}
        return device if types == {"Reserved": "True", "Ready": "True"} and "migUUID" in device["data"] else None

    device = wait_for("Reserved, Ready and the MIG UUID on the configured claim", ready_entry)
    described = cluster.kubectl("describe", "resourceclaim", "-n", namespace, "configured").stdout
    for text in ("Reserved", "MigInstanceReady", device["data"]["migUUID"], "MigDeviceConfig"):
        assert text in described, text
    (claim,) = [c for c in cluster.claims(namespace) if c["metadata"]["name"] == "configured"]
    spec = cluster.workdir / "nodes" / device["data"]["node"] / "cdi"
    (path,) = spec.glob(f"*_{claim['metadata']['uid']}.json")
    edits = json.loads(path.read_text())
    assert "NCCL_DEBUG=INFO" in json.dumps(edits), "the configured environment is in the claim's CDI spec"
    cluster.describe_running_claims(namespace)
    cluster.delete_all(namespace)


def test_simulated_nodes_report_a_kubelet_of_the_control_planes_release(cluster: SimCluster) -> None:
    server = json.loads(cluster.kubectl("version", "-o", "json").stdout)["serverVersion"]["gitVersion"]
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    assert nodes
    assert {n["status"]["nodeInfo"]["kubeletVersion"] for n in nodes} == {f"{server}-migdra-sim"}


def test_a_restarted_plugin_leaves_running_pods_alone_and_serves_later_ones(cluster: SimCluster) -> None:
    namespace = cluster.namespace("restart")
    cluster.kubectl("apply", "-n", namespace, "-f", str(DEMO / "01-mig-1g.yaml"))
    first = wait_for("the first pod to run", lambda: cluster.running(namespace, {"inference-1g"}))["inference-1g"]
    node = first["spec"]["nodeName"]
    old = cluster.plugin_pid(node)
    os.kill(old, signal.SIGKILL)
    wait_for("the killed plugin to exit", lambda: not process_alive(old))
    new = wait_for("a new plugin", lambda: (pid := cluster.plugin_pid(node)) != old and process_alive(pid) and pid)
    assert new != old
    # Every placement of the second pod's profile is on the same nodes; pin it to the restarted one.
    pinned = f"spec:\n  nodeSelector:\n    kubernetes.io/hostname: {node}\n  containers:"
    cluster.apply(namespace, (DEMO / "02-mig-3g.yaml").read_text().replace("spec:\n  containers:", pinned))
    pods = wait_for("the second pod to run", lambda: cluster.running(namespace, {"inference-1g", "training-3g"}))
    assert pods["training-3g"]["spec"]["nodeName"] == node
    assert pods["inference-1g"]["metadata"]["uid"] == first["metadata"]["uid"]
    assert pods["inference-1g"]["metadata"]["annotations"] == first["metadata"]["annotations"]
    assert cluster.mig_instances()[node] == 2
    cluster.describe_running_claims(namespace)
    cluster.delete_all(namespace)
    assert sum(cluster.mig_instances().values()) == 0


SHARED = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: shared-1g
spec:
  devices:
    requests:
    - name: mig
      exactly:
        deviceClassName: mig.migdra.io
        selectors:
        - cel:
            expression: device.attributes['gpu.migdra.io'].profile == '1g.10gb'
"""

POD = """
---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  containers:
  - name: app
    image: registry.example/app:latest
    resources:
      claims:
      - name: gpu
  resourceClaims:
  - name: gpu
    resourceClaimName: shared-1g
"""


def test_a_shared_claim_is_prepared_once_and_unprepared_after_its_last_pod(cluster: SimCluster) -> None:
    namespace = cluster.namespace("shared")
    cluster.apply(namespace, SHARED + POD.format(name="reader-a") + POD.format(name="reader-b"))
    pods = wait_for("both pods to run", lambda: cluster.running(namespace, {"reader-a", "reader-b"}))
    assert pods["reader-a"]["spec"]["nodeName"] == pods["reader-b"]["spec"]["nodeName"]
    claim = cluster.client.get(CLAIMS, namespace, "shared-1g")
    assert claim is not None
    assert sorted(r["name"] for r in claim["status"]["reservedFor"]) == ["reader-a", "reader-b"]
    assert sum(cluster.mig_instances().values()) == 1
    ids = {p: json.loads(pods[p]["metadata"]["annotations"]["sim.migdra.io/cdi-devices"]) for p in pods}
    assert ids["reader-a"] == ids["reader-b"]

    cluster.kubectl("delete", "pod", "reader-a", "-n", namespace, "--wait=true", "--timeout=60s")

    def reserved_for_b_only() -> bool:
        current = cluster.client.get(CLAIMS, namespace, "shared-1g") or {}
        return [r["name"] for r in current.get("status", {}).get("reservedFor", [])] == ["reader-b"]

    wait_for("the reservation of reader-a to end", reserved_for_b_only)
    assert sum(cluster.mig_instances().values()) == 1, "still used by reader-b: not unprepared"
    cluster.describe_running_claims(namespace)
    cluster.delete_all(namespace)

    def deallocated() -> bool:
        current = cluster.client.get(CLAIMS, namespace, "shared-1g") or {}
        return not current.get("status", {}).get("allocation")

    wait_for("the shared claim to be deallocated", deallocated)
    assert sum(cluster.mig_instances().values()) == 0


def test_another_driver_name_runs_end_to_end_and_sim_down_stops_every_process() -> None:
    driver = "mig.example.com"
    with short_socket_dir() as root:
        sim = start_cluster(root / "sim", "--nodes", "2", "--gpus", "A100-SXM4-40GB:1", "--driver-name", driver)
        try:
            pids = [sim.process.pid, sim.plugin_pid("node-1"), sim.plugin_pid("node-2")]
            assert all(process_alive(pid) for pid in pids)
            assert sim.stdout_lines == [f"ready kubeconfig={sim.kubeconfig}\n"]
            slices = sim.client.list(SLICES)[0]
            assert {s["spec"]["driver"] for s in slices} == {driver}
            # The installed classes select the other driver's devices; a claim names its attributes' domain.
            manifest = (
                (DEMO / "01-mig-1g.yaml").read_text().replace("gpu.migdra.io", driver).replace("1g.10gb", "1g.5gb")
            )
            sim.apply("default", manifest)
            pod = wait_for("the pod to run", lambda: sim.running("default", {"inference-1g"}))["inference-1g"]
            claim = _owned(sim.claims("default"), "inference-1g")
            assert [r["driver"] for r in _results(claim)] == [driver]
            assert json.loads(pod["metadata"]["annotations"]["sim.migdra.io/cdi-devices"])
            assert sum(sim.mig_instances().values()) == 1
        finally:
            sim.client.close()
            down = sim_down(sim.workdir)
        assert down.returncode == 0, down.stderr
        sim.process.wait(timeout=30)
        assert sim.process.stdout is not None
        sim.process.stdout.close()
        assert sim.process.returncode == 0
        for pid in pids:
            assert not process_alive(pid), f"process {pid} still runs after sim down"
        assert not list(sim.workdir.glob("**/*.pid"))
        again = sim_down(sim.workdir)
        assert again.returncode == 0
        assert "nothing was running" in again.stderr


def _processes_under(workdir: Path) -> list[int]:
    """Processes whose command line names ``workdir`` (the supervisor's plugins do)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if str(workdir) in entry.joinpath("cmdline").read_bytes().decode(errors="replace") and process_alive(
                int(entry.name)
            ):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_sigterm_while_starting_stops_everything() -> None:
    with short_socket_dir() as root:
        workdir = root / "sim"
        command = [str(BIN / "migdra"), "sim", "up", "--workdir", str(workdir), "--nodes", "2", "--gpus", "A30:1"]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert process.stderr is not None
        for line in process.stderr:  # the plugins are being started: interrupt now
            if "starting the kubelet plugin of node-2" in line:
                break
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=60)
        assert process.returncode == 0
        assert out in ("", f"ready kubeconfig={workdir / 'kubeconfig'}\n")  # the ready line may have won the race
        assert _processes_under(workdir) == []
        assert not list(workdir.glob("**/*.pid"))


def test_a_killed_supervisor_is_found_stopped_by_sim_down_and_a_new_run_starts_afresh() -> None:
    with short_socket_dir() as root:
        workdir = root / "sim"
        first = start_cluster(workdir, "--gpus", "H100-SXM5-80GB:1")
        first.apply("default", (DEMO / "01-mig-1g.yaml").read_text())
        wait_for("the pod to run", lambda: first.running("default", {"inference-1g"}))
        assert first.mig_instances() == {"node-1": 1}
        orphan = first.plugin_pid("node-1")
        controller = int((workdir / "controller.pid").read_text().split()[0])
        upstream = {c: int((workdir / "kube" / f"{c}.pid").read_text().split()[0]) for c in UPSTREAM}
        first.client.close()
        first.process.kill()  # the supervisor dies; its plugin process (its own session) lives on
        first.process.wait(timeout=30)
        assert first.process.stdout is not None
        first.process.stdout.close()
        assert process_alive(orphan)
        assert process_alive(controller)
        assert all(process_alive(pid) for pid in upstream.values()), "each runs in its own session"

        refused = subprocess.run(
            [str(BIN / "migdra"), "sim", "up", "--workdir", str(workdir)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert refused.returncode == 2
        running = re.search(r"a simulated cluster still runs there \(pid ([\d ]+)\)", refused.stderr)
        assert running is not None, refused.stderr
        assert sorted(int(pid) for pid in running.group(1).split()) == sorted([orphan, controller, *upstream.values()])
        assert process_alive(orphan), "a refused start must not touch the running plugin"
        assert process_alive(controller), "nor the running controller"

        down = sim_down(workdir)
        assert down.returncode == 0, down.stderr
        assert str(orphan) in down.stderr
        assert str(controller) in down.stderr
        wait_for("the orphaned plugin to stop", lambda: not process_alive(orphan))
        wait_for("the orphaned controller to stop", lambda: not process_alive(controller))
        for component, pid in upstream.items():
            assert str(pid) in down.stderr, component
        wait_for("every process of the cluster to stop", lambda: not _processes_under(workdir))

        second = start_cluster(workdir, "--gpus", "H100-SXM5-80GB:1")
        try:
            # A new run starts afresh (etcd's data too), so do the nodes: no instance of the old claim is left.
            assert second.pods("default") == {}
            assert second.mig_instances() == {"node-1": 0}
            second.apply("default", (DEMO / "01-mig-1g.yaml").read_text())
            wait_for("the pod of the new run to run", lambda: second.running("default", {"inference-1g"}))
        finally:
            second.client.close()
            assert sim_down(workdir).returncode == 0
            second.process.wait(timeout=30)
            assert second.process.stdout is not None
            second.process.stdout.close()
