"""The kubelet-facing gRPC services over real unix sockets, driven by the test kubelet.

Covers registration (what kubelet learns, version choice, a rejection made visible), DRAPlugin v1
and v1beta1 giving identical answers from one DraService, per-claim failure reporting, and the
health stream.  Socket handling and shutdown are in test_grpc_sockets.py.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry

from dra_driver.kubelet.calls import ClaimRef, PreparedDevice, PrepareResult, UnprepareResult
from dra_driver.kubelet.protos import dra_v1_pb2
from kubeletplugin.grpc import PluginServers, RegistrationStatus
from tests.kubelet_client import KubeletClient, RecordingDraService, RegistrationRejected, short_socket_dir

DRIVER = "gpu.migdra.example.com"
CLAIM_A = ClaimRef(namespace="team-a", name="train", uid="uid-a")
CLAIM_B = ClaimRef(namespace="team-a", name="eval", uid="uid-b")
DEVICE_A = PreparedDevice(
    pool_name="node-1",
    device_name="gpu-0-mig-1g10gb-0",
    request_names=("gpu",),
    cdi_device_ids=("k8s.gpu.migdra.example.com/mig=uid-a-gpu-0-mig-1g10gb-0",),
)
DEVICE_B = PreparedDevice(pool_name="node-1", device_name="gpu-1-mig-3g40gb-4")  # all requests, no CDI


@pytest.fixture
def base_dir() -> Iterator[Path]:
    with short_socket_dir() as path:
        yield path


def _servers(
    base_dir: Path, service: RecordingDraService, metrics_registry: CollectorRegistry | None = None, **kwargs: Any
) -> PluginServers:
    return PluginServers(
        DRIVER,
        base_dir / "plugins_registry",
        base_dir / "plugins" / DRIVER,
        service,
        metrics_registry=metrics_registry or CollectorRegistry(),
        **kwargs,
    )


def _registrations(registry: CollectorRegistry, registered: str) -> float | None:
    return registry.get_sample_value("migdra_registration_status_total", {"registered": registered})


def test_register_tells_kubelet_the_driver_endpoint_and_versions(base_dir: Path) -> None:
    metrics = CollectorRegistry()
    with (
        _servers(base_dir, RecordingDraService(), metrics_registry=metrics) as servers,
        KubeletClient(servers.paths.registration) as kubelet,
    ):
        assert servers.registration.status is None
        assert kubelet.register() == "v1.DRAPlugin"  # 1.34+: the first of the plugin's list it knows
        assert kubelet.info.type == "DRAPlugin"
        assert kubelet.info.name == DRIVER
        assert kubelet.info.endpoint == str(base_dir / "plugins" / DRIVER / "dra.sock")
        assert list(kubelet.info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
        assert servers.registration.wait(timeout=5) == RegistrationStatus(registered=True)
        assert _registrations(metrics, "true") == 1
        assert _registrations(metrics, "false") == 0


def test_a_v1beta1_only_kubelet_chooses_v1beta1(base_dir: Path) -> None:
    with (
        _servers(base_dir, RecordingDraService()) as servers,
        KubeletClient(servers.paths.registration, versions=("v1beta1.DRAPlugin",)) as kubelet,
    ):
        assert kubelet.register() == "v1beta1.DRAPlugin"


def test_a_rejected_registration_is_visible_in_status_and_metric(base_dir: Path) -> None:
    metrics = CollectorRegistry()
    with (
        _servers(base_dir, RecordingDraService(), metrics_registry=metrics) as servers,
        KubeletClient(servers.paths.registration, versions=("v1alpha3.NodeService",)) as kubelet,
    ):
        with pytest.raises(RegistrationRejected):
            kubelet.register()
        status = servers.registration.wait(timeout=5)
        assert status is not None
        assert not status.registered
        assert "none of services supported by the plugin (v1.DRAPlugin, v1beta1.DRAPlugin)" in status.error
        assert status.describe().startswith("kubelet rejected us: none of services")
        assert _registrations(metrics, "false") == 1
        assert _registrations(metrics, "true") == 0


def test_the_last_registration_status_wins(base_dir: Path) -> None:
    metrics = CollectorRegistry()
    with _servers(base_dir, RecordingDraService(), metrics_registry=metrics) as servers:
        with (
            KubeletClient(servers.paths.registration, reject_with="driver name is in use") as kubelet,
            pytest.raises(RegistrationRejected),
        ):
            kubelet.register()
        assert servers.registration.status == RegistrationStatus(registered=False, error="driver name is in use")
        with KubeletClient(servers.paths.registration) as kubelet:
            kubelet.register()  # kubelet retries the registration later
        assert servers.registration.status == RegistrationStatus(registered=True)
        assert (_registrations(metrics, "false"), _registrations(metrics, "true")) == (1, 1)


@pytest.mark.parametrize("versions", [("v1.DRAPlugin",), ("v1beta1.DRAPlugin",)], ids=["v1", "v1beta1"])
def test_prepare_and_unprepare_give_the_service_results_on_each_version(base_dir: Path, versions: tuple[str]) -> None:
    service = RecordingDraService(
        prepare_results={"uid-a": PrepareResult(devices=(DEVICE_A,)), "uid-b": PrepareResult(devices=(DEVICE_B,))},
        unprepare_results={"uid-a": UnprepareResult(), "uid-b": UnprepareResult()},
    )
    with (
        _servers(base_dir, service) as servers,
        KubeletClient(servers.paths.registration, versions=versions) as kubelet,
    ):
        assert kubelet.register() == versions[0]
        assert kubelet.prepare([CLAIM_A, CLAIM_B]) == {
            "uid-a": PrepareResult(devices=(DEVICE_A,)),
            "uid-b": PrepareResult(devices=(DEVICE_B,)),
        }
        assert kubelet.unprepare([CLAIM_A, CLAIM_B]) == {"uid-a": UnprepareResult(), "uid-b": UnprepareResult()}
    assert service.calls == [("prepare", (CLAIM_A, CLAIM_B)), ("unprepare", (CLAIM_A, CLAIM_B))]


def test_v1_and_v1beta1_answer_identically(base_dir: Path) -> None:
    service = RecordingDraService(
        prepare_results={
            "uid-a": PrepareResult(devices=(DEVICE_A, DEVICE_B)),
            "uid-b": PrepareResult(error="claim team-a/eval: no free 3g.40gb placement on node-1"),
        },
        unprepare_results={"uid-a": UnprepareResult(), "uid-b": UnprepareResult(error="GPU 1 is busy")},
    )
    answers = []
    with _servers(base_dir, service) as servers:
        for versions in [("v1.DRAPlugin",), ("v1beta1.DRAPlugin",)]:
            with KubeletClient(servers.paths.registration, versions=versions) as kubelet:
                kubelet.register()
                raw = kubelet.prepare_raw([CLAIM_A, CLAIM_B])
                answers.append((raw.SerializeToString(deterministic=True), kubelet.unprepare([CLAIM_A, CLAIM_B])))
    assert answers[0] == answers[1]  # byte for byte: one implementation behind both versions


def test_a_failed_claim_does_not_fail_the_others(base_dir: Path) -> None:
    service = RecordingDraService(
        prepare_results={
            "uid-a": PrepareResult(devices=(DEVICE_A,)),
            "uid-b": PrepareResult(devices=(DEVICE_B,), error="claim team-a/eval: GPU 1 has MIG mode disabled"),
        },
        unprepare_results={"uid-a": UnprepareResult(error="CDI spec not writable"), "uid-b": UnprepareResult()},
    )
    with _servers(base_dir, service) as servers, KubeletClient(servers.paths.registration) as kubelet:
        kubelet.register()
        assert kubelet.prepare([CLAIM_A, CLAIM_B]) == {
            "uid-a": PrepareResult(devices=(DEVICE_A,)),
            # kubelet ignores the devices of a failed claim; they are not sent at all
            "uid-b": PrepareResult(error="claim team-a/eval: GPU 1 has MIG mode disabled"),
        }
        assert kubelet.unprepare([CLAIM_A, CLAIM_B]) == {
            "uid-a": UnprepareResult(error="CDI spec not writable"),
            "uid-b": UnprepareResult(),
        }


@pytest.mark.parametrize("versions", [("v1.DRAPlugin",), ("v1beta1.DRAPlugin",)], ids=["v1", "v1beta1"])
def test_a_service_exception_becomes_an_error_for_every_claim_of_the_call(
    base_dir: Path, versions: tuple[str], caplog: pytest.LogCaptureFixture
) -> None:
    service = RecordingDraService(raise_for=frozenset({"uid-b"}))
    with (
        _servers(base_dir, service) as servers,
        KubeletClient(servers.paths.registration, versions=versions) as kubelet,
    ):
        kubelet.register()
        with caplog.at_level(logging.ERROR, logger="kubeletplugin.grpc.dra"):
            prepared = kubelet.prepare([CLAIM_A, CLAIM_B])  # no grpc.RpcError: kubelet would drop everything
            unprepared = kubelet.unprepare([CLAIM_A, CLAIM_B])
    assert set(prepared) == set(unprepared) == {"uid-a", "uid-b"}
    for claim in (CLAIM_A, CLAIM_B):
        assert not prepared[claim.uid].devices
        for error in (prepared[claim.uid].error, unprepared[claim.uid].error):
            assert f"{claim.namespace}/{claim.name} (uid {claim.uid})" in error
            assert "RuntimeError: NVML call failed: GPU is lost" in error
    tracebacks = [r for r in caplog.records if r.exc_info is not None]
    assert len(tracebacks) == 2  # one per failed call, with the traceback


def test_every_requested_claim_gets_exactly_one_entry(base_dir: Path) -> None:
    service = RecordingDraService(
        # nothing for uid-b; an entry for a claim kubelet did not send
        prepare_results={"uid-a": PrepareResult(devices=(DEVICE_A,)), "uid-z": PrepareResult()},
    )
    with _servers(base_dir, service) as servers, KubeletClient(servers.paths.registration) as kubelet:
        kubelet.register()
        prepared = kubelet.prepare([CLAIM_A, CLAIM_B])
        unprepared = kubelet.unprepare([CLAIM_A])
    assert set(prepared) == {"uid-a", "uid-b"}
    assert prepared["uid-a"] == PrepareResult(devices=(DEVICE_A,))
    assert "team-a/eval (uid uid-b): the driver returned no result" in prepared["uid-b"].error
    assert "the driver returned no result" in unprepared["uid-a"].error


def test_share_id_reaches_a_v1_kubelet_and_fails_the_claim_on_v1beta1(base_dir: Path) -> None:
    shared = PreparedDevice(pool_name="node-1", device_name="gpu-0", share_id="7f3c0c2e-51a4-4f4e-9a53-0b1f3d2e8c11")
    service = RecordingDraService(
        prepare_results={"uid-a": PrepareResult(devices=(shared,)), "uid-b": PrepareResult(devices=(DEVICE_B,))}
    )
    with _servers(base_dir, service) as servers:
        with KubeletClient(servers.paths.registration) as kubelet:
            kubelet.register()
            assert kubelet.prepare([CLAIM_A])["uid-a"] == PrepareResult(devices=(shared,))
        with KubeletClient(servers.paths.registration, versions=("v1beta1.DRAPlugin",)) as kubelet:
            kubelet.register()
            prepared = kubelet.prepare([CLAIM_A, CLAIM_B])
    assert not prepared["uid-a"].devices
    assert "share_id" in prepared["uid-a"].error
    assert "gpu-0" in prepared["uid-a"].error
    assert prepared["uid-b"] == PrepareResult(devices=(DEVICE_B,))


def test_a_malformed_share_id_over_grpc_fails_that_claim_alone_naming_the_field(base_dir: Path) -> None:
    malformed = PreparedDevice(pool_name="node-1", device_name="gpu-0", share_id="7F3C0C2E-51A4-4F4E-9A53-0B1F3D2E8C11")
    service = RecordingDraService(
        prepare_results={"uid-a": PrepareResult(devices=(malformed,)), "uid-b": PrepareResult(devices=(DEVICE_B,))}
    )
    with _servers(base_dir, service) as servers, KubeletClient(servers.paths.registration) as kubelet:
        kubelet.register()
        prepared = kubelet.prepare([CLAIM_A, CLAIM_B])
    assert prepared["uid-a"].devices == ()
    assert prepared["uid-a"].error.startswith("claim uid-a: devices[0].share_id: '7F3C0C2E-")
    assert "is not a UUID in normalized form" in prepared["uid-a"].error
    assert prepared["uid-b"] == PrepareResult(devices=(DEVICE_B,))


class _Devices:
    """A health source the test changes while the stream is open."""

    def __init__(self) -> None:
        self.devices: list[tuple[str, str, bool | None]] = [
            ("node-1", "gpu-0-mig-1g10gb-0", True),
            ("node-1", "gpu-1-mig-3g40gb-4", None),
        ]

    def __call__(self) -> list[tuple[str, str, bool | None]]:
        return list(self.devices)


def test_health_stream_sends_the_device_list_then_changes(base_dir: Path) -> None:
    source = _Devices()
    with (
        # No resend within the test: a second message can only be the change.
        _servers(
            base_dir, RecordingDraService(), health=source, health_interval=3600, health_poll_interval=0.02
        ) as servers,
        KubeletClient(servers.paths.registration) as kubelet,
    ):
        kubelet.register()
        assert list(kubelet.info.supported_versions) == [
            "v1.DRAPlugin",
            "v1beta1.DRAPlugin",
            "v1alpha1.DRAResourceHealth",
        ]
        before = int(time.time())
        stream = kubelet.watch_health(timeout=10)
        first = next(stream)
        assert before <= first[0].last_updated_time <= time.time()  # stamped when sent
        assert [(d.pool_name, d.device_name, d.health) for d in first] == [
            ("node-1", "gpu-0-mig-1g10gb-0", "HEALTHY"),
            ("node-1", "gpu-1-mig-3g40gb-4", "UNKNOWN"),
        ]
        source.devices[0] = ("node-1", "gpu-0-mig-1g10gb-0", False)
        second = next(stream)  # within the stream's 10 s deadline, long before the hour's resend
        assert [d.health for d in second] == ["UNHEALTHY", "UNKNOWN"]
        stream.close()


def test_health_stream_resends_an_unchanged_list_every_interval(base_dir: Path) -> None:
    # Judged by the server's own send stamps (whole seconds), not by when this thread got to read the
    # messages: resends at least 1.1 s apart always carry stamps a second or more apart, while a resend
    # on every 20 ms poll would give equal stamps.
    with (
        _servers(
            base_dir, RecordingDraService(), health=_Devices(), health_interval=1.1, health_poll_interval=0.02
        ) as servers,
        KubeletClient(servers.paths.registration) as kubelet,
    ):
        kubelet.register()
        stream = kubelet.watch_health(timeout=20)
        messages = [next(stream) for _ in range(3)]  # unchanged, so resends: the interval's
        stream.close()
    assert all([d.health for d in m] == ["HEALTHY", "UNKNOWN"] for m in messages)
    stamps = [m[0].last_updated_time for m in messages]
    assert all(later - earlier >= 1 for earlier, later in itertools.pairwise(stamps)), stamps  # not every poll


def test_health_stream_ends_when_the_servers_stop(base_dir: Path) -> None:
    servers = _servers(base_dir, RecordingDraService(), health=_Devices(), health_poll_interval=0.02)
    servers.start()
    try:
        with KubeletClient(servers.paths.registration) as kubelet:
            kubelet.register()
            stream = kubelet.watch_health(timeout=10)
            next(stream)
            servers.stop(grace=10)
            # The stream ended on its own (OK), not cancelled when a grace it held up ran out.
            with pytest.raises(StopIteration):
                next(stream)
    finally:
        servers.stop()


def test_without_a_health_source_the_health_service_is_absent(base_dir: Path) -> None:
    with _servers(base_dir, RecordingDraService()) as servers, KubeletClient(servers.paths.registration) as kubelet:
        kubelet.register()
        assert "v1alpha1.DRAResourceHealth" not in kubelet.info.supported_versions
        kubelet.info.supported_versions.append("v1alpha1.DRAResourceHealth")  # call it anyway
        with pytest.raises(grpc.RpcError) as raised:
            next(kubelet.watch_health(timeout=5))
    assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_a_failing_health_source_ends_the_stream_with_unavailable(base_dir: Path) -> None:
    def broken() -> list[tuple[str, str, bool | None]]:
        raise RuntimeError("NVML event set lost")

    with (
        _servers(base_dir, RecordingDraService(), health=broken, health_poll_interval=0.02) as servers,
        KubeletClient(servers.paths.registration) as kubelet,
    ):
        kubelet.register()
        with pytest.raises(grpc.RpcError) as raised:
            next(kubelet.watch_health(timeout=5))
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE  # kubelet reopens the stream after 5 s
    assert "NVML event set lost" in raised.value.details()


def test_a_request_larger_than_grpcs_4_mib_default_is_served(base_dir: Path) -> None:
    """kubelet (grpc-go, no size options) sends requests of up to 2 GiB - 1 bytes; one NodePrepareResources
    carries every claim of a pod.  gRPC's 4 MiB default receive limit would fail the whole call."""
    claims = [ClaimRef("team-a", "c" * 253, f"{i:08d}-0000-4000-8000-000000000000") for i in range(19_000)]
    size = dra_v1_pb2.NodePrepareResourcesRequest(
        claims=[dra_v1_pb2.Claim(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]
    ).ByteSize()
    assert size > 5 * 2**20  # the size of the request that failed, well over the 4 MiB default
    service = RecordingDraService(prepare_results={c.uid: PrepareResult() for c in claims})
    with _servers(base_dir, service) as servers, KubeletClient(servers.paths.registration) as kubelet:
        kubelet.register()
        results = kubelet.prepare(claims)  # the response (UIDs, no devices) stays under kubelet's 4 MiB
    assert len(results) == len(claims)
    assert set(results.values()) == {PrepareResult()}
