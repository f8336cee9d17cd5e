"""The chart's simulated mode, run: `migdra kubelet-plugin` and `migdra controller` as processes with
exactly the environment the rendered DaemonSet and Deployment give their containers, each logged in as
its ServiceAccount (a token from kube-apiserver's TokenRequest; the plugin's bound to a Pod made from
the DaemonSet's template on its node, as the chart's admission policy demands), against the real
kube-apiserver with every rendered object applied by the real kubectl.

A claim allocated on the node is prepared over kubelet's socket and ends Ready (the plugin's write)
and Reserved (the controller's); slices are published; the gRPC probe answers SERVING; neither
component is refused anything.  What each role allows and refuses, and that every granted rule is
used, is judged on a whole cluster by tests/kube/test_access_on_kube.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from kubernetes import client

from dra_driver.kube.client import Client
from dra_driver.kube.config import load_kubeconfig_file
from migdra_devcluster.ports import free_port
from migdra_devcluster.upstream.access import ChartAccess, plugin_pod, request_token
from tests.integration.helm.chart import CHART, NAMESPACE, Rendered, container_env, render
from tests.integration.helm.test_chart_apply import Kubectl
from tests.kube_apiserver import KubeApiServer
from tests.kubelet_client import KubeletClient, short_socket_dir
from tests.plugin_command import DRIVER, NODE
from tests.prepare_harness import create_claim, read_claim_json, result
from tests.waiting import wait_for

MIGDRA = str(Path(sys.executable).with_name("migdra"))


@dataclass
class Installed:
    api: KubeApiServer
    root: Path
    rendered: Rendered
    healthcheck_port: int
    kubeconfigs: dict[str, Path]  # "plugin", "controller": each logs in as its ServiceAccount

    def client(self, who: str) -> client.ApiClient:
        return client.ApiClient(load_kubeconfig_file(self.kubeconfigs[who], what=f"{who}'s kubeconfig"))

    def start(self, kind: str, container: str, who: str, kubeconfig_variable: str) -> subprocess.Popen[str]:
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
        env[kubeconfig_variable] = str(self.kubeconfigs[who])
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
def installed(api_server: KubeApiServer) -> Iterator[Installed]:
    with short_socket_dir() as root:
        healthcheck = free_port()
        rendered = render(
            CHART / "ci" / "simulated-values.yaml",
            sets=[
                f"kubeletDir={root}/k",
                f"cdiDir={root}/cdi",
                f"kubeletPlugin.healthcheckPort={healthcheck}",
                f"kubeletPlugin.metrics.port={free_port()}",
                f"controller.metrics.port={free_port()}",
                "simulated.gpus=H100-SXM5-80GB:2",
            ],
        )
        (root / "k" / "plugins_registry").mkdir(parents=True)  # kubelet's, before any plugin
        with api_server.api_client() as admin:
            core = client.CoreV1Api(admin)
            core.create_namespace({"metadata": {"name": NAMESPACE}})
            core.create_node({"metadata": {"name": NODE}})
            kubectl = Kubectl(api_server, root / "kubectl")
            applied = kubectl("create", "-f", "-", stdin=yaml.safe_dump_all(rendered.objects))
            assert applied.returncode == 0, applied.stderr
            kubeconfigs = _component_kubeconfigs(api_server, Client(api_client=admin), rendered, root)
        yield Installed(api_server, root, rendered, healthcheck, kubeconfigs)


def _component_kubeconfigs(api: KubeApiServer, admin: Client, rendered: Rendered, root: Path) -> dict[str, Path]:
    """Each component's kubeconfig with a token of its ServiceAccount; the plugin's bound to its Pod."""
    template = rendered.one("DaemonSet")["spec"]["template"]
    controller_sa = rendered.one("Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    access = ChartAccess([], template, template["spec"]["serviceAccountName"], controller_sa)
    pod = client.CoreV1Api(admin.api_client).create_namespaced_pod(NAMESPACE, plugin_pod(access, NODE, NAMESPACE))
    bound = {"metadata": {"name": pod.metadata.name, "uid": pod.metadata.uid}}
    tokens = {
        "plugin": request_token(admin, access.plugin_service_account, bound, NAMESPACE),
        "controller": request_token(admin, controller_sa, None, NAMESPACE),
    }
    return {who: api.write_token_kubeconfig(root / f"{who}.kubeconfig", token) for who, token in tokens.items()}


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
    plugin = installed.start("DaemonSet", "kubelet-plugin", "plugin", "MIGDRA_KUBECONFIG")
    controller = installed.start("Deployment", "controller", "controller", "MIGDRA_CONTROLLER_KUBECONFIG")
    outputs: dict[str, str] = {}
    try:
        _exercise(installed)
    except AssertionError as failure:
        outputs = {"plugin": _stop(plugin), "controller": _stop(controller)}
        raise AssertionError(
            f"{failure}\n--- plugin:\n{outputs['plugin']}\n--- controller:\n{outputs['controller']}"
        ) from failure
    outputs = {"plugin": _stop(plugin), "controller": _stop(controller)}
    for name, output in outputs.items():
        assert "Forbidden" not in output, f"{name}:\n{output}"
        assert " 403" not in output, f"{name}:\n{output}"
        assert "Traceback" not in output, f"{name}:\n{output}"


def _exercise(installed: Installed) -> None:
    """Slices, the probe, a prepared claim Ready and Reserved, Events, the Lease."""
    with installed.api.api_client() as admin:
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
