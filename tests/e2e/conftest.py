"""Fixtures of the end-to-end tests: the node plugin as a process beside a local API server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.e2e.test_kubelet_plugin_process import NODE, PluginProcess
from tests.kube_apiserver import KubeApiServer
from tests.kubelet_client import short_socket_dir


@pytest.fixture
def plugin(api_server: KubeApiServer) -> Iterator[PluginProcess]:
    with short_socket_dir() as root:
        kubeconfig = root / "kubeconfig"
        api_server.write_kubeconfig(kubeconfig)
        with api_server.api_client() as c:
            client.CoreV1Api(c).create_node({"metadata": {"name": NODE}})
        runner = PluginProcess(api_server, root, kubeconfig)
        try:
            yield runner
        finally:
            for process in runner.processes:
                if process.poll() is None:
                    process.kill()
                process.communicate(timeout=10)
