"""The kubelet-facing gRPC servers of the node plugin, started and stopped as one unit.

Owns the lifecycle: free and bind the sockets, restrict them to the owner, serve, and on shutdown
deregister first, let in-flight calls finish within a grace period, then remove our socket files.

Concurrency model: synchronous ``grpc.server`` instances, each with its own thread pool -- a small
one for registration on ``<registry dir>/<driver>-reg.sock`` and one of ``max_workers`` threads
for DRAPlugin v1 + v1beta1 (and the optional health stream) on ``<plugin dir>/dra.sock``.  Handlers
run on those worker threads and call the :class:`~dra_driver.kubelet.calls.DraService` directly, so
the service must be thread-safe; a health stream holds one DRA worker for as long as it is open.
Nothing here uses asyncio.  Two servers rather than one: the registration socket is removed (which
deregisters us from kubelet) before the DRA server stops, so kubelet stops sending new work while
the calls it already sent still complete.

Rolling-update mode (``pod_uid`` given): socket names carry the pod UID so two instances can overlap
during a DaemonSet update.  Calls are not serialised here (the Go helper's ``serialize.lock``): the
prepare service locks each claim and each GPU across processes itself, so the claims of different
pods keep running in parallel in both processes.

Message sizes: kubelet's gRPC client (grpc-go, no size options) sends requests of up to 2 GiB - 1
bytes (grpc-go's default send limit, ``math.MaxInt32``) -- one NodePrepareResources carries every
claim of a pod for this driver -- so the DRA server accepts that much instead of gRPC's 4 MiB
default receive limit, which would fail the whole call.  kubelet reads responses of at most 4 MiB
(grpc-go's default receive limit); ours are not limited further on this side.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc
from prometheus_client import CollectorRegistry

from dra_driver.kubelet.calls import DraService
from dra_driver.kubelet.protos import dra_health_v1alpha1_pb2_grpc as health_grpc
from dra_driver.kubelet.protos import dra_v1_pb2_grpc as v1_grpc
from dra_driver.kubelet.protos import dra_v1beta1_pb2_grpc as v1beta1_grpc
from dra_driver.kubelet.protos import pluginregistration_v1_pb2_grpc as registration_grpc
from kubeletplugin.grpc.dra import SUPPORTED_VERSIONS, DraPluginServicer, DraPluginV1beta1Servicer
from kubeletplugin.grpc.health import HEALTH_SERVICE_VERSION, DeviceHealthSource, HealthServicer
from kubeletplugin.grpc.registration import RegistrationServicer
from kubeletplugin.grpc.sockets import PluginSocketPaths, SocketFile, SocketPathError, plugin_socket_paths

log = logging.getLogger(__name__)

DEFAULT_GRACE_SECONDS = 30.0
_REGISTRATION_WORKERS = 2
# The most kubelet sends (grpc-go's default client send limit, math.MaxInt32): see the module docstring.
KUBELET_MAX_MESSAGE_BYTES = 2**31 - 1
_DRA_SERVER_OPTIONS = (
    ("grpc.max_receive_message_length", KUBELET_MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", KUBELET_MAX_MESSAGE_BYTES),
)


class _UnixServer:
    """One ``grpc.server`` on one unix socket, with the thread pool it owns."""

    def __init__(
        self, name: str, socket_file: SocketFile, max_workers: int, options: tuple[tuple[str, int], ...] = ()
    ) -> None:
        self.name = name
        self.socket_file = socket_file
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=f"grpc-{name}")
        self.server: Any = grpc.server(self._executor, options=list(options))

    def start(self) -> None:
        self.socket_file.prepare()
        # gRPC binds here, not in start(): restrict the file before anyone is served on it.
        if self.server.add_insecure_port(f"unix://{self.socket_file.path}") == 0:
            raise SocketPathError(f"cannot listen on {self.socket_file.path}")
        self.socket_file.secure()
        self.server.start()
        log.info("serving %s on %s", self.name, self.socket_file.path)

    def stop(self, grace: float | None) -> None:
        """Refuse new calls at once, give running ones ``grace`` seconds, then cancel them."""
        deadline = None if grace is None else time.monotonic() + grace
        self.server.stop(grace).wait()
        # Handlers still running after a cancel cannot be interrupted; do not wait for them forever.
        finished_in_time = deadline is not None and time.monotonic() < deadline
        self._executor.shutdown(wait=finished_in_time, cancel_futures=True)
        self.socket_file.remove()
        log.info("stopped %s on %s", self.name, self.socket_file.path)

    def abandon(self) -> None:
        """Clean up after a failed start."""
        self.server.stop(None).wait()
        self._executor.shutdown(wait=False, cancel_futures=True)
        self.socket_file.remove()


class PluginServers:
    """Registration + DRA (+ optional health) servers of one driver on one node.

    ``with PluginServers(...) as servers:`` starts them and stops them with the default grace.
    ``servers.registration.status`` / ``.wait()`` tell whether kubelet accepted the plugin.
    """

    def __init__(
        self,
        driver_name: str,
        registry_dir: Path,
        plugin_dir: Path,
        service: DraService,
        *,
        metrics_registry: CollectorRegistry,
        pod_uid: str | None = None,
        health: DeviceHealthSource | None = None,
        health_interval: float = 10.0,
        health_poll_interval: float = 1.0,
        max_workers: int = 16,
    ) -> None:
        self.paths: PluginSocketPaths = plugin_socket_paths(driver_name, registry_dir, plugin_dir, pod_uid)
        self.dra = DraPluginServicer(service)
        self.health = (
            HealthServicer(health, interval=health_interval, poll_interval=health_poll_interval)
            if health is not None
            else None
        )
        versions = [*SUPPORTED_VERSIONS, *([HEALTH_SERVICE_VERSION] if self.health is not None else [])]
        self.registration = RegistrationServicer(driver_name, self.paths.dra, versions, metrics_registry)
        self._max_workers = max_workers
        self._started = False
        self._registration_server: _UnixServer | None = None
        self._dra_server: _UnixServer | None = None

    def start(self) -> None:
        """Serve DRA first, then register: kubelet may call the DRA socket as soon as it registers us.

        Raises :class:`~kubeletplugin.grpc.sockets.SocketPathError` (and leaves nothing of ours
        behind) when a socket path is taken.  A stopped instance cannot be started again.
        """
        if self._started:
            raise RuntimeError("the plugin servers can be started only once")
        self._started = True
        dra_server = _UnixServer("DRAPlugin", SocketFile(self.paths.dra), self._max_workers, _DRA_SERVER_OPTIONS)
        v1_grpc.add_DRAPluginServicer_to_server(self.dra, dra_server.server)  # type: ignore[no-untyped-call]
        v1beta1_grpc.add_DRAPluginServicer_to_server(  # type: ignore[no-untyped-call]
            DraPluginV1beta1Servicer(self.dra), dra_server.server
        )
        if self.health is not None:
            health_grpc.add_DRAResourceHealthServicer_to_server(  # type: ignore[no-untyped-call]
                self.health, dra_server.server
            )
        try:
            dra_server.start()
        except BaseException:
            dra_server.abandon()
            raise
        registration_server = _UnixServer("Registration", SocketFile(self.paths.registration), _REGISTRATION_WORKERS)
        registration_grpc.add_RegistrationServicer_to_server(  # type: ignore[no-untyped-call]
            self.registration, registration_server.server
        )
        try:
            registration_server.start()
        except BaseException:
            registration_server.abandon()
            dra_server.abandon()
            raise
        self._dra_server, self._registration_server = dra_server, registration_server

    def stop(self, grace: float | None = DEFAULT_GRACE_SECONDS) -> None:
        """Deregister, end health streams, let in-flight DRA calls finish within ``grace``, clean up.

        ``grace=None`` cancels running calls at once.  Idempotent.
        """
        registration_server, self._registration_server = self._registration_server, None
        dra_server, self._dra_server = self._dra_server, None
        if registration_server is not None:
            registration_server.socket_file.remove()  # kubelet deregisters us when the file goes
            registration_server.stop(grace=0)
        if self.health is not None:
            self.health.stop()
        if dra_server is not None:
            dra_server.stop(grace)

    def __enter__(self) -> PluginServers:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
