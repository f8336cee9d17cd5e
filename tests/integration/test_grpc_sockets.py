"""The plugin's unix sockets: permissions, stale and foreign files, rolling-update names, concurrency, shutdown."""

from __future__ import annotations

import os
import socket
import stat
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry

from dra_driver.kubelet.calls import ClaimRef, PrepareResult
from kubeletplugin.grpc import NotASocketError, PluginServers, SocketInUseError, SocketPathError
from kubeletplugin.grpc.sockets import SocketFile
from tests.kubelet_client import KubeletClient, RecordingDraService, short_socket_dir
from tests.waiting import wait_for

DRIVER = "gpu.migdra.example.com"
CLAIM = ClaimRef(namespace="ns", name="claim", uid="uid-1")


@pytest.fixture
def base_dir() -> Iterator[Path]:
    with short_socket_dir() as path:
        yield path


def _servers(base_dir: Path, service: RecordingDraService | None = None, **kwargs: Any) -> PluginServers:
    return PluginServers(
        DRIVER,
        base_dir / "registry",
        base_dir / "plugins" / DRIVER,
        service or RecordingDraService(prepare_results={CLAIM.uid: PrepareResult()}),
        metrics_registry=CollectorRegistry(),
        **kwargs,
    )


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _dead_socket(path: Path) -> None:
    """What a crashed plugin leaves behind: a socket file nobody listens on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))


def test_sockets_are_owner_only_and_missing_directories_are_0750(base_dir: Path) -> None:
    with _servers(base_dir) as servers:
        for path in (servers.paths.registration, servers.paths.dra):
            assert stat.S_ISSOCK(os.stat(path).st_mode)
            assert _mode(path) == 0o600
        for directory in (base_dir / "registry", base_dir / "plugins", base_dir / "plugins" / DRIVER):
            assert _mode(directory) == 0o750
        assert _mode(base_dir) == 0o700  # existing directories keep their mode


def test_a_stale_socket_from_a_crashed_process_is_replaced(base_dir: Path) -> None:
    servers = _servers(base_dir)
    _dead_socket(servers.paths.registration)
    _dead_socket(servers.paths.dra)
    with servers, KubeletClient(servers.paths.registration) as kubelet:
        kubelet.register()
        assert kubelet.prepare([CLAIM]) == {CLAIM.uid: PrepareResult()}


@pytest.mark.parametrize("which", ["registration", "dra"])
def test_a_live_socket_is_refused_and_left_alone(base_dir: Path, which: str) -> None:
    servers = _servers(base_dir)
    path = getattr(servers.paths, which)
    path.parent.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as other_instance:
        other_instance.bind(str(path))
        other_instance.listen()
        with pytest.raises(SocketInUseError, match="second instance"):
            servers.start()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.connect(str(path))  # the other instance still owns its socket
    ours = servers.paths.dra if which == "registration" else servers.paths.registration
    assert not ours.exists()  # nothing of ours is left behind after the failed start


@pytest.mark.parametrize("which", ["registration", "dra"])
def test_a_file_that_is_not_a_socket_is_refused_and_left_alone(base_dir: Path, which: str) -> None:
    servers = _servers(base_dir)
    path = getattr(servers.paths, which)
    path.parent.mkdir(parents=True)
    path.write_text("precious")
    with pytest.raises(NotASocketError, match="not a socket"):
        servers.start()
    assert path.read_text() == "precious"


def test_a_socket_path_over_the_unix_limit_is_refused_clearly(base_dir: Path) -> None:
    with pytest.raises(SocketPathError, match="longer than 107 bytes"):
        SocketFile(base_dir / ("d" * 100) / "dra.sock").prepare()


def test_shutdown_removes_only_our_own_socket_files(base_dir: Path) -> None:
    servers = _servers(base_dir)
    servers.start()
    servers.stop(grace=1)
    assert not servers.paths.registration.exists()
    assert not servers.paths.dra.exists()
    assert sorted(p.name for p in (base_dir / "plugins" / DRIVER).iterdir()) == []

    replaced = SocketFile(base_dir / "replaced.sock")
    _dead_socket(replaced.path)
    replaced.secure()
    _dead_socket(base_dir / "other.sock")
    (base_dir / "other.sock").rename(replaced.path)  # another process's socket now sits at the path
    replaced.remove()
    assert replaced.path.exists()


def _until_refused(kubelet: KubeletClient, claims: Sequence[ClaimRef], timeout: float = 10.0) -> None:
    """Call unprepare until the plugin refuses it: the sign that its DRA server has begun to stop.

    Stopping deregisters first, so a call made a moment after :meth:`PluginServers.stop` began may still
    be served; one made once the DRA server stops is refused.  Bounded, so a server that keeps accepting
    work fails the test.
    """

    def refused() -> bool:
        try:
            kubelet.unprepare(claims)
        except grpc.RpcError:
            return True
        return False

    wait_for("new calls to be refused once shutdown began", refused, timeout=timeout)


def test_shutdown_deregisters_first_and_waits_for_the_call_in_flight(base_dir: Path) -> None:
    entered, release = threading.Event(), threading.Event()

    def block(operation: str, claims: Sequence[ClaimRef]) -> None:
        if operation != "prepare":
            return  # only the call in flight is held; a call served during shutdown returns at once
        entered.set()
        assert release.wait(10)

    servers = _servers(base_dir, RecordingDraService(prepare_results={CLAIM.uid: PrepareResult()}, on_call=block))
    servers.start()
    with KubeletClient(servers.paths.registration) as kubelet, ThreadPoolExecutor(2) as pool:
        kubelet.register()
        call = pool.submit(kubelet.prepare, [CLAIM])
        assert entered.wait(5)
        stopping = pool.submit(servers.stop, 10)
        _until_refused(kubelet, [CLAIM])  # no new work is accepted...
        assert not servers.paths.registration.exists()  # ...kubelet already saw us go...
        assert not call.done()  # ...while the call in flight still runs (it is held until release)
        assert not stopping.done()  # and stop waits for it
        release.set()
        assert call.result(timeout=5) == {CLAIM.uid: PrepareResult()}
        stopping.result(timeout=5)
    assert not servers.paths.dra.exists()


def test_shutdown_cancels_a_call_that_outlives_the_grace_period(base_dir: Path) -> None:
    release = threading.Event()
    entered, returned = threading.Event(), threading.Event()

    def block(operation: str, claims: Sequence[ClaimRef]) -> None:
        entered.set()
        release.wait(30)  # released only after the test; 30 s only so a broken stop cannot hang the run
        returned.set()

    servers = _servers(base_dir, RecordingDraService(on_call=block))
    servers.start()
    try:
        with KubeletClient(servers.paths.registration) as kubelet, ThreadPoolExecutor(1) as pool:
            kubelet.register()
            call = pool.submit(kubelet.prepare, [CLAIM])
            assert entered.wait(5)
            servers.stop(grace=0.3)
            assert not returned.is_set(), "stop waited for the call instead of cancelling it after the grace"
            with pytest.raises(grpc.RpcError) as raised:
                call.result(timeout=5)
            assert raised.value.code() in {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}  # kubelet retries
    finally:
        release.set()


def test_rolling_update_sockets_carry_the_pod_uid(base_dir: Path) -> None:
    with _servers(base_dir, pod_uid="pod-old") as old, _servers(base_dir, pod_uid="pod-new") as new:
        assert old.paths.registration == base_dir / "registry" / f"{DRIVER}-pod-old-reg.sock"
        assert old.paths.dra == base_dir / "plugins" / DRIVER / "dra-pod-old.sock"
        assert new.paths.dra == base_dir / "plugins" / DRIVER / "dra-pod-new.sock"
        for servers in (old, new):
            with KubeletClient(servers.paths.registration) as kubelet:
                kubelet.register()
                assert kubelet.info.endpoint == str(servers.paths.dra)
                assert kubelet.prepare([CLAIM]) == {CLAIM.uid: PrepareResult()}


@pytest.mark.parametrize("pod_uids", [("pod-old", "pod-new"), (None,)], ids=["rolling-update", "one-instance"])
def test_calls_are_not_serialised_by_the_servers(base_dir: Path, pod_uids: tuple[str | None, ...]) -> None:
    """Two calls are inside the service at once, in one instance or across the two of a rolling update.

    The prepare service locks per claim and per GPU across processes itself (kubeletplugin/prepare/
    locks.py); a call-wide lock here would queue every pod's claims behind every other pod's.  Each
    call waits at a barrier for the other: if the servers serialised them, the barrier would break
    and the calls would fail.
    """
    meeting = threading.Barrier(2, timeout=20)
    service = RecordingDraService(
        prepare_results={CLAIM.uid: PrepareResult()}, on_call=lambda operation, claims: meeting.wait()
    )
    instances = [_servers(base_dir, service, pod_uid=uid) for uid in pod_uids]
    kubelets = [KubeletClient(instance.paths.registration) for instance in instances]
    try:
        for instance in instances:
            instance.start()
        for kubelet in kubelets:
            kubelet.register()
        callers = kubelets * (2 // len(kubelets))
        with ThreadPoolExecutor(2) as pool:
            results = [future.result(timeout=30) for future in [pool.submit(k.prepare, [CLAIM]) for k in callers]]
    finally:
        for kubelet in kubelets:
            kubelet.close()
        for instance in instances:
            instance.stop(grace=0)
    assert results == [{CLAIM.uid: PrepareResult()}] * 2
    assert not meeting.broken
