"""The node process: wires settings, NVML, the device model, prepare and gRPC together and runs.

This is the only place the kubelet plugin's parts are assembled; each part stays testable alone.

Start-up checks everything it can before it touches the API server or the hardware -- the device
configuration (loaded by :class:`~kubeletplugin.publishing.Publishing`), then the directories, socket
paths and kubeconfig (:mod:`kubeletplugin.start_up`), then the driver's files, then the metrics and
liveness ports (bound) -- so a bad flag stops the process with one line and never leaves half-published
slices behind.  Publishing, shared by both
run modes, is one part (:mod:`kubeletplugin.publishing`).  Once the slices are published (and,
in the full plugin, kubelet's sockets are served) one line says so through ``announce``; otherwise
the process stays quiet unless something goes wrong.

Start-up order of the full plugin: checks, NVML, the checkpoint's recovery, the taint store (a
corrupt one stops the process: :class:`~kubeletplugin.taint_store.TaintStoreError`), then kubelet's
sockets (registration), then the fault watcher's event set, then publishing.  Kubelet may call
NodePrepareResources as soon as we register, and answering it needs the checkpoint recovered (and
NVML), not this process's slices: a claim can only be allocated from slices already in the API (the
previous instance's, or ours once published), and prepare reads the claim's allocation itself.  So
registration does not wait for the first publish, and the first publish does not compete with it for
the CPU.  Start-up imports only what it uses (no client API classes or models; see
:class:`~kubeletplugin.publisher.SlicePublisher`).

An API server outage never stops the process: prepare and unprepare of claims in the checkpoint need
no API call; publishing and claim status writes wait with one backoff policy (``MIGDRA_API_BACKOFF_*``,
:class:`~dra_driver.kube.failures.BackoffPolicy`) and catch up when the server is back; and the claims'
status is reconciled with the checkpoint at start and periodically.  Only a refusal (the API server
rejecting the slices), NVML failing or a bug, ``fatal_after`` publish rounds in a row, stops it.

One of each per process: one API client (:func:`api_connection`: a
:class:`~dra_driver.kube.client.Client` every part calls the API server through), one model of a
ResourceClaim (:class:`~kubeletplugin.prepare.claims.ResourceClaimView`), one background-loop design
(:class:`~dra_driver.kube.loop.ControlLoop`) and one informer per kind (:func:`claim_informer`: the one
list-then-watch cache of ResourceClaims, shared by every loop that reads claims).

Concurrency model (threads, no asyncio), each background job a ControlLoop on its own thread: the
publish loop (periodic NVML rescan + triggers; it knows no informer); the claim status reporter (a set
of claims to converge and Events to write, plus its periodic reconciliation over the claim informer:
:mod:`kubeletplugin.prepare.reporter`); with an occupancy-aware placement policy (``dynamic``), the
occupancy (:mod:`kubeletplugin.occupancy`), which triggers the publish loop as claims come and go;
with realize before bind, the realizer (:mod:`kubeletplugin.realize_before_bind`, calling the same
prepare service); with device taints, the GPU fault watcher on its NVML event set
(:mod:`kubeletplugin.gpu_faults`), which triggers the publish loop when a fault comes or goes.  Beside
them: the claim informer's thread; the gRPC servers' thread pools calling the thread-safe
:class:`~kubeletplugin.prepare.service.PrepareService` (which runs claims on its own worker pool under
per-GPU locks); with ``--healthcheck-address``, the liveness check's own two gRPC threads
(:mod:`kubeletplugin.grpc.liveness`); the main thread waits for SIGTERM/SIGINT and then shuts down in
order: deregister from kubelet, let in-flight calls finish, stop publishing, stop the realizer, stop
the fault watcher, close prepare (instances are kept), stop the claim informer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from dra_driver.errors import ConfigurationError
from dra_driver.kube.client import CLAIMS, Client
from dra_driver.kube.config import new_api_client
from dra_driver.kube.informer import Changes, Informer
from dra_driver.kube.loop import ControlLoop
from dra_driver.logs import set_node
from dra_driver.nvml.session import open_nvml
from dra_driver.nvml.settings import NvmlSettings
from dra_driver.serving import serving_metrics
from kubeletplugin.device_health import NvmlDeviceHealth
from kubeletplugin.gpu_faults import GpuFaultWatcher
from kubeletplugin.grpc import PluginServers
from kubeletplugin.grpc.liveness import probe_sockets, serving_liveness
from kubeletplugin.metrics import FaultMetrics, PrepareMetrics, RealizeMetrics, register_mig_instances
from kubeletplugin.prepare.driver_files import check_driver_version, load_driver_edits
from kubeletplugin.prepare.reporter import ClaimReporter
from kubeletplugin.prepare.service import mig_instances_of, service_from_settings
from kubeletplugin.publishing import Publishing, publish_problem
from kubeletplugin.realize_before_bind import Realizer
from kubeletplugin.settings import PluginSettings, PrepareSettings
from kubeletplugin.start_up import check_start_up
from kubeletplugin.taint_store import TaintStore

if TYPE_CHECKING:
    from kubernetes.client.configuration import Configuration

log = logging.getLogger(__name__)


def _quiet(line: str) -> None:
    """The default ``announce``: library callers and tests do not want the start-up line."""


def run_publish_only(
    plugin: PluginSettings,
    nvml_settings: NvmlSettings,
    stop: threading.Event,
    announce: Callable[[str], None] = _quiet,
) -> int:
    """Publish and keep the node's ResourceSlices current until ``stop`` is set; returns an exit code.

    Raises :class:`ConfigurationError` before touching the API or the hardware when a setting cannot
    work, and :class:`~kubeletplugin.publishing.PublishingError` when publishing kept failing."""
    if plugin.realize_before_bind:
        raise ConfigurationError(
            "--realize-before-bind (MIGDRA_REALIZE_BEFORE_BIND) needs the whole plugin: with --publish-only nothing "
            "would realize the claims, and every pod would wait for its binding conditions until they time out"
        )
    set_node(plugin.node_name)
    registry = CollectorRegistry()
    publishing = Publishing(plugin, registry, stop)
    configuration = check_start_up(plugin, prepare=None)
    publishing.announce_when_published(
        announce,
        lambda: (
            f"migdra kubelet-plugin: publishing node {plugin.node_name} for "
            f"{publishing.device_config.driver_name} to {publishing.server} (publish only): {publishing.summary()}"
        ),
    )
    with (
        serving_metrics(plugin.metrics_address, registry),
        serving_liveness(plugin.healthcheck_address, lambda: _publishing_problem(plugin, publishing)),
        api_connection(configuration, plugin.api_timeout) as client,
        open_nvml(nvml_settings) as nvml,
        claim_informer(client) if publishing.policy.uses_occupancy else nullcontext() as claims,
        publishing.running(client, nvml, ownership=None, claims=claims),
    ):
        stop.wait()
    return publishing.exit_code()


@contextmanager
def api_connection(configuration: Configuration, timeout: float) -> Iterator[Client]:
    """The process's one API client: every part of the node process calls the API server through it."""
    with new_api_client(configuration) as api_client:
        yield Client(api_client=api_client, timeout=timeout)


@contextmanager
def claim_informer(client: Client) -> Iterator[Informer]:
    """The process's one cache of ResourceClaims (list, then watch), shared by every loop that reads
    claims -- the claim status reconciliation, the placement occupancy, realize before bind -- and
    stopped after them.  Not made when nothing reads claims (publishing alone with a static policy)."""
    claims = Informer(client, CLAIMS, Changes())
    claims.start()
    try:
        yield claims
    finally:
        claims.stop()


def run_plugin(
    plugin: PluginSettings,
    prepare: PrepareSettings,
    nvml_settings: NvmlSettings,
    stop: threading.Event,
    announce: Callable[[str], None] = _quiet,
) -> int:
    """The whole node plugin: publish slices, register with kubelet, serve prepare/unprepare.

    Raises :class:`ConfigurationError` before touching the API or the hardware when a setting cannot
    work; a checkpoint that cannot be trusted, a socket that cannot be served and publishing that
    kept failing stop it with a :class:`MigdraError` too."""
    set_node(plugin.node_name)
    registry = CollectorRegistry()
    publishing = Publishing(
        plugin, registry, stop, fault_metrics=FaultMetrics(registry) if plugin.device_taints else None
    )
    driver_name = publishing.device_config.driver_name
    configuration = check_start_up(plugin, prepare)
    simulated = nvml_settings.nvml == "simulated"
    driver_files = load_driver_edits(prepare, simulated=simulated)  # before the API or the hardware
    metrics = PrepareMetrics(registry)
    served: list[PluginServers] = []  # once kubelet's sockets are served: what the liveness check calls
    loops: list[ControlLoop] = []  # every background loop once started: the liveness check asks each
    with (
        serving_metrics(plugin.metrics_address, registry),
        serving_liveness(plugin.healthcheck_address, lambda: _liveness_problem(plugin, publishing, served, loops)),
        api_connection(configuration, plugin.api_timeout) as client,
        open_nvml(nvml_settings, observe_call=metrics.observe_nvml_call) as nvml,
        claim_informer(client) as claims,
    ):
        if driver_files is not None and not simulated:
            check_driver_version(driver_files[0], nvml.driver_version(), prepare.driver_root)
        reporter = ClaimReporter(
            client,
            driver_name,
            plugin.node_name,
            claims=claims,
            backoff=plugin.api_backoff,
            reconcile_interval=plugin.status_reconcile_interval,
            on_failure=metrics.observe_status_failure,
        )
        metrics.watch_status_backlog(lambda: reporter.backlog)
        service = service_from_settings(
            prepare,
            nvml=nvml,
            client=client,
            node_name=plugin.node_name,
            driver_name=driver_name,
            reporter=reporter,
            metrics=metrics,
            driver_edits=driver_files[1] if driver_files is not None else None,
            on_shares_changed=publishing.trigger,
        )
        recovery = service.start()  # a checkpoint that cannot be trusted stops us: CheckpointError
        log.info("start-up recovery: %s", recovery)
        faults = (
            GpuFaultWatcher(
                nvml,
                TaintStore(prepare.state_dir),
                publishing.trigger,
                ignored_xids=plugin.health_ignored_xids,
                clear_after=plugin.health_clear_after,
                metrics=publishing.fault_metrics,
            )
            if plugin.device_taints
            else None
        )
        if faults is not None:
            faults.load()  # before the first publish; a corrupt store stops us: TaintStoreError
        register_mig_instances(registry, plugin.node_name, lambda: mig_instances_of(service.checkpoint.records()))
        servers = PluginServers(
            driver_name,
            plugin.registry_dir,
            plugin.plugin_directory,
            service,
            metrics_registry=registry,
            pod_uid=plugin.pod_uid,
            health=(NvmlDeviceHealth(nvml, plugin.node_name, lambda: publishing.last_pool) if plugin.health else None),
            health_interval=plugin.health_interval,
        )
        realizer = (
            Realizer(
                service,
                client,
                claims,
                driver_name,
                plugin.node_name,
                metrics=RealizeMetrics(registry),
            )
            if plugin.realize_before_bind
            else None
        )
        try:
            # Registered before the first publish: prepare needs the recovered checkpoint, not our slices
            # (see the module docstring).  A socket path taken since the start-up check: SocketPathError.
            servers.start()
            served.append(servers)
            loops.append(reporter)
            if realizer is not None:  # after recovery: it releases records realized ahead that lost their claim
                realizer.start()
                loops.append(realizer)
            if faults is not None:
                faults.start((gpu.uuid, gpu.index) for gpu in nvml.list_gpus())
                loops.append(faults)
            with publishing.running(
                client,
                nvml,
                ownership=service.checkpoint,
                claims=claims,
                faults=faults.faults if faults is not None else None,
            ):
                publishing.announce_when_published(
                    announce,
                    lambda: (
                        f"migdra kubelet-plugin: serving node {plugin.node_name} for {driver_name}: "
                        f"{publishing.summary()} to {publishing.server}; kubelet registration socket "
                        f"{servers.paths.registration}"
                    ),
                )
                _log_registration(servers, stop)
                stop.wait()
                servers.stop(plugin.shutdown_grace)  # deregister, then let in-flight calls finish
        finally:
            servers.stop(grace=None)  # idempotent: only a failed start-up gets here with them serving
            if realizer is not None:
                realizer.stop()  # before the service closes: a realization in flight finishes first
            if faults is not None:
                faults.stop()
            service.close()
    return publishing.exit_code()


def _liveness_problem(
    plugin: PluginSettings, publishing: Publishing, served: list[PluginServers], loops: list[ControlLoop]
) -> str | None:
    """Why the node process is not alive, or None: kubelet's sockets answer, publishing is not stuck,
    and every other background loop (claim status reporter, occupancy, realizer, fault watcher) and
    the informers they read have a running thread and finish passes."""
    if not served:
        return "starting: kubelet's sockets are not served yet"
    problem = probe_sockets(served[0].paths) or _publishing_problem(plugin, publishing)
    for loop in loops:
        problem = problem or loop.liveness_problem()
    return problem


def _publishing_problem(plugin: PluginSettings, publishing: Publishing) -> str | None:
    """Why publishing is not alive (the publish loop stuck, or its occupancy loop dead), or None."""
    problem = publish_problem(plugin, publishing)
    for loop in publishing.loops():
        problem = problem or loop.liveness_problem()
    return problem


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
