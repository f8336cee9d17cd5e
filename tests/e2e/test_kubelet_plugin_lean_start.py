"""`migdra kubelet-plugin` starts lean: it registers with kubelet without waiting for its first publish
(here: with the API server away from the start, so no publish can succeed), serves the DRA service
meanwhile, and never imports the kubernetes client's API classes or models, whose import cost the
plugin seconds of start-up.  The imports are read from ``python -X importtime`` (names only; nothing
is timed)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from dra_driver.kubelet.calls import ClaimRef
from tests.api_outage import OutputLines, RestartableApiServer, restartable_api_server
from tests.kubelet_client import KubeletClient, short_socket_dir
from tests.plugin_command import DRIVER, NODE, kubelet_plugin_argv, kubelet_plugin_env
from tests.prepare_harness import create_claim, result

FAST_RETRIES = {"MIGDRA_API_BACKOFF_INITIAL": "0.02", "MIGDRA_API_BACKOFF_MAX": "0.1"}
# Modules whose import the plugin must not pay for: every API class and model of the client (the
# package imports some of its generated code eagerly; these it imports only when asked).
FORBIDDEN_PREFIXES = ("kubernetes.client.api.", "kubernetes.client.models.")


@dataclass
class Node:
    api: RestartableApiServer
    root: Path
    claim: ClaimRef  # allocated on this node, never prepared


@pytest.fixture
def node() -> Iterator[Node]:
    with short_socket_dir() as root, restartable_api_server(root) as server:
        server.write_kubeconfig(root / "kubeconfig")
        with server.api_client() as c:
            client.CoreV1Api(c).create_node({"metadata": {"name": NODE}})
            claim = create_claim(c, "waiting", [result("gpu-0-mig-1g10gb-19-0")])
        yield Node(server, root, claim)


def _imported(lines: list[str]) -> set[str]:
    """Module names from ``-X importtime`` lines: ``import time: self | cumulative | <indent>name``."""
    return {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:") and "|" in line}


def test_registers_and_answers_kubelet_before_any_publish_and_imports_no_client_api_classes(
    node: Node,
) -> None:
    api, root, claim = node.api, node.root, node.claim
    api.stop()  # the API server is away before the plugin starts: no publish can succeed
    process = subprocess.Popen(
        [sys.executable, "-X", "importtime", *kubelet_plugin_argv(root, root / "kubeconfig")],
        env=kubelet_plugin_env(root, list(FAST_RETRIES.items())),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    output = OutputLines(process.stdout)
    try:
        output.wait_for_line("a failed publish", lambda line: "publishing ResourceSlices failed (1 in a row)" in line)
        registration = root / "registry" / f"{DRIVER}-reg.sock"
        with KubeletClient(registration) as kubelet:
            assert kubelet.register() == "v1.DRAPlugin"  # registered although nothing is published
            unprepared = kubelet.unprepare([claim])[claim.uid]  # not in the checkpoint: nothing to do
            prepared = kubelet.prepare([claim])[claim.uid]
        assert unprepared.error == ""
        assert "cannot reach the API server" in prepared.error  # a per-claim answer, not a gRPC failure
        assert output.count(lambda line: line.startswith("migdra kubelet-plugin: serving node")) == 0

        api.start()
        output.wait_for_line("the first publish", lambda line: line.startswith("migdra kubelet-plugin: serving node"))
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        output.join()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert process.returncode == 0, output.text
    imported = _imported(output.lines)
    assert "kubeletplugin.publisher" in imported  # the parse found the plugin's own modules
    assert "kubernetes.client.rest" in imported  # and the client's transport
    assert sorted(name for name in imported if name.startswith(FORBIDDEN_PREFIXES)) == []
