"""A test kubelet: talks to a plugin the way kubelet does, with the generated stubs over real unix sockets.

Reusable by any test that needs kubelet's side of the node-local contract (docs/kubelet-grpc.md):

    with KubeletClient(paths.registration) as kubelet:
        kubelet.register()                      # GetInfo, version choice, NotifyRegistrationStatus
        kubelet.prepare([ClaimRef(...)])        # NodePrepareResources on the chosen version
        kubelet.unprepare([ClaimRef(...)])
        next(kubelet.watch_health())            # v1alpha1.DRAResourceHealth/NodeWatchResources

Version choice is that of kubelet 1.34+: the first entry of the plugin's ``supported_versions`` that
this kubelet knows; none known means the registration fails with kubelet's message.  Build a
v1beta1-only (1.33-like) kubelet with ``KubeletClient(path, versions=("v1beta1.DRAPlugin",))``.
Results come back as the plain types of :mod:`dra_driver.kubelet.calls`, so answers of both versions
compare directly.

Also here, for the plugin side of such tests: :class:`RecordingDraService` (canned results, records
every call) and :func:`short_socket_dir` (unix socket paths must stay under 108 bytes, which
pytest's ``tmp_path`` often exceeds).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc

from dra_driver.kubelet.calls import ClaimRef, PrepareResult, UnprepareResult
from dra_driver.kubelet.protos import dra_health_v1alpha1_pb2 as health_pb2
from dra_driver.kubelet.protos import dra_health_v1alpha1_pb2_grpc as health_grpc
from dra_driver.kubelet.protos import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
from migdra_devcluster.kubelet.pluginclient import KNOWN_VERSIONS, RegistrationRejected, prepare_result, register

DRA_PLUGIN_VERSIONS = KNOWN_VERSIONS  # what kubelet 1.34/1.35 knows
HEALTH_VERSION = "v1alpha1.DRAResourceHealth"
_STUBS = {
    "v1.DRAPlugin": (dra_v1_pb2, dra_v1_pb2_grpc),
    "v1beta1.DRAPlugin": (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc),
}
CALL_TIMEOUT_SECONDS = 45.0  # kubelet's defaultClientCallTimeout


@dataclass(frozen=True)
class DeviceHealthReport:
    pool_name: str
    device_name: str
    health: str  # "HEALTHY", "UNHEALTHY", "UNKNOWN"
    last_updated_time: int


class KubeletClient:
    """One kubelet's view of one plugin."""

    def __init__(
        self,
        registration_socket: Path,
        *,
        versions: Sequence[str] = DRA_PLUGIN_VERSIONS,
        reject_with: str | None = None,
        timeout: float = CALL_TIMEOUT_SECONDS,
    ) -> None:
        """``versions``: the DRAPlugin versions this kubelet speaks; ``reject_with``: refuse the plugin
        with this error even if the versions match (like a failing ``ValidatePlugin``)."""
        self.registration_socket = registration_socket
        self.versions = tuple(versions)
        self.reject_with = reject_with
        self.timeout = timeout
        self.info: Any = None
        self.version: str | None = None
        self._channels: list[grpc.Channel] = []
        self._dra_channel: grpc.Channel | None = None

    def _channel(self, path: str) -> grpc.Channel:
        channel = grpc.insecure_channel(f"unix://{path}")
        self._channels.append(channel)
        return channel

    def register(self) -> str:
        """GetInfo, choose a version, NotifyRegistrationStatus; returns the chosen version string.

        The handshake and the version choice are the simulated kubelet's
        (:func:`migdra_devcluster.kubelet.pluginclient.register`), so both kubelets agree.
        Raises :class:`RegistrationRejected` after notifying the plugin of the rejection.
        """
        channel = self._channel(str(self.registration_socket))
        try:
            self.info, plain = register(
                channel,
                self.registration_socket,
                known=self.versions,
                reject_with=self.reject_with,
                timeout=self.timeout,
            )
        except RegistrationRejected as exc:
            self.info = exc.info
            raise
        self.version = plain.version
        self._dra_channel = self._channel(plain.endpoint)
        return plain.version

    def _dra(self) -> tuple[Any, Any]:
        if self.version is None or self._dra_channel is None:
            raise RuntimeError("register() first")
        pb2, pb2_grpc = _STUBS[self.version]
        return pb2, pb2_grpc.DRAPluginStub(self._dra_channel)

    def prepare_raw(self, claims: Sequence[ClaimRef]) -> Any:
        """NodePrepareResources on the chosen version; the response message as received."""
        pb2, stub = self._dra()
        request = pb2.NodePrepareResourcesRequest(
            claims=[pb2.Claim(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]
        )
        return stub.NodePrepareResources(request, timeout=self.timeout)

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        """NodePrepareResources; the response in plain types, keyed by claim UID."""
        response = self.prepare_raw(claims)
        return {uid: prepare_result(entry) for uid, entry in response.claims.items()}

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, UnprepareResult]:
        """NodeUnprepareResources on the chosen version, keyed by claim UID."""
        pb2, stub = self._dra()
        request = pb2.NodeUnprepareResourcesRequest(
            claims=[pb2.Claim(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]
        )
        response = stub.NodeUnprepareResources(request, timeout=self.timeout)
        return {uid: UnprepareResult(error=entry.error) for uid, entry in response.claims.items()}

    def watch_health(self, timeout: float | None = None) -> Generator[list[DeviceHealthReport], None, None]:
        """NodeWatchResources; yields each message's device list.  Cancel by closing the iterator."""
        if self.info is None or HEALTH_VERSION not in self.info.supported_versions:
            raise RuntimeError("the plugin does not advertise the health service (register() first)")
        stub = health_grpc.DRAResourceHealthStub(self._dra_channel)
        call = stub.NodeWatchResources(health_pb2.NodeWatchResourcesRequest(), timeout=timeout)
        try:
            for response in call:
                yield [
                    DeviceHealthReport(
                        pool_name=d.device.pool_name,
                        device_name=d.device.device_name,
                        health=health_pb2.HealthStatus.Name(d.health),
                        last_updated_time=d.last_updated_time,
                    )
                    for d in response.devices
                ]
        finally:
            call.cancel()

    def close(self) -> None:
        for channel in self._channels:
            channel.close()
        self._channels.clear()

    def __enter__(self) -> KubeletClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


@contextmanager
def short_socket_dir() -> Iterator[Path]:
    """A fresh, short temporary directory (removed afterwards) to put plugin sockets under."""
    path = Path(tempfile.mkdtemp(prefix="migdra-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@dataclass
class RecordingDraService:
    """A :class:`~dra_driver.kubelet.calls.DraService` for tests of the gRPC boundary.

    Returns ``prepare_results`` / ``unprepare_results`` for the UIDs it has (claims it has none
    for are left out of the result); raises ``error`` for any call containing a UID of
    ``raise_for``; runs ``on_call(operation, claims)`` first (to block or time a call).
    """

    prepare_results: Mapping[str, PrepareResult] = field(default_factory=dict)
    unprepare_results: Mapping[str, UnprepareResult] = field(default_factory=dict)
    raise_for: frozenset[str] = frozenset()
    error: Exception = field(default_factory=lambda: RuntimeError("NVML call failed: GPU is lost"))
    on_call: Callable[[str, Sequence[ClaimRef]], None] | None = None
    calls: list[tuple[str, tuple[ClaimRef, ...]]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _record(self, operation: str, claims: Sequence[ClaimRef]) -> None:
        with self._lock:
            self.calls.append((operation, tuple(claims)))
        if self.on_call is not None:
            self.on_call(operation, claims)
        if any(claim.uid in self.raise_for for claim in claims):
            raise self.error

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        self._record("prepare", claims)
        return {c.uid: self.prepare_results[c.uid] for c in claims if c.uid in self.prepare_results}

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, UnprepareResult]:
        self._record("unprepare", claims)
        return {c.uid: self.unprepare_results[c.uid] for c in claims if c.uid in self.unprepare_results}
