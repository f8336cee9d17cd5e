"""Publishing the node's ResourceSlices as one part of the node process: the publish loop with its
metrics, its pool cache, its start-up announcement and its fatal-error handling, shared by both run
modes (:func:`kubeletplugin.app.run_plugin` and :func:`~kubeletplugin.app.run_publish_only`).

The loop itself (rounds, backoff, triggers) is :class:`kubeletplugin.publisher.PublishLoop`; what a
round writes is :class:`kubeletplugin.publisher.SlicePublisher`.  This module builds the pool a round
publishes -- from a fresh NVML read, what migdra owns, the GPU faults and the placement policy -- and
wires the occupancy a ``dynamic`` policy reads from the process's claim informer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from prometheus_client import CollectorRegistry

from dra_driver.device_config import load_device_model_config
from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.faults import GpuFault, taint_pool, tainted_devices
from dra_driver.devicemodel.policy import PRODUCTION_POLICIES, DynamicPlacementPolicy
from dra_driver.devicemodel.policy import placement_policy as policy_named
from dra_driver.devicemodel.pool import NodePool, OwnedInstances, build_pool
from dra_driver.devicemodel.vocabulary import realize_before_bind_conditions
from dra_driver.errors import MigdraError
from dra_driver.kube.client import Client
from dra_driver.kube.failures import ApiRequestError, describe_failure
from dra_driver.kube.informer import Informer
from dra_driver.mig.catalog import Placement
from dra_driver.nvml.backend import Nvml
from kubeletplugin.control_plane_version import ControlPlaneVersion
from kubeletplugin.metrics import FaultMetrics, PublishMetrics
from kubeletplugin.occupancy import FIRST_LIST_WAIT_SECONDS, ClaimOccupancy
from kubeletplugin.pool_report import PoolReporter
from kubeletplugin.publisher import (
    InventoryReader,
    PublishLoop,
    PublishResult,
    RoundFailure,
    SlicePublisher,
    read_settled_inventory,
)
from kubeletplugin.settings import PluginSettings

log = logging.getLogger(__name__)


def _share_order(item: tuple[tuple[str, int, Placement], tuple[Placement, ...]]) -> tuple[str, int, int]:
    (gpu_uuid, profile_id, placement), _ = item
    return gpu_uuid, profile_id, placement.start


class PublishingError(MigdraError):
    """Publishing the node's ResourceSlices kept failing for a reason an API outage does not explain
    (the API server refused the slices, NVML failed, a bug) ``fatal_after`` rounds in a row; the
    process exits with status 1 and one line naming the last failure, so Kubernetes restarts it.  An
    outage alone never raises it: prepare and unprepare must keep working from the checkpoint."""


class Ownership(Protocol):
    """What the prepare service knows about the GPU instances migdra created."""

    def owned(self) -> OwnedInstances: ...

    def live_shares(self) -> int: ...

    def share_compute_instances(self) -> dict[tuple[str, int, Placement], tuple[Placement, ...]]: ...


class Publishing:
    """The publish loop with its metrics and fatal-error handling, shared by both run modes."""

    def __init__(
        self,
        plugin: PluginSettings,
        registry: CollectorRegistry,
        stop: threading.Event,
        *,
        fault_metrics: FaultMetrics | None = None,
    ) -> None:
        """Everything publishing needs is known here, but the API server (from :meth:`running`'s client)
        and the GPU faults to render as taints (given to :meth:`running` once the fault store loaded)."""
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
        self.server = ""  # the API server's URL, for messages: set by running()
        self._stop = stop
        self._lock = threading.Lock()
        self._pending_announcement: Callable[[], None] | None = None
        # The last pool and what it was built from: an unchanged rescan builds no new pool.
        self._built: tuple[object, NodePool] | None = None
        # Only the full plugin realizes (publish-only refuses the flag), so only it publishes the binding conditions.
        self.realize_before_bind = plugin.realize_before_bind
        # The GPU faults to render as device taints (with --device-taints; given to running()).
        self.faults: Callable[[], tuple[GpuFault, ...]] | None = None
        self.fault_metrics = fault_metrics
        self._loop: PublishLoop | None = None
        self._occupancy: ClaimOccupancy | None = None
        self._client: Client | None = None  # running()'s: asked for the API server's version
        self._control_plane: ControlPlaneVersion | None = None  # None: the version is not known yet

    def loops(self) -> tuple[ClaimOccupancy, ...]:
        """The background loops publishing runs besides its own (the occupancy of a ``dynamic`` policy),
        for the liveness check; the publish loop's own measure is :func:`publish_problem`."""
        return (self._occupancy,) if self._occupancy is not None else ()

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

        What migdra owns is read before *and* after the inventory, each time IDs and placements from one
        read of the records (:class:`~dra_driver.devicemodel.pool.OwnedInstances`), so an instance being
        created (known by placement until its ID is recorded) or being destroyed (record dropped right
        after) never shows up as foreign for one round.  The same inventory and ownership as last time give the
        same pool object back (building one is pure), which the publisher recognises at once."""
        read = (reader or InventoryReader()).read
        shares: dict[tuple[str, int, Placement], tuple[Placement, ...]] = {}
        if ownership is None:
            inventory = read_settled_inventory(nvml, read)
            owned = OwnedInstances()
        else:
            before = ownership.owned()
            inventory = read_settled_inventory(nvml, read)
            owned = before | ownership.owned()
            shares = ownership.share_compute_instances()
        faults = self.faults() if self.faults is not None else ()
        config = self._effective_config(ownership.live_shares() if ownership is not None else 0)
        key = (inventory, owned, faults, config.shared_devices, tuple(sorted(shares.items(), key=_share_order)))
        built = self._built
        if built is not None and built[0] == key:
            return built[1]
        binding = realize_before_bind_conditions(config.driver_name) if self.realize_before_bind else None
        if ownership is None:
            pool = build_pool(inventory, config, binding=binding)
        else:
            pool = build_pool(
                inventory,
                config,
                owned_instances=owned.instances,
                owned_placements=owned.placements,
                binding=binding,
                share_compute_instances=shares,
            )
        pool = taint_pool(pool, faults)
        self._built = (key, pool)
        return pool

    def _effective_config(self, live_shares: int = 0) -> DeviceModelConfig:
        """The device configuration a round publishes: shared devices only once the API server's version
        is known to be new enough (:mod:`~kubeletplugin.control_plane_version`).  Until the version could
        be read (an API outage at start) the round fails as any round the API server does not answer --
        retried after the publish loop's backoff, never fatal for an outage -- rather than publish a pool
        without them that only the next rescan would correct; once known, the answer stays.
        Outside :meth:`running` (no API server to ask: a benchmark, a test) the configuration is as given.

        While shares are prepared on the node (``live_shares``) the shared devices stay published,
        whatever the setting or the version: kube-scheduler counts the counters of an allocated device
        only while the device is in the slices, so withdrawing a shared device whose shares live would
        make the exclusive devices overlapping their GPU instance allocatable (the node would refuse
        them at prepare, and their pods would never start).  ``sharedDevices: false`` takes effect once
        the last share is gone."""
        if live_shares and not self.device_config.shared_devices:
            return self.device_config.model_copy(update={"shared_devices": True})
        control_plane = self._control_plane_version()
        if live_shares or control_plane is None or not self.device_config.shared_devices:
            return self.device_config
        if control_plane.shared_devices_problem() is None:
            return self.device_config
        return self.device_config.model_copy(update={"shared_devices": False})

    def _control_plane_version(self) -> ControlPlaneVersion | None:
        """The control plane's version, read once (a failed read fails the round); None outside
        :meth:`running`.  On first reading it, what it limits is said once in the log (and the scale
        gauge), and the ``dynamic`` policy interleaves its profiles only where slices are visited in name
        order."""
        if self._control_plane is not None or self._client is None:
            return self._control_plane
        version = ControlPlaneVersion.parse(self._client.server_version())  # fails the round if unanswered
        self._control_plane = version
        shared = version.shared_devices_problem()
        if shared is not None and self.device_config.shared_devices:
            log.warning("%s", shared)
        scale = version.scale_problem()
        self.metrics.control_plane_scale_limited.set(1 if scale is not None else 0)
        if scale is not None:
            log.warning("%s", scale)
        if isinstance(self.policy, DynamicPlacementPolicy) and not version.slices_in_name_order:
            self.policy.interleave = False
            log.info(
                "the API server is %s: kube-scheduler visits slices in no fixed order before 1.36, so the dynamic "
                "placement policy lists each profile in one slice (not interleaved)",
                version.git_version,
            )
        return version

    @contextmanager
    def running(
        self,
        client: Client,
        nvml: Nvml,
        ownership: Ownership | None,
        claims: Informer | None,
        faults: Callable[[], tuple[GpuFault, ...]] | None = None,
    ) -> Iterator[SlicePublisher]:
        """Publish until the block ends; ``claims``: the process's claim informer (needed by an
        occupancy-aware policy, which re-publishes as claims come and go); ``faults``: the GPU faults
        to render as device taints (the fault watcher's, with --device-taints)."""
        self.server = client.server
        self.faults = faults
        self._client = client

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
                self._occupancy = occupancy
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


def publish_problem(plugin: PluginSettings, publishing: Publishing) -> str | None:
    """Why publishing looks stuck (no round finished for :attr:`PluginSettings.publish_stuck_after`), or None."""
    idle, limit = publishing.seconds_since_last_round(), plugin.publish_stuck_after
    if idle > limit:
        return f"the publish loop has finished no round for {idle:.0f} s (stuck after {limit:g} s)"
    return None
