"""The plugin's liveness check: the standard ``grpc.health.v1.Health`` service on a TCP port, for a
Kubernetes ``livenessProbe: grpc: {port: ...}``.

Owns the health service and its answer, computed when asked, not from a status set long ago: every
``Check`` (kubelet probes every ``periodSeconds``) runs the process's ``problem()`` -- for the node
plugin (app.py): :func:`probe_sockets`, which calls the plugin's own sockets as kubelet would,
``GetInfo`` on the registration socket and a NodePrepareResources with no claims on the DRA socket
(which touches no claim, no NVML and no file), each within :data:`CALL_TIMEOUT`, and then whether the
publish loop has finished a round lately.  SERVING when ``problem()`` says nothing, NOT_SERVING
otherwise; the overall service name ``""`` is the only one.  A change is logged once, with the
reason, so a restart by kubelet can be told from a crash.  The probe's calls carry
:data:`PROBE_METADATA`, so the registration service does not log them as kubelet's.

Concurrency: one small gRPC thread pool of its own, apart from kubelet's servers, so a DRA server
whose workers are all busy or stuck shows up as a failed check instead of a check that cannot run.

Must never: change the plugin's state; a probe has no side effects.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from dra_driver.errors import ConfigurationError
from dra_driver.kubelet.protos import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)
from dra_driver.serving import parse_metrics_address
from kubeletplugin.grpc.registration import PROBE_METADATA_KEY
from kubeletplugin.grpc.sockets import PluginSocketPaths

log = logging.getLogger(__name__)

CALL_TIMEOUT = 2.0
"""Seconds each of the two calls of a check may take (kubelet's probe ``timeoutSeconds`` should be
above twice it: the Helm chart's is 5)."""
FLAG = "--healthcheck-address (MIGDRA_HEALTHCHECK_ADDRESS)"
_WORKERS = 2

PROBE_METADATA = ((PROBE_METADATA_KEY, "liveness"),)
"""gRPC metadata on the probe's own calls to the kubelet sockets."""

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def grpc_address(address: str) -> str:
    """``HOST:PORT`` as gRPC binds it (``:PORT`` = every interface; an IPv6 host in brackets)."""
    host, port = parse_metrics_address(address)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _check_bindable(address: str) -> None:
    """Bind ``address`` once with a plain socket: gRPC's own failure is a C-core line on stderr and a
    message without the reason, this is one line with the system's (``Address already in use``)."""
    host, port = parse_metrics_address(address)
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC: a TIME_WAIT port is free
            probe.bind(sockaddr)
    except OSError as exc:
        raise ConfigurationError(f"{FLAG} {address!r}: cannot listen there: {exc.strerror or exc}") from exc


def probe_sockets(paths: PluginSocketPaths, timeout: float = CALL_TIMEOUT) -> str | None:
    """What is wrong with the plugin's kubelet sockets, or None when both answer as kubelet needs."""
    try:
        with grpc.insecure_channel(f"unix://{paths.registration}") as channel:
            registration: Any = pluginregistration_v1_pb2_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
            registration.GetInfo(pluginregistration_v1_pb2.InfoRequest(), timeout=timeout, metadata=PROBE_METADATA)
    except grpc.RpcError as exc:
        return f"the registration socket {paths.registration} does not answer GetInfo: {_code(exc)}"
    try:
        with grpc.insecure_channel(f"unix://{paths.dra}") as channel:
            dra: Any = dra_v1_pb2_grpc.DRAPluginStub(channel)  # type: ignore[no-untyped-call]
            dra.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(), timeout=timeout, metadata=PROBE_METADATA)
    except grpc.RpcError as exc:
        return f"the DRA socket {paths.dra} does not answer NodePrepareResources: {_code(exc)}"
    return None


def _code(exc: grpc.RpcError) -> str:
    code = exc.code() if isinstance(exc, grpc.Call) else None
    details = exc.details() if isinstance(exc, grpc.Call) else None
    return f"{code.name if code is not None else 'error'}{f' ({details})' if details else ''}"


class LivenessServicer(health.HealthServicer):  # type: ignore[misc]
    """``grpc.health.v1.Health`` whose status is computed by ``problem()`` at every ``Check``."""

    def __init__(self, problem: Callable[[], str | None]) -> None:
        super().__init__()
        self._problem = problem
        self._last_lock = threading.Lock()  # not ``_lock``: the base class has its own
        self._last: str | None = None
        self.set("", NOT_SERVING)

    def refresh(self) -> str | None:
        """Run the check now, publish its status (``Check`` and ``Watch`` both see it), say what is wrong."""
        try:
            problem = self._problem()
        except Exception as exc:  # a bug in a check is a failed check, never a crashed probe
            log.exception("the liveness check failed unexpectedly")
            problem = f"the check failed: {exc!r}"
        with self._last_lock:
            changed, self._last = problem != self._last, problem
        if changed:
            if problem is None:
                log.info("liveness check: serving")
            else:
                log.warning("liveness check: not serving: %s", problem)
        self.set("", SERVING if problem is None else NOT_SERVING)
        return problem

    def Check(self, request: health_pb2.HealthCheckRequest, context: grpc.ServicerContext) -> Any:
        if request.service == "":
            self.refresh()
        return super().Check(request, context)


@contextmanager
def serving_liveness(address: str | None, problem: Callable[[], str | None]) -> Iterator[LivenessServicer | None]:
    """The health service on ``address`` (off when None) while the block runs; bound at once, so a
    port that is taken stops start-up with one line naming the flag."""
    if not address:
        yield None
        return
    try:
        target = grpc_address(address)
    except ValueError as exc:
        raise ConfigurationError(f"{FLAG} {address!r}: {exc}") from exc
    _check_bindable(address)
    executor = ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="grpc-liveness")
    # No SO_REUSEPORT (gRPC's default): a second plugin on the same port must fail, not share it.
    server: Any = grpc.server(executor, options=[("grpc.so_reuseport", 0)])
    servicer = LivenessServicer(problem)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    try:
        bound = server.add_insecure_port(target)
    except RuntimeError:  # grpc raises rather than returning 0 in recent releases
        bound = 0
    if bound == 0:
        executor.shutdown(wait=False)
        raise ConfigurationError(
            f"{FLAG} {address!r}: cannot listen there: the port is taken or the address is not this host's"
        )
    server.start()
    log.info("serving the liveness check (grpc.health.v1.Health) on %s", target)
    try:
        yield servicer
    finally:
        servicer.enter_graceful_shutdown()
        server.stop(None).wait()
        executor.shutdown(wait=False, cancel_futures=True)
