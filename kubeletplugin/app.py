"""The node process: wires settings, NVML, the device model, prepare and gRPC together and runs.

This is the only place the kubelet plugin's parts are assembled; each part stays testable alone.

Start-up checks everything it can before it touches the API server or the hardware -- the names
(settings validators), the device configuration, every directory it will write to, the socket paths,
the kubeconfig (loaded, not yet used) and the metrics and liveness ports (bound) -- so a bad flag stops the process
with one line and never leaves half-published slices behind.  Once the slices are published (and,
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
:class:`PrepareService` (which runs claims on its own worker pool under per-GPU locks); with
``--healthcheck-address``, the liveness check's own two gRPC threads
(:mod:`kubeletplugin.grpc.liveness`); the main thread waits for SIGTERM/SIGINT and then shuts down in
order: deregister from kubelet, let in-flight calls finish, stop publishing, stop the realizer, stop
the fault watcher, close prepare (instances are kept), stop the claim informer.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry

from dra_driver.device_config import load_device_model_config
from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.faults import GpuFault, taint_pool, tainted_devices
from dra_driver.devicemodel.policy import PRODUCTION_POLICIES
from dra_driver.devicemodel.policy import placement_policy as policy_named
from dra_driver.devicemodel.pool import NodePool, build_pool
from dra_driver.devicemodel.vocabulary import realize_before_bind_conditions
from dra_driver.durable import writable_directory_problem
from dra_driver.errors import ConfigurationError, MigdraError
from dra_driver.kube.client import CLAIMS, Client
from dra_driver.kube.config import load_client_configuration, new_api_client
from dra_driver.kube.failures import ApiRequestError, describe_failure
from dra_driver.kube.informer import Changes, Informer
from dra_driver.logs import set_node
from dra_driver.mig.catalog import Placement
from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.session import open_nvml
from dra_driver.nvml.settings import NvmlSettings
from dra_driver.serving import serving_metrics
from kubeletplugin.device_health import NvmlDeviceHealth
from kubeletplugin.gpu_faults import GpuFaultWatcher
from kubeletplugin.grpc import PluginServers
from kubeletplugin.grpc.liveness import probe_sockets, serving_liveness
from kubeletplugin.grpc.sockets import MAX_SOCKET_PATH_BYTES, SocketFile, plugin_socket_paths
from kubeletplugin.metrics import FaultMetrics, PrepareMetrics, PublishMetrics, RealizeMetrics, register_mig_instances
from kubeletplugin.occupancy import FIRST_LIST_WAIT_SECONDS, ClaimOccupancy
from kubeletplugin.pool_report import PoolReporter
from kubeletplugin.prepare.driver_files import check_driver_version, load_driver_edits
from kubeletplugin.prepare.reporter import ClaimReporter
from kubeletplugin.prepare.service import PrepareService
from kubeletplugin.publisher import (
    DEFAULT_REQUEST_TIMEOUT,
    InventoryReader,
    PublishLoop,
    PublishResult,
    RoundFailure,
    SlicePublisher,
    read_settled_inventory,
)
from kubeletplugin.realize_before_bind import Realizer
from kubeletplugin.settings import PluginSettings, PrepareSettings
from kubeletplugin.taint_store import TaintStore

if TYPE_CHECKING:
    from kubernetes.client.configuration import Configuration

log = logging.getLogger(__name__)

KUBECONFIG_FLAG = "--kubeconfig (MIGDRA_KUBECONFIG)"
_REGISTRY_FLAG = "--registry-dir (MIGDRA_REGISTRY_DIR)"


class PublishingError(MigdraError):
    """Publishing the node's ResourceSlices kept failing for a reason an API outage does not explain
    (the API server refused the slices, NVML failed, a bug) ``fatal_after`` rounds in a row; the
    process exits with status 1 and one line naming the last failure, so Kubernetes restarts it.  An
    outage alone never raises it: prepare and unprepare must keep working from the checkpoint."""


class Ownership(Protocol):
    """What the prepare service knows about the GPU instances migdra created."""

    def owned_instances(self) -> set[tuple[str, int]]: ...

    def owned_placements(self) -> set[tuple[str, int, Placement]]: ...


def check_start_up(plugin: PluginSettings, prepare: PrepareSettings | None) -> Configuration:
    """Everything that can be checked before the API server or the hardware is touched; returns the
    loaded client configuration.  Raises :class:`ConfigurationError` naming the flag (or
    :class:`~kubeletplugin.grpc.sockets.SocketInUseError` when another instance serves our socket).
    It creates nothing; a stale socket a crashed instance left is removed, as serving would."""
    configuration = load_client_configuration(plugin.kubeconfig, flag=KUBECONFIG_FLAG, usual_rules=False)
    if prepare is None:  # publishing alone writes no files
        return configuration
    for flag, directory in (
        (_REGISTRY_FLAG, plugin.registry_dir),
        ("--plugin-dir (MIGDRA_PLUGIN_DIR)", plugin.plugin_directory),
        ("--cdi-dir (MIGDRA_CDI_DIR)", prepare.cdi_dir),
        ("--state-dir (MIGDRA_STATE_DIR)", prepare.state_dir),
    ):
        check_writable_directory(directory, flag)
    paths = plugin_socket_paths(plugin.driver_name, plugin.registry_dir, plugin.plugin_directory, plugin.pod_uid)
    for flag, path in (("--plugin-dir (MIGDRA_PLUGIN_DIR)", paths.dra), (_REGISTRY_FLAG, paths.registration)):
        if len(os.fsencode(path)) > MAX_SOCKET_PATH_BYTES:
            raise ConfigurationError(
                f"{flag} {path.parent}: the socket path {path} would be longer than {MAX_SOCKET_PATH_BYTES} "
                "bytes (the unix socket limit); give a shorter directory"
            )
        if path.exists() or path.is_symlink():
            SocketFile(path).prepare()  # another instance serving it, or not a socket: say so now
    return configuration


def check_writable_directory(directory: Path, flag: str) -> None:
    """``directory`` exists and takes new files, or can be created; nothing is created here."""
    problem = writable_directory_problem(directory)
    if problem is not None:
        raise ConfigurationError(f"{flag} {directory}: {problem}; give a writable directory")


class _Publishing:
    """The publish loop with its metrics and fatal-error handling, shared by both run modes."""

    def __init__(self, plugin: PluginSettings, registry: CollectorRegistry, stop: threading.Event) -> None:
        self.plugin = plugin
        self.device_config: DeviceModelConfig = load_device_model_config(
            plugin.device_config, driver_name=plugin.driver_name
        )
        self.metrics = PublishMetrics(registry)
        self.reporter = PoolReporter(self.metrics)
        self.policy = policy_named(plugin.placement_policy)
        if plugin.placement_policy not in PRODUCTION_POLICIES:
            log.warning(
                "--placement-policy %s is a comparison baseline (a model of another driver, for benchmarks), "
                "not meant for production; use %s",
                plugin.placement_policy,
                " or ".join(PRODUCTION_POLICIES),
            )
        self.fatal: list[BaseException] = []
        self.failed_rounds = 0
        self.last_round_finished = time.monotonic()
        self.last_pool: NodePool | None = None
        self.last_result = PublishResult()
        self.server = ""
        self._stop = stop
        self._lock = threading.Lock()
        self._pending_announcement: Callable[[], None] | None = None
        # The last pool and what it was built from: an unchanged rescan builds no new pool.
        self._built: tuple[object, NodePool] | None = None
        # Only the full plugin realizes, so only it publishes the binding conditions (run_plugin sets it).
        self.realize_before_bind = False
        # The GPU faults to render as device taints (run_plugin sets it with --device-taints).
        self.faults: Callable[[], tuple[GpuFault, ...]] | None = None
        self.fault_metrics: FaultMetrics | None = None
        self._loop: PublishLoop | None = None

    def trigger(self) -> None:
        """Re-publish now (a GPU fault came or went), if publishing has started."""
        if self._loop is not None:
            self._loop.trigger()

    def on_fatal(self, exc: BaseException) -> None:
        self.fatal.append(exc)
        self._stop.set()

    def on_failure(self, kind: RoundFailure, exc: BaseException, in_a_row: int) -> None:
        """Every failed round (logged by the loop); kept for the fatal line's count."""
        self.failed_rounds = in_a_row
        self.last_round_finished = time.monotonic()
        self.metrics.observe_publish_round(kind.value)

    def seconds_since_last_round(self) -> float:
        """Seconds since a publish round last finished, well or not (since start-up before the first):
        the liveness check's measure of a stuck publish loop."""
        return time.monotonic() - self.last_round_finished

    def on_round(self, pool: NodePool, result: PublishResult) -> None:
        self.last_round_finished = time.monotonic()
        self.metrics.observe_publish_round("success")
        self.last_pool = pool
        self.last_result = result
        self.reporter.report_pool(pool)
        self.reporter.report_publish(result)
        if self.fault_metrics is not None:
            self.fault_metrics.report_taints(tainted_devices(pool))
        if result.occupancy_only:
            self.metrics.observe_placement_republish(result.writes)
        with self._lock:
            pending, self._pending_announcement = self._pending_announcement, None
        if pending is not None:
            pending()

    def summary(self) -> str:
        """``2 GPUs, 50 devices published (pool generation 1)``: what the last round published."""
        pool, result = self.last_pool, self.last_result
        if pool is None:
            return "nothing published yet"
        gpus = len({device.gpu_uuid for device in pool.devices})
        return (
            f"{gpus} GPU{'' if gpus == 1 else 's'}, {len(pool.devices)} devices published "
            f"(pool generation {result.generation})"
        )

    def compute_pool(self, nvml: Nvml, ownership: Ownership | None, reader: InventoryReader | None = None) -> NodePool:
        """The pool from a fresh NVML read (through ``reader``, which asks only for what can change).

        What migdra owns is read before *and* after the inventory, so an instance being created (known
        by placement until its ID is recorded) or being destroyed (record dropped right after) never
        shows up as foreign for one round.  The same inventory and ownership as last time give the
        same pool object back (building one is pure), which the publisher recognises at once."""
        read = (reader or InventoryReader()).read
        if ownership is None:
            inventory = read_settled_inventory(nvml, read)
            owned: tuple[frozenset[tuple[str, int]], frozenset[tuple[str, int, Placement]]] = (frozenset(), frozenset())
        else:
            before = ownership.owned_instances()
            inventory = read_settled_inventory(nvml, read)
            owned = (frozenset(before | ownership.owned_instances()), frozenset(ownership.owned_placements()))
        faults = self.faults() if self.faults is not None else ()
        key = (inventory, owned, faults)
        built = self._built
        if built is not None and built[0] == key:
            return built[1]
        binding = realize_before_bind_conditions(self.device_config.driver_name) if self.realize_before_bind else None
        if ownership is None:
            pool = build_pool(inventory, self.device_config, binding=binding)
        else:
            pool = build_pool(
                inventory, self.device_config, owned_instances=owned[0], owned_placements=owned[1], binding=binding
            )
        pool = taint_pool(pool, faults)
        self._built = (key, pool)
        return pool

    @contextmanager
    def running(
        self,
        client: Client,
        nvml: Nvml,
        ownership: Ownership | None,
        claims: Informer | None,
    ) -> Iterator[SlicePublisher]:
        """Publish until the block ends; ``claims``: the process's claim informer (needed by an
        occupancy-aware policy, which re-publishes as claims come and go)."""

        def republish() -> None:  # the loop below: it needs the publisher, which needs the occupancy
            loop.trigger()

        if self.policy.uses_occupancy and claims is None:
            raise ValueError(f"placement policy {self.policy.name} reads the claims: give the claim informer")
        occupancy = (
            ClaimOccupancy(
                claims,
                self.device_config.driver_name,
                self.plugin.node_name,
                republish,
                debounce=self.plugin.placement_debounce,
                min_interval=self.plugin.placement_min_interval,
            )
            if claims is not None and self.policy.uses_occupancy
            else None
        )
        publisher = SlicePublisher(
            client,
            self.plugin.node_name,
            self.device_config.driver_name,
            self.policy,
            allocated=occupancy.allocated if occupancy is not None else None,
        )
        reader = InventoryReader()  # one per NVML session: it keeps the GPUs' listing
        loop = PublishLoop(
            publisher,
            lambda: self.compute_pool(nvml, ownership, reader),
            interval=self.plugin.rescan_interval,
            on_fatal=self.on_fatal,
            on_round=self.on_round,
            backoff=self.plugin.api_backoff,
            on_failure=self.on_failure,
        )
        self._loop = loop
        try:
            if occupancy is not None:
                occupancy.start()
                # The first publish in the order for the claims already allocated, not for an empty node
                # (one more generation written at every restart); bounded: an API outage delays it 5 s at most.
                if not occupancy.wait_synced(FIRST_LIST_WAIT_SECONDS):
                    log.info("no list of ResourceClaims yet: publishing; the placement order follows once there is")
            loop.start()
            log.info(
                "publishing ResourceSlices of node %s for %s (placement policy %s)",
                self.plugin.node_name,
                self.device_config.driver_name,
                self.policy.name,
            )
            yield publisher
        finally:
            if occupancy is not None:
                occupancy.stop()
            loop.stop()
            if self.plugin.cleanup_on_exit:
                try:
                    log.info("deleted %d ResourceSlices on exit", publisher.delete_all(self.plugin.api_backoff))
                except ApiRequestError as exc:
                    log.error("could not delete the ResourceSlices on exit: %s", exc)

    def exit_code(self) -> int:
        """0, or raises :class:`PublishingError` when publishing kept failing (one line: the last failure)."""
        if self.fatal:
            raise PublishingError(
                f"publishing the ResourceSlices of node {self.plugin.node_name} kept failing "
                f"({self.failed_rounds} rounds in a row): {describe_failure(self.fatal[0], self.server)}"
            ) from self.fatal[0]
        return 0

    def announce_when_published(self, announce: Callable[[str], None], line: Callable[[], str]) -> None:
        """Call ``announce(line())`` once: now if a round has published, else after the first that does."""
        with self._lock:
            if self.last_pool is None:
                self._pending_announcement = lambda: announce(line())
                return
        announce(line())


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
    work, and :class:`PublishingError` when publishing kept failing."""
    if plugin.realize_before_bind:
        raise ConfigurationError(
            "--realize-before-bind (MIGDRA_REALIZE_BEFORE_BIND) needs the whole plugin: with --publish-only nothing "
            "would realize the claims, and every pod would wait for its binding conditions until they time out"
        )
    set_node(plugin.node_name)
    registry = CollectorRegistry()
    publishing = _Publishing(plugin, registry, stop)
    configuration = check_start_up(plugin, prepare=None)
    publishing.server = str(configuration.host)
    publishing.announce_when_published(
        announce,
        lambda: (
            f"migdra kubelet-plugin: publishing node {plugin.node_name} for "
            f"{publishing.device_config.driver_name} to {publishing.server} (publish only): {publishing.summary()}"
        ),
    )
    with (
        serving_metrics(plugin.metrics_address, registry),
        serving_liveness(plugin.healthcheck_address, lambda: _publish_problem(plugin, publishing)),
        api_connection(configuration, DEFAULT_REQUEST_TIMEOUT) as client,
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
    publishing = _Publishing(plugin, registry, stop)
    publishing.realize_before_bind = plugin.realize_before_bind
    driver_name = publishing.device_config.driver_name
    configuration = check_start_up(plugin, prepare)
    simulated = nvml_settings.nvml == "simulated"
    driver_files = load_driver_edits(prepare, simulated=simulated)  # before the API or the hardware
    publishing.server = str(configuration.host)
    metrics = PrepareMetrics(registry)
    publishing.fault_metrics = FaultMetrics(registry) if plugin.device_taints else None
    served: list[PluginServers] = []  # once kubelet's sockets are served: what the liveness check calls
    with (
        serving_metrics(plugin.metrics_address, registry),
        serving_liveness(plugin.healthcheck_address, lambda: _liveness_problem(plugin, publishing, served)),
        api_connection(configuration, prepare.api_timeout) as client,
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
        service = PrepareService.from_settings(
            prepare,
            nvml=nvml,
            client=client,
            node_name=plugin.node_name,
            driver_name=driver_name,
            reporter=reporter,
            metrics=metrics,
            driver_edits=driver_files[1] if driver_files is not None else None,
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
            publishing.faults = faults.faults
        register_mig_instances(registry, plugin.node_name, service.prepared_instances)
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
            if realizer is not None:  # after recovery: it releases records realized ahead that lost their claim
                realizer.start()
            if faults is not None:
                faults.start((gpu.uuid, gpu.index) for gpu in nvml.list_gpus())
            with publishing.running(client, nvml, ownership=service, claims=claims):
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


def _liveness_problem(plugin: PluginSettings, publishing: _Publishing, served: list[PluginServers]) -> str | None:
    """Why the node process is not alive, or None: kubelet's sockets answer and publishing is not stuck."""
    if not served:
        return "starting: kubelet's sockets are not served yet"
    return probe_sockets(served[0].paths) or _publish_problem(plugin, publishing)


def _publish_problem(plugin: PluginSettings, publishing: _Publishing) -> str | None:
    """Why publishing looks stuck (no round finished for :attr:`PluginSettings.publish_stuck_after`), or None."""
    idle, limit = publishing.seconds_since_last_round(), plugin.publish_stuck_after
    if idle > limit:
        return f"the publish loop has finished no round for {idle:.0f} s (stuck after {limit:g} s)"
    return None


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
