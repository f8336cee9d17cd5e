"""Prometheus metrics of the reservation controller's own work, on a registry passed in.

The per-GPU occupancy series (free slices, largest allocatable profile, fragmentation) are
:mod:`dra_driver.controller.metrics`'s; these say what the controller decided and wrote.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge

from dra_driver.controller.reservations import DeviceReservation, Verdict


class ReservationMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.reservations = Gauge(
            "migdra_reservations",
            "allocated devices of this driver by verdict (Reserved, PlacementConflict, DeviceGone, Unknown)",
            ["verdict"],
            registry=registry,
        )
        self.conflicts = Gauge(
            "migdra_reservation_conflicts",
            "allocated devices whose placement overlaps another claim's on the same GPU, per node",
            ["node"],
            registry=registry,
        )
        self.writes = Counter(
            "migdra_controller_status_writes_total",
            "claim status writes by result (success, conflict, error)",
            ["result"],
            registry=registry,
        )
        self.leader = Gauge("migdra_controller_leader", "1 while this replica holds the Lease", registry=registry)
        self._nodes: set[str] = set()

    def observe(self, reservations: Sequence[DeviceReservation]) -> None:
        verdicts = Tally(r.verdict for r in reservations)
        for verdict in Verdict:
            self.reservations.labels(verdict=verdict.value).set(verdicts.get(verdict, 0))
        per_node = Tally(r.device.node for r in reservations if r.verdict is Verdict.CONFLICT and r.device is not None)
        for node in self._nodes - set(per_node):
            self.conflicts.labels(node=node).set(0)
        for node, count in per_node.items():
            self.conflicts.labels(node=node).set(count)
        self._nodes |= set(per_node)
