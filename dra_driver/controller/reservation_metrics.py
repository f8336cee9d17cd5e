"""Prometheus metrics of the reservation controller's own work, on a registry passed in.

The per-GPU occupancy series (free slices, largest allocatable profile, fragmentation) are
:mod:`dra_driver.controller.occupancy_metrics`'s; these say what the controller decided and wrote.
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
            "claim status writes by result (success, conflict, refused, error)",
            ["result"],
            registry=registry,
        )
        self.leader = Gauge("migdra_controller_leader", "1 while this replica holds the Lease", registry=registry)
        self.shares = Gauge(
            "migdra_gpu_instance_shares",
            "claims sharing one shared GPU-instance device (each with its own compute instance), per device",
            ["node", "device"],
            registry=registry,
        )
        self.share_slices = Gauge(
            "migdra_gpu_instance_share_compute_slices",
            "compute slices the shares of one shared GPU-instance device consume together, per device",
            ["node", "device"],
            registry=registry,
        )
        self._nodes: set[str] = set()
        self._shared: set[tuple[str, str]] = set()

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
        self._observe_shares(reservations)

    def _observe_shares(self, reservations: Sequence[DeviceReservation]) -> None:
        """Shares per shared device; a device whose last share went reads 0 (its series is not dropped,
        so a dashboard sees the drop)."""
        shares: Tally[tuple[str, str]] = Tally()
        slices: Tally[tuple[str, str]] = Tally()
        for reservation in reservations:
            if reservation.share_id is None or reservation.device is None:
                continue
            key = (reservation.device.node, reservation.device_name)
            shares[key] += 1
            slices[key] += reservation.share_slices or 0
        for node, device in self._shared - set(shares):
            self.shares.labels(node=node, device=device).set(0)
            self.share_slices.labels(node=node, device=device).set(0)
        for (node, device), count in shares.items():
            self.shares.labels(node=node, device=device).set(count)
            self.share_slices.labels(node=node, device=device).set(slices[(node, device)])
        self._shared |= set(shares)
