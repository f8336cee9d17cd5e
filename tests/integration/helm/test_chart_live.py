"""The chart's simulated mode, run: `migdra kubelet-plugin` and `migdra controller` as processes with
exactly the environment the rendered DaemonSet and Deployment give their containers, each as its
ServiceAccount, against the local API server with RBAC on and only the chart's roles bound.

A claim allocated on the node is prepared over kubelet's socket and ends Ready (the plugin's write)
and Reserved (the controller's); slices are published; the gRPC probe answers SERVING. Any
permission the code needs and the chart lacks is a 403 and fails this test; the negative checks show
the roles are not wider than that.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_driver.kube.client import Client, Kind
from migdra_devcluster.apiserver import LocalAPIServer
from tests.integration.helm.chart import CHART, NAMESPACE, Rendered, bound_rules, container_env, render
from tests.kubelet_client import KubeletClient, short_socket_dir
from tests.plugin_command import DRIVER, NODE
from tests.prepare_harness import create_claim, read_claim_json, result
from tests.waiting import wait_for

MIGDRA = str(Path(sys.executable).with_name("migdra"))
PLUGIN_SA = "migdra-kubelet-plugin"
CONTROLLER_SA = "migdra-controller"
TOKENS = {
    "admin-token": ("admin", "system:masters"),
    "plugin-token": (f"system:serviceaccount:{NAMESPACE}:{PLUGIN_SA}", ""),
    "controller-token": (f"system:serviceaccount:{NAMESPACE}:{CONTROLLER_SA}", ""),
}
pytestmark = pytest.mark.api_server(
    tokens=[f"{token},{user},uid-{i},{groups}" for i, (token, (user, groups)) in enumerate(TOKENS.items())],
    authorization="RBAC",
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Installed:
    api: LocalAPIServer
    root: Path
    rendered: Rendered
    healthcheck_port: int

    def client(self, token: str) -> client.ApiClient:
        configuration = client.Configuration(
            host=self.api.url, api_key={"BearerToken": token}, api_key_prefix={"BearerToken": "Bearer"}
        )
        configuration.ssl_ca_cert = str(self.api.ca_cert_path)
        return client.ApiClient(configuration)

    def start(self, kind: str, container: str, token: str, kubeconfig_variable: str) -> subprocess.Popen[str]:
        """The container's command with its rendered environment (downward API values filled in)."""
        workload = self.rendered.one(kind)
        (spec,) = [c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == container]
        downward = {"spec.nodeName": NODE, "metadata.uid": str(uuid.uuid4()), "metadata.name": f"{container}-0"}
        mounted = self._configmap_mounts(workload, spec)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MIGDRA_")}
        for name, rendered in container_env(workload, container).items():
            value = downward[rendered["fieldRef"]["fieldPath"]] if isinstance(rendered, dict) else rendered
            for mount_path, local in mounted.items():  # a file of a mounted ConfigMap: where it lies here
                if value.startswith(mount_path + "/"):
                    value = str(local) + value.removeprefix(mount_path)
            env[name] = value
        env[kubeconfig_variable] = str(self.api.write_kubeconfig(self.root / f"{container}.kubeconfig", token=token))
        return subprocess.Popen(
            [MIGDRA, *spec["args"]], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    def _configmap_mounts(self, workload: dict[str, Any], spec: dict[str, Any]) -> dict[str, Path]:
        """Each ConfigMap volume the container mounts, written out as kubelet would: mount path -> here."""
        config_maps = {obj["metadata"]["name"]: obj for obj in self.rendered.of_kind("ConfigMap")}
        volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"].get("volumes") or [] if "configMap" in v}
        mounted = {}
        for mount in spec.get("volumeMounts") or []:
            if mount["name"] in volumes:
                local = self.root / "configmaps" / mount["name"]
                local.mkdir(parents=True, exist_ok=True)
                for key, text in config_maps[volumes[mount["name"]]["configMap"]["name"]]["data"].items():
                    (local / key).write_text(text)
                mounted[mount["mountPath"]] = local
        return mounted


@pytest.fixture
def installed(api_server: LocalAPIServer) -> Iterator[Installed]:
    with short_socket_dir() as root:
        healthcheck = _free_port()
        rendered = render(
            CHART / "ci" / "simulated-values.yaml",
            sets=[
                f"kubeletDir={root}/k",
                f"cdiDir={root}/cdi",
                f"kubeletPlugin.healthcheckPort={healthcheck}",
                f"kubeletPlugin.metrics.port={_free_port()}",
                f"controller.metrics.port={_free_port()}",
                "simulated.gpus=H100-SXM5-80GB:2",
            ],
        )
        (root / "k" / "plugins_registry").mkdir(parents=True)  # kubelet's, before any plugin
        installed = Installed(api_server, root, rendered, healthcheck)
        with installed.client("admin-token") as admin:
            core = client.CoreV1Api(admin)
            core.create_namespace({"metadata": {"name": NAMESPACE}})
            core.create_node({"metadata": {"name": NODE}})
            for obj in rendered.objects:
                _create(api_server, admin, obj)
        yield installed


def _create(api: LocalAPIServer, api_client: client.ApiClient, obj: dict[str, Any]) -> None:
    """Create one rendered object as the admin, on the path the server serves its kind at."""
    resource = api.registry.by_kind(obj["apiVersion"], obj["kind"])
    assert resource is not None, f"{obj['kind']} is not served"
    kind = Kind(resource.group, resource.version, resource.plural, resource.namespaced, resource.kind)
    Client(api_client=api_client, timeout=30).create(kind, obj)


def _stop(process: subprocess.Popen[str]) -> str:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    return output


def _serving(port: int) -> bool:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
        except grpc.RpcError:
            return False
    return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)


def test_the_chart_runs_its_components_with_only_the_permissions_it_grants(installed: Installed) -> None:
    plugin = installed.start("DaemonSet", "kubelet-plugin", "plugin-token", "MIGDRA_KUBECONFIG")
    controller = installed.start("Deployment", "controller", "controller-token", "MIGDRA_CONTROLLER_KUBECONFIG")
    outputs: dict[str, str] = {}
    try:
        _exercise(installed)
    except AssertionError as failure:
        outputs = {"plugin": _stop(plugin), "controller": _stop(controller)}
        raise AssertionError(
            f"{failure}\n--- plugin:\n{outputs['plugin']}\n--- controller:\n{outputs['controller']}"
        ) from failure
    outputs = {"plugin": _stop(plugin), "controller": _stop(controller)}
    _every_permission_is_used(installed)
    for name, output in outputs.items():
        assert "Forbidden" not in output, f"{name}:\n{output}"
        assert " 403" not in output, f"{name}:\n{output}"
        assert "Traceback" not in output, f"{name}:\n{output}"


def _exercise(installed: Installed) -> None:
    """Slices, the probe, a prepared claim Ready and Reserved, Events, the Lease."""
    with installed.client("admin-token") as admin:
        resource = client.ResourceV1Api(admin)
        wait_for(
            "the plugin's slices",
            lambda: resource.list_resource_slice(field_selector=f"spec.nodeName={NODE}").items or None,
        )
        wait_for(
            "the plugin's gRPC health check to answer SERVING", lambda: _serving(installed.healthcheck_port) or None
        )
        registry = installed.root / "k" / "plugins_registry"
        (registration,) = wait_for(
            "the registration socket", lambda: list(registry.glob(f"{DRIVER}-*-reg.sock")) or None
        )
        claim = create_claim(admin, "live", [result("gpu-0-mig-1g10gb-19-6")])
        with KubeletClient(registration) as kubelet:
            kubelet.register()
            prepared = kubelet.prepare([claim])[claim.uid]
        assert prepared.error == ""

        def conditions() -> set[str] | None:
            devices = read_claim_json(admin, claim).get("status", {}).get("devices") or []
            found = {c["type"] for d in devices for c in d.get("conditions") or [] if c["status"] == "True"}
            return found if {"Ready", "Reserved"} <= found else None

        wait_for("Ready (plugin) and Reserved (controller) on the claim", conditions)
        core = client.CoreV1Api(admin)

        def reasons() -> set[str] | None:  # both write their Events after the status, from a queue
            found = {e.reason for e in core.list_namespaced_event("default").items}
            return found if {"MigDevicesPrepared", "Reserved"} <= found else None

        wait_for("the plugin's and the controller's Events on the claim", reasons)
        leases = client.CoordinationV1Api(admin).list_namespaced_lease(NAMESPACE).items
        assert [lease.metadata.name for lease in leases] == [f"{DRIVER}-controller"]


# Granted permissions this run may not exercise, each with the path that needs it.
NOT_EXERCISED = {
    PLUGIN_SA: {
        ("resource.k8s.io", "resourceslices", "update"),  # a changed pool (rescan, placement, taints)
        ("resource.k8s.io", "resourceslices", "delete"),  # fewer slices, or --cleanup-on-exit
        ("", "events", "patch"),  # a repeated Event (a prepare failing alike again)
        ("resource.k8s.io", "resourceclaims/driver", "associated-node:patch"),  # 1.36's check, not evaluated here
    },
    CONTROLLER_SA: {
        ("resource.k8s.io", "resourceclaims", "get"),  # re-read after a 409 on a status write
        ("", "events", "patch"),  # a repeated Event
        ("resource.k8s.io", "resourceclaims/driver", "arbitrary-node:patch"),  # 1.36's check, not evaluated here
    },
}


def _every_permission_is_used(installed: Installed) -> None:
    """What each component did (the authorizer's decisions) is what the chart grants it, but for the
    permissions of paths this run does not take: a rule nobody uses is a rule too many."""
    assert installed.api.authorizer is not None
    decisions = installed.api.authorizer.decisions()
    for account in (PLUGIN_SA, CONTROLLER_SA):
        user = f"system:serviceaccount:{NAMESPACE}:{account}"
        used = {(group, resource, verb) for who, verb, group, resource, _ in decisions if who == user}
        granted = {(group, resource, verb) for group, resource, verb, _ in bound_rules(installed.rendered, account)}
        assert used <= granted, f"{account} was refused {used - granted}"
        # (whether a path of the list runs depends on timing: a 409, a re-publish)
        assert granted - used <= NOT_EXERCISED[account], f"{account}: granted, never used: {granted - used}"


@pytest.mark.parametrize(
    ("token", "call"),
    [
        ("plugin-token", lambda api: client.CoreV1Api(api).list_namespaced_pod("default")),
        ("plugin-token", lambda api: client.CoreV1Api(api).list_namespaced_config_map(NAMESPACE)),
        ("plugin-token", lambda api: client.CoordinationV1Api(api).list_namespaced_lease(NAMESPACE)),
        ("plugin-token", lambda api: client.CoreV1Api(api).patch_node(NODE, {"metadata": {"labels": {"x": "y"}}})),
        ("controller-token", lambda api: client.ResourceV1Api(api).delete_collection_resource_slice()),
        ("controller-token", lambda api: client.CoreV1Api(api).read_node(NODE)),
        (
            "controller-token",
            lambda api: client.CoordinationV1Api(api).read_namespaced_lease("someone-elses", NAMESPACE),
        ),
    ],
    ids=[
        "plugin-pods",
        "plugin-configmaps",
        "plugin-leases",
        "plugin-node-write",
        "controller-slices",
        "controller-nodes",
        "controller-other-lease",
    ],
)
def test_the_chart_grants_nothing_beyond_that(installed: Installed, token: str, call: Any) -> None:
    with installed.client(token) as api, pytest.raises(ApiException) as refused:
        call(api)
    assert refused.value.status == 403
    assert 'is forbidden: User \\"system:serviceaccount:' in str(refused.value.body)
