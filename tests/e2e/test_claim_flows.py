"""The claim flows a user writes, end to end on the upstream control plane: opaque configuration from a
DeviceClass, for all of a claim's requests and for one; admin access to a whole GPU another claim holds;
a whole GPU; a restarted reservation controller; a deleted Node's slices collected.

One cluster per Kubernetes version of the tier: node-1 with an H100 in MIG mode, node-2 with an H100
whose MIG mode is off (a whole GPU).  Each flow ends with what ``kubectl describe resourceclaim`` shows
(:meth:`SimCluster.describe_claim`) and cleans up after itself: nothing is left on the GPUs.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from dra_driver.kube.client import CLAIMS, EVENTS, NODES, SLICES
from migdra_devcluster.supervision import process_alive
from tests.sim_cluster import SimCluster, versioned_cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.xdist_group("e2e-claim-flows")

DRIVER = "gpu.migdra.io"
cluster = versioned_cluster(
    "--nodes", "2", "--gpus", "H100-SXM5-80GB:1", "--plugin-env", "node-2:MIGDRA_SIM_MIG_ENABLED=false"
)

CONFIGURED_CLASS = """\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: mig-configured.migdra.io
spec:
  selectors:
  - cel:
      expression: >-
        device.driver == 'gpu.migdra.io' && device.attributes['gpu.migdra.io'].type == 'mig' &&
        !('shared' in device.attributes['gpu.migdra.io'])
  config:
  - opaque:
      driver: gpu.migdra.io
      parameters:
        apiVersion: gpu.migdra.io/v1alpha1
        kind: MigDeviceConfig
        env:
          FROM_CLASS: class
"""

CONFIGURED_CLAIM = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: two-configured
spec:
  devices:
    requests:
    - name: a
      exactly:
        deviceClassName: mig-configured.migdra.io
        selectors:
        - cel:
            expression: device.attributes['gpu.migdra.io'].profile == '1g.10gb'
    - name: b
      exactly:
        deviceClassName: mig.migdra.io
        selectors:
        - cel:
            expression: device.attributes['gpu.migdra.io'].profile == '1g.10gb'
    config:
    - opaque:
        driver: gpu.migdra.io
        parameters:
          apiVersion: gpu.migdra.io/v1alpha1
          kind: MigDeviceConfig
          env:
            FOR_ALL: all
    - requests: [b]
      opaque:
        driver: gpu.migdra.io
        parameters:
          apiVersion: gpu.migdra.io/v1alpha1
          kind: MigDeviceConfig
          env:
            ONLY_B: b
---
apiVersion: v1
kind: Pod
metadata:
  name: two-configured
spec:
  containers:
  - name: app
    image: registry.example/app:latest
    resources:
      claims:
      - name: gpus
  resourceClaims:
  - name: gpus
    resourceClaimName: two-configured
"""


def pod_with_claim(name: str, node: str | None = None) -> str:
    """A pod that uses the claim ``name``, pinned to ``node`` when given."""
    pinned = f"  nodeSelector:\n    kubernetes.io/hostname: {node}\n" if node else ""
    return f"""\
---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
{pinned}  containers:
  - name: app
    image: registry.example/app:latest
    resources:
      claims:
      - name: gpu
  resourceClaims:
  - name: gpu
    resourceClaimName: {name}
"""


def claim(name: str, class_name: str, expression: str, *, admin: bool = False) -> str:
    selector = f"        selectors:\n        - cel:\n            expression: {expression}\n" if expression else ""
    return f"""\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: {name}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: {class_name}
        adminAccess: {str(admin).lower()}
{selector}"""


def results(sim: SimCluster, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    """The claim's allocation results by request."""
    stored = sim.client.get(CLAIMS, namespace, name) or {}
    found = (((stored.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    return {r["request"]: r for r in found}


def cdi_edits(sim: SimCluster, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    """The container edits of each device of the claim's CDI spec, by device name, as the node wrote them."""
    stored = sim.client.get(CLAIMS, namespace, name)
    assert stored is not None
    node = stored["status"]["devices"][0]["data"]["node"]
    (path,) = (sim.workdir / "nodes" / node / "cdi").glob(f"*_{stored['metadata']['uid']}.json")
    spec = json.loads(Path(path).read_text())
    prefix = f"{stored['metadata']['uid']}-"
    return {d["name"].removeprefix(prefix): d["containerEdits"] for d in spec["devices"]}


def entry_data(sim: SimCluster, namespace: str, name: str) -> dict[str, Any]:
    stored = sim.client.get(CLAIMS, namespace, name)
    assert stored is not None
    (entry,) = [e for e in stored["status"]["devices"] if e["driver"] == DRIVER]
    data: dict[str, Any] = entry["data"]
    return data


def test_configuration_from_the_class_for_all_requests_and_for_one_reaches_exactly_its_devices(
    cluster: SimCluster,
) -> None:
    namespace = cluster.namespace("configured")
    cluster.apply(namespace, CONFIGURED_CLASS)
    try:
        cluster.apply(namespace, CONFIGURED_CLAIM)
        wait_for("the configured pod to run", lambda: cluster.running(namespace, {"two-configured"}))
        described = cluster.describe_claim(namespace, "two-configured")
        assert "MigDeviceConfig" in described
        devices = {
            request: result["device"] for request, result in results(cluster, namespace, "two-configured").items()
        }
        edits = cdi_edits(cluster, namespace, "two-configured")
        env = {request: set(edits[device]["env"]) for request, device in devices.items()}
        assert {"FROM_CLASS=class", "FOR_ALL=all"} <= env["a"]
        assert not any(e.startswith("ONLY_B=") for e in env["a"]), "request b's configuration is b's alone"
        assert {"FOR_ALL=all", "ONLY_B=b"} <= env["b"]
        assert not any(e.startswith("FROM_CLASS=") for e in env["b"]), "b's class has no configuration"
        cluster.delete_all(namespace)
        wait_for("the claim to be deallocated", lambda: not results(cluster, namespace, "two-configured"))
        assert cluster.mig_instances() == {"node-1": 0, "node-2": 0}
    finally:
        cluster.kubectl("delete", "deviceclass", "mig-configured.migdra.io", "--ignore-not-found")


def test_admin_access_reaches_a_whole_gpu_in_use_but_kube_scheduler_gives_no_mig_placement_in_use(
    cluster: SimCluster,
) -> None:
    """Admin access (a namespace labelled for it) is given a whole GPU another claim holds, and prepare
    creates nothing for it.  A MIG placement another claim holds it is not given: kube's allocator counts
    an admin result's counters like any other, and the placement's memory slices are spent (docs/prepare.md,
    "Admin access")."""
    namespace = cluster.namespace("admin")
    cluster.kubectl("label", "namespace", namespace, "resource.kubernetes.io/admin-access=true")
    cluster.apply(namespace, claim("owner", "gpu.migdra.io", "") + pod_with_claim("owner"))
    wait_for("the owner's pod to run", lambda: cluster.running(namespace, {"owner"}))
    owned = entry_data(cluster, namespace, "owner")
    cluster.apply(namespace, claim("admin", "gpu.migdra.io", "", admin=True) + pod_with_claim("admin"))
    pods = wait_for("the admin pod to run", lambda: cluster.running(namespace, {"owner", "admin"}))
    assert pods["admin"]["spec"]["nodeName"] == pods["owner"]["spec"]["nodeName"] == "node-2"
    described = cluster.describe_claim(namespace, "admin")
    assert "AdminAccessReady" in described
    seen = entry_data(cluster, namespace, "admin")
    assert (seen["adminAccess"], seen["gpuUUID"]) == (True, owned["gpuUUID"])
    assert {"path": "/dev/nvidia0"} in cdi_edits(cluster, namespace, "admin")["gpu-0"]["deviceNodes"]

    one_g = "device.attributes['gpu.migdra.io'].profile == '1g.10gb'"
    cluster.apply(namespace, claim("mig-owner", "mig.migdra.io", one_g) + pod_with_claim("mig-owner", "node-1"))
    wait_for("the MIG owner's pod to run", lambda: cluster.running(namespace, {"mig-owner"}))
    held = entry_data(cluster, namespace, "mig-owner")
    exactly_that = (
        f"{one_g} && device.attributes['gpu.migdra.io'].parentUUID == '{held['gpuUUID']}' && "
        f"device.attributes['gpu.migdra.io'].placementStart == {held['placement']['start']}"
    )
    cluster.apply(
        namespace,
        claim("mig-admin", "mig.migdra.io", f'"{exactly_that}"', admin=True) + pod_with_claim("mig-admin", "node-1"),
    )

    def refused() -> list[dict[str, Any]]:
        selector = "involvedObject.name=mig-admin,reason=FailedScheduling"
        events: list[dict[str, Any]] = cluster.client.list(EVENTS, namespace, field_selector=selector)[0]
        return events

    (event, *_) = wait_for("kube-scheduler's FailedScheduling of the MIG admin pod", refused)
    assert "cannot allocate all claims" in event["message"]
    assert cluster.mig_instances() == {"node-1": 1, "node-2": 0}, "admin access created nothing"

    cluster.delete_all(namespace)
    wait_for("the owners' claims to be deallocated", lambda: not results(cluster, namespace, "mig-owner"))
    assert cluster.mig_instances() == {"node-1": 0, "node-2": 0}


def test_a_whole_gpu_claim_runs_on_the_gpu_whose_mig_mode_is_off(cluster: SimCluster) -> None:
    namespace = cluster.namespace("whole")
    cluster.apply(namespace, claim("whole", "gpu.migdra.io", "") + pod_with_claim("whole"))
    pods = wait_for("the whole-GPU pod to run", lambda: cluster.running(namespace, {"whole"}))
    assert pods["whole"]["spec"]["nodeName"] == "node-2"
    described = cluster.describe_claim(namespace, "whole")
    assert "Mig UUID" not in described, "a whole GPU has no MIG instance"
    (result,) = results(cluster, namespace, "whole").values()
    assert result["device"] == "gpu-0"
    edits = cdi_edits(cluster, namespace, "whole")
    assert {"path": "/dev/nvidia0"} in edits["gpu-0"]["deviceNodes"]
    cluster.delete_all(namespace)
    assert cluster.mig_instances() == {"node-1": 0, "node-2": 0}


def test_a_killed_reservation_controller_is_restarted_and_reserves_what_was_allocated_meanwhile(
    cluster: SimCluster,
) -> None:
    namespace = cluster.namespace("controller")
    pid_file = cluster.workdir / "controller.pid"
    old = int(pid_file.read_text().split()[0])
    os.kill(old, signal.SIGKILL)
    wait_for("the killed controller to exit", lambda: not process_alive(old))
    one_g = "device.attributes['gpu.migdra.io'].profile == '1g.10gb'"
    cluster.apply(namespace, claim("meanwhile", "mig.migdra.io", one_g) + pod_with_claim("meanwhile"))
    new = wait_for(
        "a new controller", lambda: (pid := int(pid_file.read_text().split()[0])) != old and process_alive(pid) and pid
    )
    assert new != old
    wait_for("the pod to run", lambda: cluster.running(namespace, {"meanwhile"}))

    def reserved() -> bool:
        stored = cluster.client.get(CLAIMS, namespace, "meanwhile") or {}
        entries = [e for e in (stored.get("status") or {}).get("devices") or [] if e["driver"] == DRIVER]
        return any(c["type"] == "Reserved" and c["status"] == "True" for e in entries for c in e.get("conditions", []))

    wait_for("the restarted controller's Reserved condition", reserved)
    described = cluster.describe_claim(namespace, "meanwhile")
    assert "Type:                  Reserved" in described
    cluster.delete_all(namespace)
    assert cluster.mig_instances() == {"node-1": 0, "node-2": 0}


def test_zz_a_deleted_nodes_slices_are_collected_by_the_garbage_collector(cluster: SimCluster) -> None:
    """Last in the module (it takes node-2 away): the slices are owned by their Node, so
    kube-controller-manager's garbage collector deletes them with it."""
    node = cluster.client.get(NODES, None, "node-2")
    assert node is not None
    uid = node["metadata"]["uid"]

    def owned_by_the_node() -> list[str]:
        slices = cluster.client.list(SLICES, field_selector="spec.nodeName=node-2")[0]
        return [s["metadata"]["name"] for s in slices if any(o["uid"] == uid for o in s["metadata"]["ownerReferences"])]

    assert owned_by_the_node(), "every slice of node-2 names node-2 as its owner"
    cluster.kubectl("delete", "node", "node-2", "--wait=true", "--timeout=60s")
    wait_for("the garbage collector to delete node-2's slices", lambda: not owned_by_the_node(), timeout=120)
