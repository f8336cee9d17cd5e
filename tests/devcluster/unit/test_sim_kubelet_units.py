"""The simulated kubelet's pure parts: version choice and plugin validation, retry bookkeeping, and which
files of the registration directory count as plugin sockets."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.kube.failures import BackoffPolicy
from dra_driver.kubelet.protos import pluginregistration_v1_pb2 as registration_pb2
from migdra_devcluster.kubelet.pluginclient import KNOWN_VERSIONS, choose_version, validate_plugin_info
from migdra_devcluster.kubelet.pluginwatcher import _socket_identities
from migdra_devcluster.kubelet.retries import RetryTracker
from tests.kubelet_client import short_socket_dir


@pytest.mark.parametrize(
    ("supported", "chosen"),
    [
        (["v1.DRAPlugin", "v1beta1.DRAPlugin"], "v1.DRAPlugin"),
        (["v1beta1.DRAPlugin", "v1.DRAPlugin"], "v1beta1.DRAPlugin"),  # the plugin's order decides
        (["v1alpha1.DRAResourceHealth", "v1beta1.DRAPlugin"], "v1beta1.DRAPlugin"),  # unknown ones skipped
        (["1.0.0", "v1alpha3.NodeService"], None),  # 1.33's legacy fallback is gone since 1.34
        ([], None),
    ],
)
def test_version_choice_is_the_plugins_first_known_entry(supported: list[str], chosen: str | None) -> None:
    assert choose_version(supported) == chosen


def test_a_v1beta1_only_kubelet_chooses_v1beta1() -> None:
    assert choose_version(["v1.DRAPlugin", "v1beta1.DRAPlugin"], ("v1beta1.DRAPlugin",)) == "v1beta1.DRAPlugin"


def _info(kind: str = "DRAPlugin", name: str = "gpu.migdra.io", versions: tuple[str, ...] = KNOWN_VERSIONS) -> object:
    return registration_pb2.PluginInfo(type=kind, name=name, endpoint="/x/dra.sock", supported_versions=versions)


def test_validation_messages_are_kubelets() -> None:
    assert validate_plugin_info(_info()) is None
    assert validate_plugin_info(_info(versions=("v1alpha3.NodeService",))) == (
        "none of services supported by the plugin (v1alpha3.NodeService) "
        "are supported by the kubelet (v1.DRAPlugin, v1beta1.DRAPlugin)"
    )
    assert "not handled by the DRA handler" in str(validate_plugin_info(_info(kind="CSIPlugin")))
    assert "driver name" in str(validate_plugin_info(_info(name="")))


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_retry_tracker_backs_off_per_key_and_resets_on_success() -> None:
    clock = FakeClock()
    retries = RetryTracker(BackoffPolicy(initial=1.0, maximum=4.0), clock=clock)
    key = ("prepare", "pod-a")
    assert retries.due(key)
    assert retries.next_due() is None

    delays = [retries.failed(key) for _ in range(5)]
    ceilings = [1.0, 2.0, 4.0, 4.0, 4.0]  # capped at the maximum
    assert all(c / 2 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    assert retries.failures(key) == 5
    assert not retries.due(key)
    assert retries.due(("prepare", "pod-b")), "other keys are not held back"
    assert retries.next_due() == pytest.approx(delays[-1])

    clock.now += delays[-1]
    assert retries.due(key)
    assert retries.next_due() == 0.0

    retries.succeeded(key)
    assert retries.failures(key) == 0
    assert 0.5 <= retries.failed(key) <= 1.0, "after a success the backoff starts from the beginning"


def test_retry_tracker_next_due_is_the_earliest_and_forget_drops_gone_keys() -> None:
    clock = FakeClock()
    retries = RetryTracker(BackoffPolicy(initial=2.0, maximum=2.0), clock=clock)
    retries.failed("slow")
    clock.now += 1.5
    late = retries.failed("late")
    due = retries.next_due()
    assert due is not None
    assert due <= late
    retries.forget(lambda key: key == "late")
    assert retries.failures("slow") == 0
    assert retries.next_due() == pytest.approx(late)


@pytest.fixture
def registry() -> Iterator[Path]:
    with short_socket_dir() as path:
        yield path


def test_only_visible_sockets_count_and_a_replaced_socket_is_a_new_identity(registry: Path) -> None:
    bound: list[socket.socket] = []

    def bind(name: str) -> None:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(registry / name))
        bound.append(server)

    try:
        bind("gpu.migdra.io-reg.sock")
        bind(".hidden-reg.sock")
        (registry / "notes.txt").write_text("not a socket")
        (registry / "subdir").mkdir()
        first = _socket_identities(registry)
        assert list(first) == [registry / "gpu.migdra.io-reg.sock"]

        bind("new.sock.tmp")  # a new file while the old one still exists, so surely another inode
        (registry / "new.sock.tmp").replace(registry / "gpu.migdra.io-reg.sock")
        second = _socket_identities(registry)
        assert list(second) == list(first)
        assert second != first, "a plugin that restarted between two polls is noticed"
    finally:
        for server in bound:
            server.close()
    assert _socket_identities(registry / "missing") == {}
