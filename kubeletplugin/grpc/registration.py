"""The plugin-registration service kubelet calls after it sees our registration socket appear.

Owns what we tell kubelet about ourselves (``GetInfo``: type ``DRAPlugin``, the driver name, the DRA
socket's absolute path, the API versions we serve) and what kubelet tells us back
(``NotifyRegistrationStatus``).  A rejection is easy to miss -- kubelet logs it on its side and our
sockets keep working -- so the last status is kept, an event is set for the process to wait on,
``migdra_registration_status_total{registered="true|false"}`` counts every notification, and
``migdra_kubelet_registered`` is 1 while the last one accepted us.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge

from dra_driver.kubelet.protos import pluginregistration_v1_pb2 as registration_pb2

log = logging.getLogger(__name__)

# PluginInfo.type that routes us to kubelet's DRA handler (Go constant registerapi.DRAPlugin).
DRA_PLUGIN_TYPE = "DRAPlugin"
PROBE_METADATA_KEY = "migdra-probe"
"""gRPC metadata key the plugin's own liveness check sets on its calls (logged at DEBUG, not as kubelet's)."""


@dataclass(frozen=True, slots=True)
class RegistrationStatus:
    """What kubelet last said about our registration; ``error`` is kubelet's reason for a rejection."""

    registered: bool
    error: str = ""

    def describe(self) -> str:
        return "registered with kubelet" if self.registered else f"kubelet rejected us: {self.error or '(no reason)'}"


class RegistrationServicer:
    """``pluginregistration.Registration``; thread-safe (kubelet may call it from several threads)."""

    def __init__(
        self,
        driver_name: str,
        endpoint: Path,
        supported_versions: Sequence[str],
        metrics_registry: CollectorRegistry,
    ) -> None:
        if not endpoint.is_absolute():
            raise ValueError(f"the DRA endpoint must be an absolute path, not {endpoint}")
        self._info = registration_pb2.PluginInfo(
            type=DRA_PLUGIN_TYPE, name=driver_name, endpoint=str(endpoint), supported_versions=supported_versions
        )
        self._lock = threading.Lock()
        self._status: RegistrationStatus | None = None
        self.notified = threading.Event()
        """Set once kubelet has reported a status (whatever it was); :attr:`status` says which."""
        self._notifications = Counter(
            "migdra_registration_status",
            "registration results kubelet reported to the plugin",
            ["registered"],
            registry=metrics_registry,
        )
        for registered in ("true", "false"):  # both series exist from the start, at zero
            self._notifications.labels(registered=registered)
        Gauge(
            "migdra_kubelet_registered",
            "1 while kubelet's last NotifyRegistrationStatus accepted the plugin; 0 before the first and after a "
            "rejection",
            registry=metrics_registry,
        ).set_function(lambda: 1.0 if (status := self.status) is not None and status.registered else 0.0)

    @property
    def status(self) -> RegistrationStatus | None:
        """The last status kubelet reported, or ``None`` before its first notification."""
        with self._lock:
            return self._status

    def wait(self, timeout: float | None = None) -> RegistrationStatus | None:
        """Wait for kubelet's first notification; the last status, or ``None`` on timeout."""
        self.notified.wait(timeout)
        return self.status

    def GetInfo(
        self, request: registration_pb2.InfoRequest, context: grpc.ServicerContext
    ) -> registration_pb2.PluginInfo:
        probe = any(key == PROBE_METADATA_KEY for key, _ in context.invocation_metadata() or ())
        log.log(
            logging.DEBUG if probe else logging.INFO,  # the liveness check asks every few seconds
            "%s asked for plugin info: %s at %s, versions %s",
            "the liveness check" if probe else "kubelet",
            self._info.name,
            self._info.endpoint,
            ", ".join(self._info.supported_versions),
        )
        return self._info

    def NotifyRegistrationStatus(
        self, request: registration_pb2.RegistrationStatus, context: grpc.ServicerContext
    ) -> registration_pb2.RegistrationStatusResponse:
        status = RegistrationStatus(registered=request.plugin_registered, error=request.error)
        with self._lock:
            self._status = status
        self._notifications.labels(registered="true" if status.registered else "false").inc()
        if status.registered:
            log.info("driver %s %s", self._info.name, status.describe())
        else:
            log.error("driver %s: %s", self._info.name, status.describe())
        self.notified.set()
        return registration_pb2.RegistrationStatusResponse()
