"""`migdra kubelet-plugin --publish-only` as a process: publishes, keeps slices on SIGTERM, or cleans up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client

from migdra_devcluster.ports import free_port
from tests.kube_apiserver import KubeApiServer
from tests.waiting import wait_for

MIGDRA = str(Path(sys.executable).with_name("migdra"))


@pytest.fixture
def api(api_server: KubeApiServer, tmp_path: Path) -> KubeApiServer:
    api_server.write_kubeconfig(tmp_path / "kubeconfig")
    with api_server.api_client() as c:
        client.CoreV1Api(c).create_node({"metadata": {"name": "node-p"}})
    return api_server


def _slices(api: KubeApiServer) -> list[client.V1ResourceSlice]:
    with api.api_client() as c:
        return list(client.ResourceV1Api(c).list_resource_slice(field_selector="spec.nodeName=node-p").items)


def _start(tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIGDRA_")}
    return subprocess.Popen(
        [
            MIGDRA,
            "kubelet-plugin",
            "--publish-only",
            "--node-name",
            "node-p",
            "--kubeconfig",
            str(tmp_path / "kubeconfig"),
            "--nvml",
            "simulated",
            "--sim-state",
            str(tmp_path / "nvml.json"),
            "--sim-gpus",
            "H100-SXM5-80GB:2",
            *extra,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_for_slices(api: KubeApiServer, process: subprocess.Popen[str]) -> None:
    """Until the whole pool is there: the publisher writes its slices one request at a time."""

    def whole_pool() -> bool:
        assert process.poll() is None, "the plugin exited before publishing its pool"
        slices = _slices(api)
        return bool(slices) and len(slices) == slices[0].spec.pool.resource_slice_count

    wait_for("the whole pool to be published", whole_pool, timeout=30)


def test_publishes_and_keeps_the_slices_after_sigterm(api: KubeApiServer, tmp_path: Path) -> None:
    port = free_port()
    process = _start(tmp_path, "--metrics-address", f"127.0.0.1:{port}")
    try:
        _wait_for_slices(api, process)
        slices = _slices(api)
        assert len(slices) == 2
        assert sum(len(s.spec.devices or []) for s in slices) == 2 * 25  # MIG devices; no shared ones by default

        def metrics_text() -> str | None:  # the metrics are set right after the publish round that made the slices
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            return text if 'migdra_published_devices{type="mig"} 50.0' in text else None

        metrics = wait_for("the published devices in the metrics", metrics_text, timeout=10)
        assert 'migdra_published_devices{type="mig"} 50.0' in metrics
        assert "migdra_pool_generation 1.0" in metrics
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    assert len(_slices(api)) == 2  # kubelet removes them if the plugin stays away; we do not


def test_cleanup_on_exit_removes_the_slices(api: KubeApiServer, tmp_path: Path) -> None:
    process = _start(tmp_path, "--cleanup-on-exit")
    try:
        _wait_for_slices(api, process)
        assert _slices(api)
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    assert _slices(api) == []


def test_missing_node_name_is_a_clear_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIGDRA_")}
    result = subprocess.run(
        [MIGDRA, "kubelet-plugin", "--publish-only", "--kubeconfig", str(tmp_path / "k")],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2  # a usage error
    assert "--node-name" in result.stderr
    assert "MIGDRA_NODE_NAME" in result.stderr
    assert "Traceback" not in result.stderr
