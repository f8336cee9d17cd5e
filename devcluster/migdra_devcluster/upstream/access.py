"""migdra's components on the upstream control plane log in as they would in a cluster installed with the
Helm chart: the chart is rendered by the real helm, its ServiceAccounts, RBAC and the node-scoped
ValidatingAdmissionPolicy are applied as they are, and each component gets a token of its own
ServiceAccount.

- The node plugin of node X: a Pod made from the chart's DaemonSet pod template, bound to X (what the
  DaemonSet controller would create), and a token bound to that Pod, so the token carries the node
  (``authentication.kubernetes.io/node-name``) that the admission policy checks.  Written to
  ``<workdir>/nodes/X/plugin.kubeconfig``.
- The reservation controller: a token of its ServiceAccount, ``<workdir>/controller.kubeconfig``; its
  Lease lives in the release namespace, where the chart's Role allows it.

Nothing here widens what the chart grants: a missing permission shows as the real API server's 403.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dra_driver.durable import write_file_atomically
from dra_driver.errors import ConfigurationError
from dra_driver.kube.client import PODS, Client, Kind
from dra_driver.kube.failures import describe_failure
from migdra_devcluster.kubeconfig import write_kubeconfig

CHART_DIR = Path(__file__).resolve().parents[3] / "helm" / "migdra"
HELM = Path(__file__).resolve().parents[3] / ".tools" / "helm" / "helm"
RELEASE = "migdra"
RELEASE_NAMESPACE = "migdra-system"
TOKEN_SECONDS = 7 * 24 * 3600
"""Tokens outlive any development cluster; a real kubelet would rotate its projected tokens instead."""

NAMESPACES = Kind("", "v1", "namespaces", namespaced=False, kind="Namespace")
SERVICE_ACCOUNTS = Kind("", "v1", "serviceaccounts", namespaced=True, kind="ServiceAccount")
_APPLIED_KINDS = {
    kind.kind: kind
    for kind in (
        SERVICE_ACCOUNTS,
        Kind("rbac.authorization.k8s.io", "v1", "clusterroles", namespaced=False, kind="ClusterRole"),
        Kind("rbac.authorization.k8s.io", "v1", "clusterrolebindings", namespaced=False, kind="ClusterRoleBinding"),
        Kind("rbac.authorization.k8s.io", "v1", "roles", namespaced=True, kind="Role"),
        Kind("rbac.authorization.k8s.io", "v1", "rolebindings", namespaced=True, kind="RoleBinding"),
        Kind(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicies",
            namespaced=False,
            kind="ValidatingAdmissionPolicy",
        ),
        Kind(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicybindings",
            namespaced=False,
            kind="ValidatingAdmissionPolicyBinding",
        ),
    )
}
"""What of the chart is applied: identities, their permissions and the admission policy.  The workloads
(DaemonSet, Deployment) are not: ``sim up`` runs migdra's processes itself, on simulated GPUs."""


@dataclass(frozen=True)
class ChartAccess:
    """The chart's objects that grant access, and the names of its two ServiceAccounts."""

    objects: list[dict[str, Any]]
    plugin_pod_template: dict[str, Any]
    plugin_service_account: str
    controller_service_account: str


def helm_binary() -> Path:
    """The real helm: ``make tools`` puts it in ``.tools/helm``; else the one on PATH."""
    if HELM.is_file():
        return HELM
    found = shutil.which("helm")
    if found is None:
        raise ConfigurationError(f"migdra sim up renders the Helm chart: no helm at {HELM} (run `make tools`)")
    return Path(found)


def render_chart_access(driver_name: str, realize_before_bind: bool) -> ChartAccess:
    """``helm template`` of the chart for this driver, reduced to what :func:`grant_chart_access` applies."""
    command = [
        str(helm_binary()),
        "template",
        RELEASE,
        str(CHART_DIR),
        "--namespace",
        RELEASE_NAMESPACE,
        "--set",
        f"driverName={driver_name}",
        "--set",
        "simulated.enabled=true",
        "--set",
        f"realizeBeforeBind={str(realize_before_bind).lower()}",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigurationError(f"helm template of {CHART_DIR} failed: {last}")
    documents = [d for d in yaml.safe_load_all(result.stdout) if isinstance(d, dict)]
    (daemonset,) = [d for d in documents if d.get("kind") == "DaemonSet"]
    plugin_sa = daemonset["spec"]["template"]["spec"]["serviceAccountName"]
    (deployment,) = [d for d in documents if d.get("kind") == "Deployment"]
    controller_sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    applied = [d for d in documents if d.get("kind") in _APPLIED_KINDS]
    return ChartAccess(applied, daemonset["spec"]["template"], plugin_sa, controller_sa)


def grant_chart_access(client: Client, access: ChartAccess) -> None:
    """Create the release namespace and the chart's access objects (as an admin installing the chart)."""
    client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RELEASE_NAMESPACE}})
    for document in access.objects:
        client.create(_APPLIED_KINDS[document["kind"]], document)


def plugin_pod(
    access: ChartAccess, node: str, namespace: str = RELEASE_NAMESPACE, stand_in_image: str | None = None
) -> dict[str, Any]:
    """The plugin's Pod on ``node``, from the DaemonSet's template (as the DaemonSet controller makes it,
    but bound directly: it is never scheduled), in the release's ``namespace``.

    On a real node (``stand_in_image``) its kubelet runs the Pod, and the plugin's image cannot be pulled
    here: the Pod keeps the template's identity (service account, labels, tolerations) but runs a stand-in
    container of ``stand_in_image`` that sleeps, without the template's host mounts; the plugin itself runs
    beside it as a host process with a token bound to this Pod."""
    template = copy.deepcopy(access.plugin_pod_template)
    spec = template["spec"]
    spec["nodeName"] = node
    spec.pop("affinity", None)
    if stand_in_image is not None:
        first = spec["containers"][0]
        spec = {
            key: value
            for key, value in spec.items()
            if key in ("nodeName", "serviceAccountName", "tolerations", "priorityClassName")
        }
        spec["automountServiceAccountToken"] = False
        spec["terminationGracePeriodSeconds"] = 1
        spec["containers"] = [
            {
                "name": first["name"],
                "image": stand_in_image,
                "imagePullPolicy": "Never",
                "command": ["sleep", "2147483647"],
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{RELEASE}-kubelet-plugin-{node}",
            "namespace": namespace,
            "labels": (template.get("metadata") or {}).get("labels") or {},
        },
        "spec": spec,
    }


def request_token(
    client: Client, service_account: str, bound_pod: dict[str, Any] | None = None, namespace: str = RELEASE_NAMESPACE
) -> str:
    """A TokenRequest for ``service_account`` in the release's ``namespace``, bound to ``bound_pod`` when given."""
    spec: dict[str, Any] = {"expirationSeconds": TOKEN_SECONDS}
    if bound_pod is not None:
        meta = bound_pod["metadata"]
        spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    answer = client.create_subresource(SERVICE_ACCOUNTS, namespace, service_account, "token", body)
    return str(answer["status"]["token"])


def plugin_kubeconfig_path(workdir: Path, node: str) -> Path:
    return workdir / "nodes" / node / "plugin.kubeconfig"


PLUGIN_TOKEN_FILE = "plugin.token"
"""The plugin's pod-bound token, beside its kubeconfig (``tokenFile``): rewritten when the pod is
recreated, read again by the running plugin (as kubelet rewrites a projected token)."""


def issue_plugin_pod(
    client: Client, access: ChartAccess, workdir: Path, node: str, stand_in_image: str | None = None
) -> str:
    """Create the plugin's Pod on ``node`` and write a token bound to it into its token file (atomically:
    the running plugin reads it whenever it changes); the Pod's UID."""
    pod = client.create(PODS, plugin_pod(access, node, stand_in_image=stand_in_image))
    token = request_token(client, access.plugin_service_account, pod)
    path = plugin_kubeconfig_path(workdir, node).with_name(PLUGIN_TOKEN_FILE)
    write_file_atomically(path, token.encode(), mode=0o600, sync=False)
    return str(pod["metadata"]["uid"])


def controller_kubeconfig_path(workdir: Path) -> Path:
    return workdir / "controller.kubeconfig"


def write_component_kubeconfigs(
    client: Client,
    access: ChartAccess,
    nodes: list[str],
    workdir: Path,
    url: str,
    ca_pem: bytes,
    stand_ins: Mapping[str, str] | None = None,
) -> None:
    """Each node's plugin Pod, its token file and the kubeconfig naming it, and the controller's kubeconfig.
    ``stand_ins``: node -> stand-in image, for real nodes (:func:`plugin_pod`)."""
    for node in nodes:
        issue_plugin_pod(client, access, workdir, node, (stand_ins or {}).get(node))
        write_kubeconfig(plugin_kubeconfig_path(workdir, node), url, None, ca_pem, token_file=PLUGIN_TOKEN_FILE)
    token = request_token(client, access.controller_service_account)
    write_kubeconfig(controller_kubeconfig_path(workdir), url, token, ca_pem)


class PluginPodKeeper:
    """What the chart's DaemonSet and kubelet do for the plugin's identity, in ``sim up``: a plugin Pod
    that is deleted (``kubectl delete pods --all -A``) is made again, and a token bound to the new Pod
    replaces the old one in the plugin's token file -- the old token dies with its Pod, and without
    this every plugin would answer 401 until ``sim down``.  One thread, a look every ``interval``
    seconds; a failed look is tried again at the next."""

    def __init__(
        self,
        client: Client,
        access: ChartAccess,
        workdir: Path,
        nodes: list[str],
        progress: Callable[[str], None],
        interval: float = 1.0,
        stand_ins: Mapping[str, str] | None = None,
    ) -> None:
        self._client = client
        self._access = access
        self._workdir = workdir
        self._nodes = nodes
        self._progress = progress
        self._interval = interval
        self._stand_ins = dict(stand_ins or {})
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="plugin-pod-keeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stopping.wait(self._interval):
            try:
                self.keep()
            except Exception as exc:  # the API server restarting, say: look again next time
                self._progress(f"plugin pods: {describe_failure(exc)}; looking again")

    def keep(self) -> list[str]:
        """Make the plugin Pod of every node that has none (one being deleted is waited for); the nodes."""
        pods, _ = self._client.list(PODS, RELEASE_NAMESPACE)
        present = {p["metadata"]["name"] for p in pods}
        made = []
        for node in self._nodes:
            if plugin_pod(self._access, node)["metadata"]["name"] in present:
                continue
            uid = issue_plugin_pod(self._client, self._access, self._workdir, node, self._stand_ins.get(node))
            self._progress(f"{node}: the plugin's pod was deleted; made it again ({uid}) with a new token")
            made.append(node)
        return made
