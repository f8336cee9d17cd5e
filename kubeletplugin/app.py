"""The node process: wires settings, NVML, the device model, prepare and gRPC together and runs.

This is the only place the kubelet plugin's parts are assembled; each part stays testable alone.

Concurrency model (threads, no asyncio): the publish loop on its own thread (periodic NVML rescan +
triggers); the gRPC servers' thread pools calling the thread-safe :class:`PrepareService` (which runs
claims on its own worker pool under per-GPU locks, and writes claim status on one background
thread); the main thread waits for SIGTERM/SIGINT and then shuts down in order: deregister from
kubelet, let in-flight calls finish, stop publishing, close prepare (instances are kept).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol
from wsgiref.simple_server import WSGIServer

from kubernetes import client, config
from prometheus_client import CollectorRegistry, start_http_server
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.pool import NodePool, build_pool
from dra_driver.devicemodel.vocabulary import DEFAULT_DRIVER_NAME
from dra_driver.errors import ConfigurationError
from dra_driver.mig.catalog import Placement
from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.inventory import read_inventory
from dra_driver.nvml.session import open_nvml
from dra_driver.settings import NvmlSettings, load_device_model_config
from kubeletplugin.grpc import PluginServers, SocketPathError
from kubeletplugin.health import NvmlDeviceHealth
from kubeletplugin.metrics import PublishMetrics
from kubeletplugin.pool_report import PoolReporter
from kubeletplugin.prepare import CheckpointError, PrepareService, PrepareSettings
from kubeletplugin.publisher import PublishLoop, PublishResult, SlicePublisher

log = logging.getLogger(__name__)

KUBELET_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
KUBELET_PLUGINS_DIR = Path("/var/lib/kubelet/plugins")


class Ownership(Protocol):
    """What the prepare service knows about the GPU instances migdra created."""

    def owned_instances(self) -> set[tuple[str, int]]: ...

    def owned_placements(self) -> set[tuple[str, int, Placement]]: ...


class PluginSettings(BaseSettings):
    """Settings of the node process (flags of ``migdra kubelet-plugin`` or ``MIGDRA_*`` variables)."""

    model_config = SettingsConfigDict(env_prefix="MIGDRA_", extra="forbid", frozen=True)

    node_name: str = Field(description="this node's name: the pool name and the slices' owner")
    driver_name: str = Field(default=DEFAULT_DRIVER_NAME, description="DRA driver name and attribute domain")
    kubeconfig: Path | None = Field(default=None, description="kubeconfig file; in-cluster config when unset")
    device_config: Path | None = Field(default=None, description="device model configuration (YAML)")
    rescan_interval: float = Field(default=60.0, gt=0, description="seconds between NVML rescans")
    cleanup_on_exit: bool = Field(default=False, description="delete this node's ResourceSlices on exit")
    metrics_address: str | None = Field(
        default=None, description="serve Prometheus metrics on HOST:PORT (e.g. 0.0.0.0:9400); off when unset"
    )
    registry_dir: Path = Field(default=KUBELET_REGISTRY_DIR, description="kubelet's plugin registration directory")
    plugin_dir: Path | None = Field(
        default=None, description="directory of dra.sock; default /var/lib/kubelet/plugins/<driver name>"
    )
    pod_uid: str | None = Field(
        default=None, description="rolling-update mode: socket names carry this pod UID (from the downward API)"
    )
    shutdown_grace: float = Field(default=30.0, ge=0, description="seconds in-flight kubelet calls get at shutdown")
    health: bool = Field(
        default=False,
        description="serve kubelet's DRA resource-health stream (v1alpha1.DRAResourceHealth; kubelet feature "
        "gate ResourceHealthStatus): a device is unhealthy while its GPU does not answer NVML",
    )
    health_interval: float = Field(default=10.0, gt=0, description="seconds between health reports to kubelet")

    @property
    def plugin_directory(self) -> Path:
        return self.plugin_dir or KUBELET_PLUGINS_DIR / self.driver_name


def api_client_for(kubeconfig: Path | None) -> client.ApiClient:
    """The official client, from a kubeconfig file or the pod's service account."""
    if kubeconfig is not None:
        loaded: client.ApiClient = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        return loaded
    config.load_incluster_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()


class _Publishing:
    """The publish loop with its metrics and fatal-error handling, shared by both run modes."""

    def __init__(self, plugin: PluginSettings, registry: CollectorRegistry, stop: threading.Event) -> None:
        self.plugin = plugin
        self.device_config: DeviceModelConfig = load_device_model_config(
            plugin.device_config, driver_name=plugin.driver_name
        )
        self.reporter = PoolReporter(PublishMetrics(registry))
        self.fatal: list[BaseException] = []
        self.last_pool: NodePool | None = None
        self._stop = stop

    def on_fatal(self, exc: BaseException) -> None:
        self.fatal.append(exc)
        self._stop.set()

    def on_round(self, pool: NodePool, result: PublishResult) -> None:
        self.last_pool = pool
        self.reporter.report_pool(pool)
        self.reporter.report_publish(result)

    def compute_pool(self, nvml: Nvml, ownership: Ownership | None) -> NodePool:
        """The pool from a fresh NVML read.  What migdra owns is read before *and* after the inventory,
        so an instance being created (known by placement until its ID is recorded) or being destroyed
        (record dropped right after) never shows up as foreign for one round."""
        if ownership is None:
            return build_pool(read_inventory(nvml), self.device_config)
        before = ownership.owned_instances()
        inventory = read_inventory(nvml)
        return build_pool(
            inventory,
            self.device_config,
            owned_instances=before | ownership.owned_instances(),
            owned_placements=ownership.owned_placements(),
        )

    @contextmanager
    def running(
        self, api_client: client.ApiClient, nvml: Nvml, ownership: Ownership | None
    ) -> Iterator[SlicePublisher]:
        publisher = SlicePublisher(api_client, self.plugin.node_name, self.device_config.driver_name)
        loop = PublishLoop(
            publisher,
            lambda: self.compute_pool(nvml, ownership),
            interval=self.plugin.rescan_interval,
            on_fatal=self.on_fatal,
            on_round=self.on_round,
        )
        loop.start()
        log.info("publishing ResourceSlices of node %s for %s", self.plugin.node_name, self.device_config.driver_name)
        try:
            yield publisher
        finally:
            loop.stop()
            if self.plugin.cleanup_on_exit:
                log.info("deleted %d ResourceSlices on exit", publisher.delete_all())

    def exit_code(self) -> int:
        if self.fatal:
            log.error("stopping: publishing kept failing: %s", self.fatal[0])
            return 1
        return 0


def run_publish_only(plugin: PluginSettings, nvml_settings: NvmlSettings, stop: threading.Event) -> int:
    """Publish and keep the node's ResourceSlices current until ``stop`` is set; returns an exit code."""
    registry = CollectorRegistry()
    publishing = _Publishing(plugin, registry, stop)
    with (
        serving_metrics(plugin.metrics_address, registry),
        api_client_for(plugin.kubeconfig) as api_client,
        open_nvml(nvml_settings) as nvml,
        publishing.running(api_client, nvml, ownership=None),
    ):
        stop.wait()
    return publishing.exit_code()


def run_plugin(
    plugin: PluginSettings, prepare: PrepareSettings, nvml_settings: NvmlSettings, stop: threading.Event
) -> int:
    """The whole node plugin: publish slices, register with kubelet, serve prepare/unprepare."""
    registry = CollectorRegistry()
    publishing = _Publishing(plugin, registry, stop)
    driver_name = publishing.device_config.driver_name
    with (
        serving_metrics(plugin.metrics_address, registry),
        api_client_for(plugin.kubeconfig) as api_client,
        open_nvml(nvml_settings) as nvml,
    ):
        service = PrepareService.from_settings(
            prepare, nvml=nvml, api_client=api_client, node_name=plugin.node_name, driver_name=driver_name
        )
        try:
            recovery = service.start()
        except CheckpointError as exc:
            log.error("cannot trust the checkpoint, refusing to start: %s", exc)
            return 1
        log.info("start-up recovery: %s", recovery)
        try:
            with publishing.running(api_client, nvml, ownership=service):
                servers = PluginServers(
                    driver_name,
                    plugin.registry_dir,
                    plugin.plugin_directory,
                    service,
                    metrics_registry=registry,
                    pod_uid=plugin.pod_uid,
                    health=(
                        NvmlDeviceHealth(nvml, plugin.node_name, lambda: publishing.last_pool)
                        if plugin.health
                        else None
                    ),
                    health_interval=plugin.health_interval,
                )
                try:
                    servers.start()
                except SocketPathError as exc:
                    log.error("cannot serve kubelet: %s", exc)
                    return 1
                _log_registration(servers, stop)
                stop.wait()
                servers.stop(plugin.shutdown_grace)  # deregister, then let in-flight calls finish
        finally:
            service.close()
    return publishing.exit_code()


def _log_registration(servers: PluginServers, stop: threading.Event) -> None:
    """Say loudly whether kubelet accepted us, without blocking start-up on it."""

    def wait() -> None:
        while not stop.is_set():
            status = servers.registration.wait(timeout=5.0)
            if status is not None:
                if status.registered:
                    log.info("registered with kubelet")
                else:
                    log.error("kubelet rejected the registration: %s", status.describe())
                return

    threading.Thread(target=wait, name="registration-status", daemon=True).start()


@contextmanager
def serving_metrics(address: str | None, registry: CollectorRegistry) -> Iterator[WSGIServer | None]:
    """The Prometheus endpoint on ``HOST:PORT`` (``:PORT`` = all interfaces) while the block runs."""
    if not address:
        yield None
        return
    host, _, port = address.rpartition(":")
    try:
        server, _thread = start_http_server(int(port), addr=host or "0.0.0.0", registry=registry)
    except (ValueError, OSError) as exc:
        raise ConfigurationError(f"metrics_address {address!r}: {exc}") from exc
    try:
        yield server
    finally:
        server.shutdown()


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT (graceful shutdown: instances and, by default, slices stay)."""
    stop = threading.Event()

    def handler(signum: int, _frame: object) -> None:
        log.info("received %s, shutting down", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop
