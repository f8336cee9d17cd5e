"""The plugin's gRPC liveness check (grpc.health.v1.Health on TCP) over real sockets: SERVING exactly
while kubelet's registration and DRA sockets answer as kubelet calls them and the extra check passes;
NOT_SERVING when a socket is gone or its server is stuck; a taken port is one clear start-up error."""

from __future__ import annotations

import logging
import re
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry, Gauge

from dra_driver.errors import ConfigurationError
from dra_driver.kubelet.calls import ClaimRef
from dra_driver.serving import serving_metrics
from kubeletplugin.grpc import PluginServers
from kubeletplugin.grpc.liveness import FLAG, probe_sockets, serving_liveness
from migdra_devcluster.ports import free_port
from tests.kubelet_client import KubeletClient, RecordingDraService, short_socket_dir

DRIVER = "gpu.migdra.example.com"


@pytest.fixture
def base_dir() -> Iterator[Path]:
    with short_socket_dir() as path:
        yield path


def _check(port: int) -> int:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        response = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
    return int(response.status)


def test_serving_while_the_sockets_answer_and_not_when_they_do_not(
    base_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kubeletplugin.grpc.registration")
    held, release = threading.Event(), threading.Event()

    def hold_real_claims(operation: str, claims: object) -> None:
        if not claims:
            return
        held.set()
        if not release.wait(timeout=30):  # a stuck prepare: the probe's own call is never held
            raise AssertionError("never released")

    service = RecordingDraService(on_call=hold_real_claims)
    servers = PluginServers(
        DRIVER,
        base_dir / "registry",
        base_dir / "plugins",
        service,
        metrics_registry=CollectorRegistry(),
        max_workers=1,
    )
    extra: list[str] = []
    port = free_port()

    def problem() -> str | None:
        return probe_sockets(servers.paths, timeout=1.0) or (extra[0] if extra else None)

    with serving_liveness(f"127.0.0.1:{port}", problem) as servicer:
        assert servicer is not None
        servers.start()
        try:
            assert _check(port) == health_pb2.HealthCheckResponse.SERVING
            # the probe's GetInfo is not logged as kubelet's (every few seconds at -v otherwise)
            assert not [r for r in caplog.records if "asked for plugin info" in r.getMessage()]
            extra.append("the publish loop has finished no round for 400 s")
            assert _check(port) == health_pb2.HealthCheckResponse.NOT_SERVING
            extra.clear()
            assert _check(port) == health_pb2.HealthCheckResponse.SERVING

            # Every DRA worker busy with a prepare that never ends: the DRA socket no longer answers.
            stuck = threading.Thread(target=_prepare_one_claim, args=(servers,))
            stuck.start()
            try:
                assert held.wait(timeout=10)
                assert _check(port) == health_pb2.HealthCheckResponse.NOT_SERVING
                assert "DRA socket" in (servicer.refresh() or "")
            finally:
                release.set()
                stuck.join(timeout=30)
        finally:
            servers.stop(grace=0)
        assert "registration socket" in (servicer.refresh() or "")
        assert _check(port) == health_pb2.HealthCheckResponse.NOT_SERVING


def _prepare_one_claim(servers: PluginServers) -> None:
    """kubelet's NodePrepareResources of one claim, over the DRA socket (it holds the one DRA worker)."""
    with KubeletClient(servers.paths.registration, timeout=30) as kubelet:
        kubelet.register()
        kubelet.prepare([ClaimRef(namespace="default", name="stuck", uid="uid-stuck")])


def test_a_taken_port_is_one_line_naming_the_flag() -> None:
    with closing(socket.socket()) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        taken_message = "^" + re.escape(f"{FLAG} {address!r}: cannot listen there")
        with pytest.raises(ConfigurationError, match=taken_message), serving_liveness(address, lambda: None):
            pass


def test_off_when_unset() -> None:
    with serving_liveness(None, lambda: "never asked") as servicer:
        assert servicer is None


def test_healthz_beside_the_metrics_says_what_is_wrong() -> None:
    """The controller's liveness: ``/healthz`` on the metrics port, 200 or 503 with the reason."""
    registry = CollectorRegistry()
    Gauge("migdra_controller_leader", "leader", registry=registry).set(1)
    wrong: list[str] = []
    port = free_port()
    with serving_metrics(f"127.0.0.1:{port}", registry, healthz=lambda: wrong[0] if wrong else None):
        assert _get(port, "/healthz") == (200, "ok")
        wrong.append("reservations: its thread is not running")
        assert _get(port, "/healthz") == (503, "reservations: its thread is not running")
        status, body = _get(port, "/metrics")
        assert status == 200
        assert "migdra_controller_leader 1.0" in body  # the metrics are still served beside it


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return int(answer.status), answer.read().decode().strip()
    except urllib.error.HTTPError as error:
        with error:
            return int(error.code), error.read().decode().strip()
