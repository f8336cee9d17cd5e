"""The reservation controller's loop: allocated claims in, exact placements on their status out.

What it watches: every ResourceClaim (all namespaces) and this driver's ResourceSlices, each through a
list-then-watch cache (:class:`dra_driver.kube.informer.Informer`: relists on 410 Gone, backs off on
errors).  What it writes: for every allocated device of the driver, the controller's part of the claim's
``status.devices[]`` entry (:mod:`dra_driver.claimstatus`, :mod:`.status`), by server-side apply as its
own field manager, and an Event when the ``Reserved`` condition changes.  It keeps no state of its own
beyond the caches and what it derives from them: a restarted or newly elected replica converges every
claim from one list.

How it runs (docs/architecture.md, "Concurrency"): one thread (:class:`dra_driver.kube.loop.ControlLoop`).
Each pass brings its :class:`~dra_driver.controller.index.ReservationIndex` up to date with what
changed in the caches since the last pass -- only the pools those claims and slices touch are
recomputed, so a pass costs in proportion to what changed, not to the cluster -- and looks at the
claims whose reservations changed or which changed, plus those still waiting (a write the rate held
back, a backoff): for each, its status is written where it differs.  A claim whose write failed waits
out its own capped backoff (other claims are not held up); all writes together are limited to a rate
with a burst.  The metrics' whole-cluster picture is refreshed at most every
:data:`METRICS_INTERVAL_SECONDS`.  Leadership gates writing only: a follower keeps its caches warm and
computes nothing (a new leader's first pass reads everything).

Fail closed: until both caches hold a first complete list, nothing is written; a device is declared
gone only from a completely listed pool (:mod:`.reservations`), and a claim with a device in a pool
not completely listed is not written at all; a write applies only the controller's fields, so nothing
another writer owns is sent or lost.  It never deallocates a claim, never touches the plugin's
conditions or the ``data`` the plugin holds, and never writes a device its claim no longer holds.  A
status the API server refuses for good (422, 403) is an error line and a Warning Event on the claim,
and is not written again until the claim changes.

Must never: import the node plugin or the local control plane, or act on a cache that is not synced.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from dra_driver import claimstatus
from dra_driver.claimstatus import EVENT_STATUS_WRITE_REFUSED, DeviceEntry, controller_field_manager, rfc3339
from dra_driver.clusterview import compute_cluster_occupancy
from dra_driver.controller.index import Key, ReservationIndex
from dra_driver.controller.ratelimit import TokenBucket
from dra_driver.controller.reservation_metrics import ReservationMetrics
from dra_driver.controller.reservations import DeviceReservation
from dra_driver.controller.status import Transition, compute_claim_entries
from dra_driver.devicemodel.occupancy import GpuOccupancy
from dra_driver.kube.client import CLAIMS, SLICES, Client, status_code
from dra_driver.kube.events import EventRecorder
from dra_driver.kube.failures import (
    ApiFailure,
    Backoff,
    BackoffPolicy,
    classify_failure,
    describe_failure,
    retry_conflicts,
    status_of,
)
from dra_driver.kube.informer import Changes, Informer
from dra_driver.kube.loop import ControlLoop
from dra_driver.logs import log_context
from dra_driver.resourceclaim import ResourceClaimView, parse_claim

log = logging.getLogger(__name__)

WRITE_BACKOFF = BackoffPolicy(initial=0.5, maximum=60.0)
METRICS_INTERVAL_SECONDS = 10.0
"""How often at most the metrics' whole-cluster picture (every reservation, every GPU's occupancy) is
computed: it costs in proportion to the cluster, so not on every pass (Prometheus scrapes every 15 s
or more)."""


class ReservationController(ControlLoop):
    """See the module docstring.  ``is_leader`` is asked before every pass and every write."""

    def __init__(
        self,
        client: Client,
        driver: str,
        recorder: EventRecorder,
        metrics: ReservationMetrics,
        *,
        is_leader: Callable[[], bool],
        resync: float = 60.0,
        write_rate: TokenBucket | None = None,
        on_occupancy: Callable[[Mapping[str, Sequence[GpuOccupancy]]], None] | None = None,
    ) -> None:
        changes = Changes()
        self.client = client
        self.driver = driver
        self.recorder = recorder
        self.metrics = metrics
        self.is_leader = is_leader
        self.claims = Informer(client, CLAIMS, changes)
        self.slices = Informer(client, SLICES, changes, field_selector=f"spec.driver={driver}")
        self.write_rate = write_rate or TokenBucket(rate=20.0, burst=50)
        self.on_occupancy = on_occupancy  # pool -> its GPUs now, for the pools that changed
        self._backoffs: dict[str, tuple[Backoff, float]] = {}  # claim UID -> (its backoff, not before)
        self._refused: dict[str, str] = {}  # claim UID -> the resourceVersion whose status was refused
        self._index = ReservationIndex(driver)
        self._waiting: set[Key] = set()  # claims to look at: changed, or held back by the rate or a backoff
        self._metrics_due = 0.0  # monotonic time of the next metrics refresh (0: at the next pass)
        self.field_manager = controller_field_manager(driver)
        self._wake_at: float | None = None
        super().__init__("reservation-controller", changes, [self.claims, self.slices], resync)

    # -- one pass ------------------------------------------------------------------------------

    def sync(self) -> None:
        self._wake_at = None
        if not self.is_leader():
            self._index = ReservationIndex(self.driver)  # a leader again reads everything afresh
            self._waiting.clear()
            return
        if not (self.claims.wait_synced(0) and self.slices.wait_synced(0)):
            return  # fail closed: no decision from a cache that never listed
        changed = self._index.refresh(self.claims, self.slices)
        self._waiting |= changed
        self._refresh_metrics(bool(changed))
        now = time.monotonic()
        for key in sorted(self._waiting):
            if self.stopping or not self.is_leader():
                return
            claim = self._index.claim(key)
            held = self._index.reservations_of(key)
            if claim is None or not held:
                self._waiting.discard(key)  # deleted, or holds nothing of the driver any more
                continue
            uid = claim.metadata.uid
            backoff = self._backoffs.get(uid)
            if backoff is not None and backoff[1] > now:
                self._wake(backoff[1])
                continue
            if self._refused.get(uid) == (claim.metadata.resource_version or ""):
                self._waiting.discard(key)
                continue  # refused as it is: again once the claim changes
            desired = self._desired(claim, held)
            if desired[0] is None:
                self._waiting.discard(key)
                continue
            wait = self.write_rate.take()
            if wait > 0:
                self._wake(time.monotonic() + wait)
                return  # the rest in the next pass, after the rate allows more
            with log_context(claim_uid=uid or None, claim=claim.metadata.label):
                self._converge(claim, held, desired)
            if uid not in self._backoffs:
                self._waiting.discard(key)
        self._forget_backoffs()

    def _refresh_metrics(self, changed: bool) -> None:
        """The metrics' whole picture, at most every :data:`METRICS_INTERVAL_SECONDS` while things change."""
        now = time.monotonic()
        if changed and self._metrics_due == float("inf"):
            self._metrics_due = 0.0  # a change after a quiet spell: its picture is due
        if now < self._metrics_due:
            self._wake(self._metrics_due)
            return
        self.metrics.observe(self._index.all_reservations())
        touched = self._index.take_touched_pools()
        if self.on_occupancy is not None and touched:
            # per pool, as the reservations: a pool that did not change is not computed again
            self.on_occupancy(
                {pool: compute_cluster_occupancy(*self._index.pool_objects(pool), self.driver) for pool in touched}
            )
        self._metrics_due = now + METRICS_INTERVAL_SECONDS if changed else float("inf")

    def next_wake(self) -> float:
        if self._wake_at is None:
            return self.resync
        return max(0.05, min(self.resync, self._wake_at - time.monotonic()))

    def _wake(self, at: float) -> None:
        self._wake_at = at if self._wake_at is None else min(self._wake_at, at)

    def _forget_backoffs(self) -> None:
        """Drop the backoffs and refusals of claims that no longer hold a device of the driver."""
        for uid in [uid for uid in self._backoffs if not self._index.holds(uid)]:
            del self._backoffs[uid]
        for uid in [uid for uid in self._refused if not self._index.holds(uid)]:
            del self._refused[uid]

    # -- one claim -----------------------------------------------------------------------------

    def _desired(
        self, claim: ResourceClaimView, held: Sequence[DeviceReservation]
    ) -> tuple[list[DeviceEntry] | None, list[Transition]]:
        """The entries to apply to the claim (None when it already says them, or when a pool is not
        completely listed) and its transitions.

        Only devices the claim *as given* still holds are written: a reservation computed from an
        older copy of the claim is dropped rather than written onto a claim allocated differently.
        """
        still_held = {(r.pool, r.device, r.share) for r in claim.results_of(self.driver)}
        current = [r for r in held if (r.pool, r.device_name, r.share_id) in still_held]
        if not current:
            return None, []
        observed = claim.metadata.generation
        now = rfc3339(datetime.now(UTC))
        holdings = claimstatus.compute_holdings(claim)  # once per claim and pass: both steps read it
        entries, transitions = compute_claim_entries(
            claim, self.driver, self.field_manager, current, observed, now, holdings
        )
        if entries is None or claimstatus.is_applied(claim, self.field_manager, self.driver, entries, holdings):
            return None, []
        return entries, transitions

    def _converge(
        self,
        claim: ResourceClaimView,
        held: Sequence[DeviceReservation],
        desired: tuple[list[DeviceEntry] | None, list[Transition]],
    ) -> None:
        """Apply the controller's part of the claim's status (``desired``, computed from ``claim``).

        A 409 means another manager took a field the body holds -- the node plugin took ``data`` since
        the claim was read --: the claim is read again and the part recomputed from its
        ``managedFields`` (:func:`~dra_driver.kube.failures.retry_conflicts`).  A refusal retrying
        cannot fix is one error line and a Warning Event, and the claim waits until it changes
        (:meth:`_refuse`); any other failure backs this claim off alone (:meth:`_fail`).
        """
        uid, namespace, name = claim.metadata.uid, claim.metadata.namespace, claim.metadata.name
        latest: list[tuple[ResourceClaimView, tuple[list[DeviceEntry] | None, list[Transition]]] | None] = [
            (claim, desired)
        ]

        def attempt() -> tuple[dict[str, Any] | None, list[Transition]] | None:
            """Written claim and transitions; (None, []) when the claim already says it; None to stop."""
            if latest[0] is None:  # a conflict: read again and recompute
                obj = self.client.get(CLAIMS, namespace, name)
                fresh = parse_claim(obj) if obj is not None else None
                if fresh is None or fresh.metadata.uid != uid:
                    return None  # deleted, re-created as another claim, or unreadable: the watch says so
                latest[0] = (fresh, self._desired(fresh, held))
            _, (entries, transitions) = latest[0] or (claim, desired)
            if entries is None:
                return None, []
            if not self.is_leader():
                return None
            body = claimstatus.build_apply_body(namespace, name, uid, self.driver, entries)
            try:
                return self.client.apply_status(CLAIMS, body, field_manager=self.field_manager), transitions
            except Exception as exc:
                if classify_failure(exc) is ApiFailure.CONFLICT:
                    self.metrics.writes.labels(result="conflict").inc()
                    latest[0] = None
                raise

        try:
            outcome = retry_conflicts(attempt, what=f"status of claim {namespace}/{name}")
        except Exception as exc:
            if status_code(exc) == 404 or claimstatus.is_uid_mismatch(status_of(exc)):
                return  # deleted or re-created meanwhile: the watch says so
            if classify_failure(exc) is ApiFailure.PERMANENT:
                self._refuse(claim, exc)
            else:
                self._fail(uid, namespace, name, exc)
            return
        if outcome is None:
            return
        written, transitions = outcome
        self._backoffs.pop(uid, None)
        if written is None:
            return
        self.metrics.writes.labels(result="success").inc()
        self.claims.assume(written)
        for transition in transitions:
            self.recorder.event(CLAIMS, written, transition.event_type, transition.reason, transition.message)

    def _refuse(self, claim: ResourceClaimView, exc: BaseException) -> None:
        """The API server refused the claim's status for a reason retrying cannot fix (a 422, a 403): one
        error line and a Warning Event naming the claim and the reason; no retry until the claim
        changes (its ``resourceVersion``)."""
        meta = claim.metadata
        uid, namespace, name = meta.uid, meta.namespace, meta.name
        self.metrics.writes.labels(result="refused").inc()
        self._backoffs.pop(uid, None)
        self._refused[uid] = meta.resource_version or ""
        reason = describe_failure(exc)
        log.error(
            "claim %s/%s (UID %s): status refused, not retried until the claim changes: %s",
            namespace,
            name,
            uid,
            reason,
        )
        message = f"reservation controller: the API server refused the status of claim {namespace}/{name}: {reason}"
        self.recorder.event(CLAIMS, meta.involved(), "Warning", EVENT_STATUS_WRITE_REFUSED, message[:1024])

    def _fail(self, uid: str, namespace: str, name: str, exc: BaseException) -> None:
        self.metrics.writes.labels(result="error").inc()
        backoff, _ = self._backoffs.get(uid) or (WRITE_BACKOFF.start(), 0.0)
        delay = backoff.next_delay(exc)
        self._backoffs[uid] = (backoff, time.monotonic() + delay)
        self._wake(time.monotonic() + delay)
        log.warning(
            "claim %s/%s (UID %s): status not written: %s; again in %.1f s",
            namespace,
            name,
            uid,
            describe_failure(exc),
            delay,
        )
