"""The node process: wires settings, NVML, the device model and the API client together and runs.

This is the only place the kubelet plugin's parts are assembled; each part stays testable alone.
The concurrency model is threads: the publish loop runs on its own thread, the main thread waits for
SIGTERM/SIGINT (later roadmap steps add the gRPC servers' thread pools).
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from wsgiref.simple_server import WSGIServer

from kubernetes import client, config
from prometheus_client import CollectorRegistry, start_http_server
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from dra_driver.devicemodel.pool import NodePool, build_pool
from dra_driver.devicemodel.vocabulary import DEFAULT_DRIVER_NAME
from dra_driver.errors import ConfigurationError
from dra_driver.nvml.inventory import read_inventory
from dra_driver.nvml.session import open_nvml
from dra_driver.settings import NvmlSettings, load_device_model_config
from kubeletplugin.metrics import PublishMetrics
from kubeletplugin.pool_report import PoolReporter
from kubeletplugin.publisher import PublishLoop, PublishResult, SlicePublisher

log = logging.getLogger(__name__)


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


def api_client_for(kubeconfig: Path | None) -> client.ApiClient:
    """The official client, from a kubeconfig file or the pod's service account."""
    if kubeconfig is not None:
        loaded: client.ApiClient = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        return loaded
    config.load_incluster_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()


def run_publish_only(plugin: PluginSettings, nvml_settings: NvmlSettings, stop: threading.Event) -> int:
    """Publish and keep the node's ResourceSlices current until ``stop`` is set; returns an exit code."""
    device_config = load_device_model_config(plugin.device_config, driver_name=plugin.driver_name)
    fatal: list[BaseException] = []

    def on_fatal(exc: BaseException) -> None:
        fatal.append(exc)
        stop.set()

    registry = CollectorRegistry()
    reporter = PoolReporter(PublishMetrics(registry))
    metrics_server = serve_metrics(plugin.metrics_address, registry)

    def on_round(pool: NodePool, result: PublishResult) -> None:
        reporter.report_pool(pool)
        reporter.report_publish(result)

    with api_client_for(plugin.kubeconfig) as api_client, open_nvml(nvml_settings) as nvml:
        publisher = SlicePublisher(api_client, plugin.node_name, device_config.driver_name)
        loop = PublishLoop(
            publisher,
            lambda: build_pool(read_inventory(nvml), device_config),
            interval=plugin.rescan_interval,
            on_fatal=on_fatal,
            on_round=on_round,
        )
        loop.start()
        log.info("publishing ResourceSlices of node %s for %s", plugin.node_name, device_config.driver_name)
        stop.wait()
        loop.stop()
        if plugin.cleanup_on_exit:
            log.info("deleted %d ResourceSlices on exit", publisher.delete_all())
    if metrics_server is not None:
        metrics_server.shutdown()
    if fatal:
        log.error("stopping: publishing kept failing: %s", fatal[0])
        return 1
    return 0


def serve_metrics(address: str | None, registry: CollectorRegistry) -> WSGIServer | None:
    """Start the Prometheus endpoint on ``HOST:PORT`` (``:PORT`` = all interfaces), or nothing."""
    if not address:
        return None
    host, _, port = address.rpartition(":")
    try:
        server, _thread = start_http_server(int(port), addr=host or "0.0.0.0", registry=registry)
    except (ValueError, OSError) as exc:
        raise ConfigurationError(f"metrics_address {address!r}: {exc}") from exc
    return server


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT (graceful shutdown: instances and, by default, slices stay)."""
    stop = threading.Event()

    def handler(signum: int, _frame: object) -> None:
        log.info("received %s, shutting down", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop
