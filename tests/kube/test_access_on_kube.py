"""migdra's components under the real authorizer and admission: each logs in with exactly the Helm chart's
RBAC (its ServiceAccount's token) and the chart's node-scoped ValidatingAdmissionPolicy is enforced by the
real kube-apiserver.

- in a normal run (a pod's claim prepared, reserved, released) neither component is refused anything,
  and everything it calls is granted by the chart (kube-apiserver's audit log lists every request);
- ``kubectl auth can-i`` with each component's kubeconfig answers yes exactly where the chart grants;
- the plugin of node-1 cannot create, change or delete node-2's ResourceSlices (the admission policy:
  its token names its node), can write its own node's, and a token of its ServiceAccount that is not
  bound to a pod is refused altogether; neither component can read Secrets.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from dra_driver.kube.client import SLICES, Client, Kind
from migdra_devcluster.kubeconfig import write_kubeconfig
from migdra_devcluster.upstream.access import RELEASE_NAMESPACE, request_token
from tests.integration.helm.chart import bound_rules, render
from tests.sim_cluster import DEMO, SimCluster, versioned_cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.xdist_group("kube-access")

DRIVER = "gpu.migdra.io"
PLUGIN_SA, CONTROLLER_SA = "migdra-kubelet-plugin", "migdra-controller"
PLUGIN_USER = f"system:serviceaccount:{RELEASE_NAMESPACE}:{PLUGIN_SA}"
CONTROLLER_USER = f"system:serviceaccount:{RELEASE_NAMESPACE}:{CONTROLLER_SA}"
SECRETS = Kind("", "v1", "secrets", namespaced=True, kind="Secret")
# Granted permissions one pod's run does not exercise, each with the path that needs it.
NOT_EXERCISED = {
    PLUGIN_SA: {
        ("resource.k8s.io", "resourceslices", "update"),  # a changed pool (rescan, placement, taints)
        ("resource.k8s.io", "resourceslices", "delete"),  # fewer slices, or --cleanup-on-exit
        ("", "events", "patch"),  # a repeated Event (a prepare failing alike again)
        ("resource.k8s.io", "resourceclaims", "get"),  # a claim the informer has not seen yet
        ("resource.k8s.io", "resourceclaims/driver", "associated-node:patch"),  # checked within a status write
    },
    CONTROLLER_SA: {
        ("resource.k8s.io", "resourceclaims", "get"),  # re-read after a 409 on a status write
        ("", "events", "patch"),  # a repeated Event
        ("resource.k8s.io", "resourceclaims/driver", "arbitrary-node:patch"),  # checked within a status write
        ("coordination.k8s.io", "leases", "update"),  # the leader's renewal, which a short run may not reach
    },
}


cluster = versioned_cluster("--nodes", "2", "--gpus", "H100-SXM5-80GB:1")


def audit(cluster: SimCluster) -> list[dict[str, Any]]:
    lines = (cluster.workdir / "kube" / "audit.log").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def requests_of(records: list[dict[str, Any]], user: str) -> list[tuple[str, str, str, int]]:
    """(API group, resource[/subresource], verb, HTTP code) of each request ``user`` made."""
    found = []
    for record in records:
        ref = record.get("objectRef") or {}
        if record["user"]["username"] != user or not ref.get("resource"):
            continue
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        found.append((ref.get("apiGroup", ""), resource, record["verb"], int(record["responseStatus"]["code"])))
    return found


def test_a_normal_run_is_refused_nothing_and_uses_only_what_the_chart_grants(cluster: SimCluster) -> None:
    namespace = cluster.namespace("access")
    cluster.kubectl("apply", "-n", namespace, "-f", str(DEMO / "01-mig-1g.yaml"))
    wait_for("the pod to run", lambda: cluster.running(namespace, {"inference-1g"}))

    def reserved_and_ready() -> bool:
        devices = (cluster.claims(namespace)[0].get("status") or {}).get("devices") or []
        return {"Reserved", "Ready"} <= {c["type"] for d in devices for c in d.get("conditions") or []}

    wait_for("Reserved (controller) and Ready (plugin) on the claim", reserved_and_ready)
    cluster.delete_all(namespace)
    wait_for("the claim to go", lambda: not cluster.claims(namespace))
    wait_for("the instance to go", lambda: cluster.mig_instances() == {"node-1": 0, "node-2": 0})

    rendered = render(namespace=RELEASE_NAMESPACE)
    records = audit(cluster)
    for account, user in ((PLUGIN_SA, PLUGIN_USER), (CONTROLLER_SA, CONTROLLER_USER)):
        made = requests_of(records, user)
        assert made, f"no request of {user} in the audit log"
        refused = sorted({r for r in made if r[3] in (401, 403)})
        assert not refused, f"{account} was refused {refused}"
        used = {(group, resource, verb) for group, resource, verb, _ in made}
        # the verbs of the audit log are the authorizer's (a watch is "watch", a list "list")
        granted = {
            (group, resource, verb) for group, resource, verb, _ in bound_rules(rendered, account, RELEASE_NAMESPACE)
        }
        assert used <= granted, f"{account} used what the chart does not grant: {used - granted}"
        assert granted - used <= NOT_EXERCISED[account], f"{account}: granted, never used: {granted - used}"


def can_i(cluster: SimCluster, kubeconfig: Path, *args: str) -> bool:
    done = cluster.kubectl("auth", "can-i", "--kubeconfig", str(kubeconfig), *args, check=False)
    assert done.stdout.strip() in ("yes", "no"), (args, done.stdout, done.stderr)
    return done.stdout.strip() == "yes"


PLUGIN_CAN = [
    (("list", "resourceslices.resource.k8s.io"), True),
    (("create", "resourceslices.resource.k8s.io"), True),
    (("update", "resourceslices.resource.k8s.io"), True),
    (("delete", "resourceslices.resource.k8s.io"), True),
    (("get", "resourceslices.resource.k8s.io"), False),
    (("watch", "resourceslices.resource.k8s.io"), False),
    (("get", "resourceclaims.resource.k8s.io", "-A"), True),
    (("watch", "resourceclaims.resource.k8s.io", "-A"), True),
    (("patch", "resourceclaims.resource.k8s.io", "--subresource=status", "-A"), True),
    (("update", "resourceclaims.resource.k8s.io", "--subresource=status", "-A"), False),
    (("update", "resourceclaims.resource.k8s.io", "-A"), False),
    (("delete", "resourceclaims.resource.k8s.io", "-A"), False),
    (("get", "nodes"), True),
    (("update", "nodes"), False),
    (("create", "events", "-A"), True),
    (("patch", "events", "-A"), True),
    (("get", "secrets", "-A"), False),
    (("list", "secrets", "-n", RELEASE_NAMESPACE), False),
    (("create", "pods", "-A"), False),
    (("get", "leases.coordination.k8s.io", "-n", RELEASE_NAMESPACE), False),
]
CONTROLLER_CAN = [
    (("list", "resourceclaims.resource.k8s.io", "-A"), True),
    (("watch", "resourceclaims.resource.k8s.io", "-A"), True),
    (("patch", "resourceclaims.resource.k8s.io", "--subresource=status", "-A"), True),
    (("update", "resourceclaims.resource.k8s.io", "--subresource=status", "-A"), False),
    (("update", "resourceclaims.resource.k8s.io", "-A"), False),
    (("list", "resourceslices.resource.k8s.io"), True),
    (("create", "resourceslices.resource.k8s.io"), False),
    (("delete", "resourceslices.resource.k8s.io"), False),
    (("patch", "events", "-A"), True),
    (("create", "leases.coordination.k8s.io", "-n", RELEASE_NAMESPACE), True),
    (("update", f"leases.coordination.k8s.io/{DRIVER}-controller", "-n", RELEASE_NAMESPACE), True),
    (("update", "leases.coordination.k8s.io/another", "-n", RELEASE_NAMESPACE), False),
    (("create", "leases.coordination.k8s.io", "-n", "kube-system"), False),
    (("get", "secrets", "-A"), False),
    (("get", "nodes"), False),
]


@pytest.mark.parametrize(("args", "allowed"), PLUGIN_CAN, ids=[" ".join(a) for a, _ in PLUGIN_CAN])
def test_the_plugin_may_do_what_the_chart_grants_and_nothing_else(
    cluster: SimCluster, args: tuple[str, ...], allowed: bool
) -> None:
    assert can_i(cluster, cluster.workdir / "nodes" / "node-1" / "plugin.kubeconfig", *args) is allowed


@pytest.mark.parametrize(("args", "allowed"), CONTROLLER_CAN, ids=[" ".join(a) for a, _ in CONTROLLER_CAN])
def test_the_controller_may_do_what_the_chart_grants_and_nothing_else(
    cluster: SimCluster, args: tuple[str, ...], allowed: bool
) -> None:
    assert can_i(cluster, cluster.workdir / "controller.kubeconfig", *args) is allowed


def a_slice(node: str, pool: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{pool}-probe"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
            "devices": [],
        },
    }


def refused(call: Any) -> str:
    with pytest.raises(ApiException) as caught:
        call()
    assert caught.value.status == 403, caught.value
    return str(caught.value.body)


def test_a_nodes_plugin_writes_only_that_nodes_slices(cluster: SimCluster) -> None:
    plugin = Client(cluster.workdir / "nodes" / "node-1" / "plugin.kubeconfig")
    try:
        message = refused(lambda: plugin.create(SLICES, a_slice("node-2", "probe-other")))
        assert "the plugin on node node-1 may only write ResourceSlices of that node, not of node node-2" in message
        theirs = cluster.client.list(SLICES, field_selector=f"spec.nodeName=node-2,spec.driver={DRIVER}")[0][0]
        labelled = {**theirs, "metadata": {**theirs["metadata"], "labels": {"taken-over-by": "node-1"}}}
        message = refused(lambda: plugin.update(SLICES, labelled))
        assert "the plugin on node node-1 may only write ResourceSlices of that node, not of node node-2" in message
        refused(lambda: plugin.delete(SLICES, None, theirs["metadata"]["name"]))
        assert cluster.client.get(SLICES, None, theirs["metadata"]["name"]) is not None
        # its own node's: allowed (the policy is no blanket refusal)
        mine = plugin.create(SLICES, a_slice("node-1", "probe-own"))
        assert plugin.delete(SLICES, None, mine["metadata"]["name"])
        message = refused(lambda: plugin.list(SECRETS, "kube-system"))
        assert "secrets is forbidden" in message
    finally:
        plugin.close()


def test_a_plugin_token_not_bound_to_a_pod_is_refused_by_the_admission_policy(cluster: SimCluster) -> None:
    kubeconfig = cluster.workdir / "unbound-plugin.kubeconfig"
    token = request_token(cluster.client, PLUGIN_SA)
    ca = (cluster.workdir / "kube" / "pki" / "ca.crt").read_bytes()
    write_kubeconfig(kubeconfig, cluster.client.configuration.host, token, ca)
    unbound = Client(kubeconfig)
    try:
        message = refused(lambda: unbound.create(SLICES, a_slice("node-1", "probe-unbound")))
        assert f"no node association found for user {PLUGIN_USER}" in message
    finally:
        unbound.close()


def test_the_controller_cannot_write_slices_or_read_secrets(cluster: SimCluster) -> None:
    controller = Client(cluster.workdir / "controller.kubeconfig")
    try:
        refused(lambda: controller.create(SLICES, a_slice("node-1", "probe-controller")))
        refused(lambda: controller.get(SECRETS, RELEASE_NAMESPACE, "anything"))
    finally:
        controller.close()
