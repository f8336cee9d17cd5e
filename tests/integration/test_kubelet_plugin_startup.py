"""`migdra kubelet-plugin` start-up as a process: a bad flag stops it before it touches the API server or
the hardware (no ResourceSlices, no simulated state), and a good start says so in exactly one line."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from kubernetes import client

from dra_driver.kube.client import Client
from kubeletplugin.control_plane_version import ControlPlaneVersion
from tests.kube_apiserver import KubeApiServer
from tests.kubelet_client import short_socket_dir

MIGDRA = str(Path(sys.executable).with_name("migdra"))
NODE = "node-s"


@pytest.fixture
def root() -> Iterator[Path]:
    with short_socket_dir() as directory:  # unix socket paths must stay short
        yield directory


@pytest.fixture
def api(api_server: KubeApiServer, root: Path) -> KubeApiServer:
    api_server.write_kubeconfig(root / "kubeconfig")
    with api_server.api_client() as c:
        client.CoreV1Api(c).create_node({"metadata": {"name": NODE}})
    return api_server


def _slices(api: KubeApiServer) -> list[client.V1ResourceSlice]:
    with api.api_client() as c:
        return list(client.ResourceV1Api(c).list_resource_slice().items)


def _command(root: Path, *extra: str, node_name: str = NODE) -> list[str]:
    return [
        MIGDRA,
        "kubelet-plugin",
        "--node-name",
        node_name,
        "--kubeconfig",
        str(root / "kubeconfig"),
        "--registry-dir",
        str(root / "registry"),
        "--plugin-dir",
        str(root / "plugin"),
        "--cdi-dir",
        str(root / "cdi"),
        "--sim-state",
        str(root / "nvml.json"),
        "--sim-gpus",
        "H100-SXM5-80GB:2",
        *extra,
    ]


def _environment(root: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MIGDRA_")}
    return {**base, "MIGDRA_PROC_ROOT": str(root / "proc")}


@pytest.fixture
def busy_port() -> Iterator[int]:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        yield int(server.getsockname()[1])


BAD_FLAGS = {
    "node name": (("--node-name", "My_Node"), "--node-name (MIGDRA_NODE_NAME)"),
    "driver name": (("--driver-name", "GPU_Driver"), "--driver-name (MIGDRA_DRIVER_NAME)"),
    "state dir": (("--state-dir", "/proc/migdra/state"), "--state-dir (MIGDRA_STATE_DIR)"),
    "cdi dir": (("--cdi-dir", "{root}/kubeconfig/cdi"), "--cdi-dir (MIGDRA_CDI_DIR)"),
    "registry dir": (("--registry-dir", "/proc/migdra/registry"), "--registry-dir (MIGDRA_REGISTRY_DIR)"),
    "plugin dir": (("--plugin-dir", "{root}/" + "p" * 120), "(the unix socket limit)"),
    "metrics address": (("--metrics-address", "localhost:http"), "--metrics-address (MIGDRA_METRICS_ADDRESS)"),
    "metrics port in use": (("--metrics-address", "127.0.0.1:{busy_port}"), "cannot listen there"),
    "device config": (("--device-config", "{root}/kubeconfig"), "invalid device model configuration"),
}


@pytest.mark.parametrize(("flags", "named"), BAD_FLAGS.values(), ids=list(BAD_FLAGS))
def test_a_bad_flag_stops_the_plugin_before_the_api_or_the_hardware(
    api: KubeApiServer, root: Path, busy_port: int, flags: tuple[str, ...], named: str
) -> None:
    filled = [f.replace("{root}", str(root)).replace("{busy_port}", str(busy_port)) for f in flags]
    command = _command(root, *filled)
    if "--node-name" in filled:
        command = _command(root, *filled[2:], node_name=filled[1])
    result = subprocess.run(command, env=_environment(root), capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("migdra: error: "), result.stderr
    assert named in lines[0]
    assert _slices(api) == []  # nothing half-published
    assert not (root / "nvml.json").exists()  # the (simulated) hardware was never opened
    assert not (root / "registry").exists() or not any((root / "registry").iterdir())  # nothing served


def test_a_good_start_says_so_in_one_line_and_nothing_else(api: KubeApiServer, root: Path) -> None:
    process = subprocess.Popen(
        _command(root), env=_environment(root), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()  # blocks until the plugin has published and serves kubelet
        admin = Client(api.kubeconfig_path)
        try:
            scale = ControlPlaneVersion.parse(admin.server_version()).scale_problem()
        finally:
            admin.close()
        if scale is not None:  # an API server older than 1.37: said once, first (kubernetes#138917)
            assert " WARNING " in line, line
            assert scale in line, line
            line = process.stderr.readline()
        assert line.startswith(
            f"migdra kubelet-plugin: serving node {NODE} for gpu.migdra.io: 2 GPUs, 50 devices"
        )  # 25 per H100 (no shared devices by default)
        assert f"to {api.url}; kubelet registration socket {root / 'registry' / 'gpu.migdra.io-reg.sock'}" in line
        assert len(_slices(api)) == 2
        time.sleep(0.5)  # and then it is quiet
    finally:
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert stdout == ""
    assert stderr == ""
