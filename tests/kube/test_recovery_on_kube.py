"""The development cluster recovers by itself when every pod is deleted (#34: `kubectl delete pods --all -A`
once left every plugin answering 401 until `sim down` / `sim up`).

The plugins log in with tokens bound to their Pods in migdra-system, as the chart's DaemonSet pods do;
deleting a Pod kills its token.  Like the DaemonSet and kubelet, the cluster makes the Pod again and
writes a token bound to the new one into the plugin's token file, which the running plugin reads again
(docs/local-cluster.md).  Afterwards the plugin publishes, prepares and writes claim status with the new
token -- no restart, no 401 left.
"""

from __future__ import annotations

import json

import pytest

from migdra_devcluster.upstream.access import RELEASE_NAMESPACE
from tests.sim_cluster import DEMO, SimCluster, versioned_cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.xdist_group("kube-recovery")


cluster = versioned_cluster("--nodes", "2", "--gpus", "H100-SXM5-80GB:1")


def plugin_pods(cluster: SimCluster) -> dict[str, str]:
    """Plugin Pod name -> UID, of the Pods not being deleted."""
    pods = json.loads(cluster.kubectl("get", "pods", "-n", RELEASE_NAMESPACE, "-o", "json").stdout)["items"]
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods if not p["metadata"].get("deletionTimestamp")}


def test_deleting_every_pod_leaves_the_plugins_working_with_new_tokens(cluster: SimCluster) -> None:
    before = plugin_pods(cluster)
    assert len(before) == 2
    namespace = cluster.namespace("recovery")
    cluster.kubectl("apply", "-n", namespace, "-f", str(DEMO / "01-mig-1g.yaml"))
    wait_for("the first pod to run", lambda: cluster.running(namespace, {"inference-1g"}))

    cluster.kubectl("delete", "pods", "--all", "-A", "--wait=false")
    after = wait_for(
        "new plugin Pods",
        lambda: (
            (pods := plugin_pods(cluster)) and len(pods) == 2 and not set(pods.values()) & set(before.values()) and pods
        ),
    )
    assert set(after) == set(before)  # the same names, as a DaemonSet's pods would not be; new UIDs

    # Everything the plugins do with the API server works again, with the new tokens, without a restart.
    cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--wait=true", "--timeout=120s")
    cluster.kubectl("apply", "-n", namespace, "-f", str(DEMO / "02-mig-3g.yaml"))
    wait_for("a new pod to run", lambda: cluster.running(namespace, {"training-3g"}))

    def ready() -> bool:
        claims = [c for c in cluster.claims(namespace) if c["metadata"]["name"].startswith("training-3g")]
        devices = [d for c in claims for d in (c.get("status") or {}).get("devices") or []]
        return any(
            {x["type"] for x in d.get("conditions", [])} >= {"Reserved", "Ready"} and "migUUID" in d["data"]
            for d in devices
        )

    wait_for("the new claim's status (Ready, MIG UUID) written with the new token", ready)
    cluster.describe_running_claims(namespace)
    cluster.delete_all(namespace)
