"""``migdra controller``: wire settings, API client, metrics, leader election and the loop, and run.

Start-up order: configuration (a bad kubeconfig or setting is one line, exit 2), the metrics endpoint,
the caches (every replica lists and watches, so a new leader starts warm), then leader election; the
loop writes only while this replica leads.  Losing the Lease is fatal: the process exits with status 1
and Kubernetes starts it again as a follower (client-go's controllers do the same), so two replicas
can never both believe they lead.  SIGTERM stops in order: release the Lease, stop the loop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from dra_driver.controller.controller import ReservationController
from dra_driver.controller.leader import LeaderElector, LeaseTiming
from dra_driver.controller.occupancy_metrics import OccupancyMetrics
from dra_driver.controller.ratelimit import TokenBucket
from dra_driver.controller.reservation_metrics import ReservationMetrics
from dra_driver.controller.settings import ControllerSettings
from dra_driver.kube.client import Client
from dra_driver.kube.config import load_client_configuration
from dra_driver.kube.events import EventRecorder
from dra_driver.kube.loop import SYNC_TIMEOUT_SECONDS
from dra_driver.serving import serving_metrics

log = logging.getLogger(__name__)

EXIT_LOST_LEADERSHIP = 1


def run_controller(settings: ControllerSettings, stop: threading.Event, announce: Callable[[str], None]) -> int:
    """Run until ``stop`` is set (0) or leadership is lost (1)."""
    identity = settings.holder_identity
    configuration = load_client_configuration(
        settings.kubeconfig, flag="--kubeconfig (MIGDRA_CONTROLLER_KUBECONFIG)", usual_rules=True
    )
    client = Client(configuration=configuration)
    registry = CollectorRegistry()
    metrics = ReservationMetrics(registry)
    occupancy_metrics = OccupancyMetrics(registry)
    lost = threading.Event()
    elector: LeaderElector | None = None
    if settings.leader_elect:
        timing = LeaseTiming(settings.lease_duration, settings.renew_deadline, settings.retry_period)

        def started() -> None:
            metrics.leader.set(1)
            controller.changes.bump()

        def stopped() -> None:
            metrics.leader.set(0)
            if not stop.is_set():
                lost.set()
                stop.set()

        elector = LeaderElector(client, settings.lease_namespace, settings.lease, identity, timing, started, stopped)
    recorder = EventRecorder(client, f"{settings.driver_name}-controller", host=identity)
    controller = ReservationController(
        client,
        settings.driver_name,
        recorder,
        metrics,
        is_leader=lambda: elector is None or elector.is_leader,
        resync=settings.resync_interval,
        write_rate=TokenBucket(settings.write_qps, settings.write_burst),
        # The leader exports the per-GPU picture it computed from (followers export none, so a
        # dashboard never sums the same GPU twice).
        on_occupancy=occupancy_metrics.update,
    )
    with serving_metrics(
        settings.metrics_address,
        registry,
        "--metrics-address (MIGDRA_CONTROLLER_METRICS_ADDRESS)",
        healthz=controller.liveness_problem,
    ):
        controller.start()
        try:
            if not controller.wait_synced(SYNC_TIMEOUT_SECONDS):
                log.warning("the first lists of claims and slices did not arrive in %.0f s", SYNC_TIMEOUT_SECONDS)
            if elector is not None:
                elector.start()
            else:
                metrics.leader.set(1)
            announce(
                f"migdra controller: {identity} reserving claims of {settings.driver_name}"
                + (f" (Lease {settings.lease_namespace}/{settings.lease})" if elector is not None else "")
            )
            stop.wait()
        finally:
            if elector is not None:
                elector.stop()
            controller.stop()
            client.close()
    if lost.is_set():
        log.error("exiting: leadership lost")
        return EXIT_LOST_LEADERSHIP
    return 0
