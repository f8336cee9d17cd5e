"""The writer of the plugin's part of a claim's status: ``status.devices[]`` entries and Events.

**What it writes** is computed in :mod:`~kubeletplugin.prepare.claim_status` (pure): for a prepared
record, identity + Ready for each of its devices; no record, or one still being prepared or released,
nothing of ours (NVIDIA #1456).  Beside the status, a core/v1 Event (``involvedObject`` = the claim, so
``kubectl describe resourceclaim`` shows it) for prepare success, prepare failure and unprepare, through
:class:`dra_driver.kube.events.EventRecorder`: a failure kubelet's retries meet again and again is one
Event whose ``count`` grows, not an Event per retry.

**The checkpoint is the truth; the claim's status follows it.** A status write does not carry what
to write: it *converges* the claim -- reads the claim, reads the claim's checkpoint record, and makes
this driver's entries in this node's pool say exactly that (a prepared record: identity + Ready for
each of its devices; no record, or one still being prepared or released: nothing of ours).  So a
write that comes late (after an API outage) or twice writes the truth as it is *then*, never a stale
intention.  Writes that cannot be made at all -- dropped at shutdown, refused, or an unprepare whose
report never happened (its CDI spec could not be deleted and the plugin restarted before kubelet's
retry, which would have reported it) -- are caught by the **reconciliation**, the loop's periodic
resync: on start and every ``reconcile_interval`` it compares every claim's entries of this driver and
pool in the process's claim informer (the one cache of ResourceClaims the node process keeps, shared
with the placement occupancy and realize before bind) with the checkpoint, and converges those that
differ.  It reads the claims *before* the checkpoint: status says Ready only after the record said
prepared, so a claim seen Ready whose record is gone by the later read was unprepared in between
(cleared rightly), and the converge write reads both again anyway.  Nothing is decided before the
informer's first complete list.

So the reporter is a set of claims to converge (a newer report of a claim replaces a pending one: both
converge to the same truth), the Events to write, and that resync, on one
:class:`~dra_driver.kube.loop.ControlLoop`: each pass writes, in the order they were queued, what is
due.  A write reads the claim, then applies this node's plugin's part alone by server-side apply on the
``status`` subresource, as the field manager ``<driver>/kubeletplugin/<node>`` with force
(:mod:`dra_driver.claimstatus`: the plugin takes ``data`` over from the reservation controller); other
drivers', other pools' and other writers' fields are never sent, so never touched.  They give way to
kubelet's calls (:meth:`ClaimReporter.call_in_flight`).  What a failure means comes from
:func:`dra_driver.kube.failures.classify_failure`: while the API server is unavailable the whole queue
waits (one capped, jittered backoff for all, so an outage is one log line per attempt, not one per
claim) and nothing is given up; a refused write (403, 422) is one error line and a Warning Event
``ClaimStatusRefused`` on the claim, and is dropped (the reconciliation tries again once the claim has
changed); a bug is retried ``max_attempts`` times.  Nothing here ever fails prepare or unprepare.  A
claim that is gone (404) or was re-created (other UID) is left alone.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from kubernetes.client.exceptions import ApiException

from dra_driver import claimstatus
from dra_driver.claimstatus import EVENT_STATUS_WRITE_REFUSED, plugin_field_manager, rfc3339
from dra_driver.kube.client import CLAIMS, Client
from dra_driver.kube.events import EventRecorder
from dra_driver.kube.failures import (
    ApiFailure,
    Backoff,
    BackoffPolicy,
    classify_failure,
    describe_failure,
    status_of,
)
from dra_driver.kube.informer import Changes, Informer
from dra_driver.kube.loop import ControlLoop
from dra_driver.kubelet.calls import ClaimRef
from dra_driver.resourceclaim import ResourceClaimView, parse_claims
from kubeletplugin.prepare.claim_status import build_plugin_entries
from kubeletplugin.prepare.claims import claim_ref
from kubeletplugin.prepare.records import ClaimRecord

log = logging.getLogger(__name__)


# -- the Events (their bodies are pure) --------------------------------------------------------------

EVENT_PREPARED = "MigDevicesPrepared"
EVENT_PREPARE_FAILED = "MigDevicesPrepareFailed"
EVENT_UNPREPARED = "MigDevicesUnprepared"
EVENT_UNPREPARE_FAILED = "MigDevicesUnprepareFailed"


# -- the writer --------------------------------------------------------------------------------------


class PreparedClaims(Protocol):
    """What exists on this node: the checkpoint (:class:`~kubeletplugin.prepare.checkpoint.CheckpointStore`),
    read here, never written.  Both reads return the file as it is now (another plugin process of the
    node may have changed it)."""

    def get(self, claim_uid: str) -> ClaimRecord | None: ...

    def records(self) -> tuple[ClaimRecord, ...]: ...


@dataclass
class _Job:
    """One write: a claim to converge (key ``("status", uid)``), an Event, or the reconciliation."""

    key: tuple[str, ...]
    describe: str  # what it does, for logs: "writing status of ns/name: ..."
    run: Callable[[], None]
    attempts: int = 0
    not_before: float = 0.0
    queued_at: float = 0.0
    sequence: int = field(default=0)
    backoff: Backoff | None = None  # its own, for failures that are not the API's
    # The log context of whoever queued it (the claim being prepared), for the lines its run logs here.
    context: contextvars.Context = field(default_factory=contextvars.copy_context)


class _Gone(Exception):
    """The claim is gone or was re-created: nothing to write."""


class _Refused(Exception):
    """The API server refused the claim's status for a reason retrying cannot fix (422, 403)."""

    def __init__(self, ref: ClaimRef, resource_version: str, error: ApiException, server: str) -> None:
        super().__init__(describe_failure(error, server))
        self.ref = ref
        self.resource_version = resource_version  # of the claim as read: refused until it changes


class _NotListed(Exception):
    """The claim informer has no complete list yet: nothing is decided on a partial view."""


_RECONCILE_KEY = ("reconcile",)
_RECONCILING = "reconciling claim status with the checkpoint"
_NOT_LISTED_RETRY_SECONDS = 0.2


class ClaimReporter(ControlLoop):
    """Writes claim status and Events, and reconciles claim status with the checkpoint: a set of claims
    to converge (and Events to write), in order, plus a periodic resync, on one
    :class:`~dra_driver.kube.loop.ControlLoop` (see the module docstring).

    :meth:`start` with the checkpoint (``PreparedClaims``) makes every status write converge to it
    and, with ``reconcile_interval``, reconciles on start and then periodically, reading the claims
    from ``claims`` -- the process's claim informer, which the reporter listens to and never starts or
    stops; without a checkpoint a status write converges to the record the report carried.
    ``backoff`` paces retries while the API server is unavailable; ``max_attempts`` bounds retries of
    failures that are not the API's (bugs).  ``flush()`` waits for the queue to drain (tests,
    shutdown); ``close()`` stops the thread, logging what was still pending (the next start's
    reconciliation writes it).
    """

    def __init__(
        self,
        client: Client,
        driver_name: str,
        node_name: str,
        *,
        claims: Informer | None = None,
        max_attempts: int = 8,
        backoff: BackoffPolicy | None = None,
        reconcile_interval: float | None = None,
        on_failure: Callable[[str], None] | None = None,
        yield_to_calls: float = 1.0,
    ) -> None:
        if reconcile_interval is not None and claims is None:
            raise ValueError("a periodic reconciliation reads the claims from an informer: give claims")
        # Told of every failed write attempt, by kind (unavailable, refused, error): a metric.
        self._on_failure = on_failure
        self._client = client
        self.driver_name = driver_name
        self.node_name = node_name
        self.claims = claims
        self._max_attempts = max_attempts
        self._backoff_policy = backoff or BackoffPolicy()
        self._api_backoff = self._backoff_policy.start()  # the reporter thread's alone
        self._reconcile_interval = reconcile_interval
        self.field_manager = plugin_field_manager(driver_name, node_name)
        self._events = EventRecorder(
            client, f"{driver_name}-kubeletplugin", node_name, reporting_component=f"{driver_name}/kubeletplugin"
        )
        self._event_sequence = 0
        self._refused: dict[str, str] = {}  # claim UID -> resourceVersion whose status was refused
        self._checkpoint: PreparedClaims | None = None
        self._jobs: list[_Job] = []
        self._running = 0
        self._sequence = 0
        self._paused_until = 0.0  # the API server is unavailable: no job before then
        self._next_reconcile: float | None = None
        self._wake_at: float | None = None  # the earliest deadline the last pass saw
        self._cond = threading.Condition()  # the queue: the loop's thread, the callers and flush()
        self._calls_in_flight = 0
        self._yield_to_calls = yield_to_calls
        self._closing = False
        super().__init__(
            "migdra-claim-reporter",
            Changes(),
            (),
            resync=reconcile_interval or 3600.0,
            shared=(claims,) if claims is not None else (),
        )

    @property
    def server(self) -> str:
        return self._client.server

    @property
    def backlog(self) -> int:
        """Claim status writes and Events queued or being written (reconciliation included)."""
        with self._cond:
            return len(self._jobs) + self._running

    # -- public --------------------------------------------------------------------------------

    def start(self, checkpoint: PreparedClaims | None = None) -> None:
        """Start writing; with ``checkpoint``, converge to it (and reconcile, if an interval is set)."""
        self._checkpoint = checkpoint
        if checkpoint is not None and self._reconcile_interval is not None:
            self._next_reconcile = time.monotonic()  # at once: what happened while we were away
        super().start()

    def close(self) -> None:
        """Stop writing: drop what is still queued (logged; the next start's reconciliation writes it)
        and stop the loop (joined, bounded by :meth:`ControlLoop.stop`)."""
        with self._cond:
            self._closing = True
            pending = [job.describe for job in self._jobs]
            self._jobs.clear()
            self._cond.notify_all()
        if pending:
            log.warning(
                "dropping %d unwritten claim report(s) at shutdown (claim status is reconciled at the next start): %s",
                len(pending),
                "; ".join(pending),
            )
        self.stop()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued report was written (or given up); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._jobs or self._running:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def reconcile_now(self) -> None:
        """Queue a reconciliation of every claim's status with the checkpoint (needs :meth:`start` with
        one, and ``claims``), claims whose status was refused included."""
        if self._checkpoint is None or self.claims is None:
            raise RuntimeError("ClaimReporter(claims=...).start(checkpoint) must run before reconcile_now()")
        with self._cond:
            self._refused.clear()  # asked for (an admin fixed what refused it): every claim is tried again
        self._enqueue(_Job(_RECONCILE_KEY, _RECONCILING, self._reconcile), replace=True)

    @contextmanager
    def call_in_flight(self) -> Iterator[None]:
        """Around each of kubelet's prepare and unprepare calls: writes wait while one runs.

        Why: a status write is several milliseconds of Python (read the claim, merge, write, an Event)
        on the same interpreter as the calls; started the moment a prepare returns, it competed for the
        GIL with the next call and added ~3 ms to an unprepare that followed at once (prepare_bench).
        A claim's status is for people and controllers; kubelet's call is what a pod waits for.  So a
        queued write starts once no call is running, or after waiting ``yield_to_calls`` seconds --
        a node that is never idle still gets its status written.
        """
        with self._cond:
            self._calls_in_flight += 1
        try:
            yield
        finally:
            with self._cond:
                self._calls_in_flight -= 1
                idle = not self._calls_in_flight
            if idle:
                self.trigger()

    def report_prepared(self, ref: ClaimRef, record: ClaimRecord, generation: int | None) -> None:
        """Identity + Ready for the prepared ``record`` (``generation``: the claim's, as prepared)."""
        if record.devices:
            self._enqueue_status(
                ref,
                f"writing status of {ref.namespace}/{ref.name}: {len(record.devices)} device(s) ready",
                record,
                generation,
            )
        names = ", ".join(device.intent.device_name for device in record.devices) or "no devices of this driver"
        self._enqueue_event(ref, EVENT_PREPARED, f"prepared on node {self.node_name}: {names}", "Normal")

    def report_failure(self, ref: ClaimRef, reason: str, message: str) -> None:
        """A Warning Event (``EVENT_PREPARE_FAILED`` / ``EVENT_UNPREPARE_FAILED``) with the per-claim error."""
        self._enqueue_event(ref, reason, message, "Warning")

    def report_unprepared(self, ref: ClaimRef, device_names: Sequence[str]) -> None:
        """Clear the claim's status (converged to the checkpoint, which no longer names it) and say so
        in an Event naming the devices released (``device_names``)."""
        names = list(device_names)
        if names:
            self._enqueue_status(
                ref, f"writing status of {ref.namespace}/{ref.name}: clear {len(names)} device(s)", None
            )
        self._enqueue_event(
            ref,
            EVENT_UNPREPARED,
            f"unprepared on node {self.node_name}: {', '.join(names) or 'no devices'}",
            "Normal",
        )

    def report_cleared(self, ref: ClaimRef, record: ClaimRecord) -> None:
        """Clear the status of a claim whose instances recovery rolled back (no Event: it was logged)."""
        if record.devices:
            self._enqueue_status(
                ref,
                f"writing status of {ref.namespace}/{ref.name}: clear {len(record.devices)} device(s) after recovery",
                None,
            )

    # -- the queue -----------------------------------------------------------------------------

    def _enqueue_status(
        self, ref: ClaimRef, describe: str, reported: ClaimRecord | None, generation: int | None = None
    ) -> None:
        """Converge the claim's status; ``reported`` is the truth only when no checkpoint was given."""
        # A newer status write for the claim supersedes a pending one: both converge to the same truth.
        self._enqueue(
            _Job(("status", ref.uid), describe, lambda: self._converge(ref, reported, generation)), replace=True
        )

    def _enqueue_event(self, ref: ClaimRef, reason: str, message: str, event_type: str) -> None:
        """An Event about the claim; the same one again (kubelet retrying a prepare that fails the same way)
        is counted on the Event already written (``kubectl describe`` shows ``x5 over 2m``)."""
        claim = {"metadata": {"name": ref.name, "namespace": ref.namespace, "uid": ref.uid}}
        describe = f"writing event {reason} on {ref.namespace}/{ref.name}"
        self._event_sequence += 1
        self._enqueue(
            _Job(
                ("event", ref.uid, str(self._event_sequence)),
                describe,
                lambda: self._events.write(CLAIMS, claim, event_type, reason, message),
            ),
            replace=False,
        )

    def _enqueue(self, job: _Job, replace: bool) -> None:
        with self._cond:
            if self._closing or self.stopping:
                log.warning("%s: skipped, shutting down", job.describe)
                return
            self._queue_locked(job, replace)
        self.trigger()

    def _queue_locked(self, job: _Job, replace: bool) -> None:
        self._sequence += 1
        job.sequence = self._sequence
        job.queued_at = time.monotonic()
        if replace:
            self._jobs = [j for j in self._jobs if j.key != job.key]
        self._jobs.append(job)
        self._cond.notify_all()

    # -- the loop: one pass writes every job that is due, in order -----------------------------------

    def sync(self) -> None:
        while not self.stopping:
            job = self._take_due()
            if job is None:
                return
            try:
                job.context.run(self._run_job, job)
            finally:
                with self._cond:
                    self._running -= 1
                    self._cond.notify_all()

    def next_wake(self) -> float:
        wake = self._wake_at
        return self.resync if wake is None else max(0.0, wake - time.monotonic())

    def _take_due(self) -> _Job | None:
        """The next job to write now (counted as running), or None; records when one is due next."""
        with self._cond:
            now = time.monotonic()
            if self._next_reconcile is not None and now >= self._next_reconcile:
                assert self._reconcile_interval is not None
                self._next_reconcile = now + self._reconcile_interval
                self._queue_locked(_Job(_RECONCILE_KEY, _RECONCILING, self._reconcile), replace=True)
            ready = [j for j in self._jobs if j.not_before <= now] if now >= self._paused_until else []
            if ready and self._calls_in_flight:
                until = min(j.queued_at for j in ready) + self._yield_to_calls
                if now < until:  # kubelet's calls first (call_in_flight); triggered when they end
                    self._wake_at = until
                    return None
            if ready:
                job = min(ready, key=lambda j: j.sequence)
                self._jobs.remove(job)
                self._running += 1
                return job
            wake = [max(min(j.not_before for j in self._jobs), self._paused_until)] if self._jobs else []
            if self._next_reconcile is not None:
                wake.append(self._next_reconcile)
            self._wake_at = min(wake, default=None)
            return None

    def _run_job(self, job: _Job) -> None:
        job.attempts += 1
        try:
            job.run()
        except _Gone as e:
            log.info("%s: skipped, %s", job.describe, e)
        except _Refused as e:
            if self._on_failure is not None:
                self._on_failure("refused")
            self._refuse(job, e)
        except _NotListed:
            job.attempts -= 1  # not a failure: the informer has not listed yet
            job.not_before = time.monotonic() + _NOT_LISTED_RETRY_SECONDS
            with self._cond:
                self._requeue_locked(job)
        except Exception as e:  # a reporter must never die: outages, refusals, bugs alike
            failure = classify_failure(e)
            if self._on_failure is not None:
                kind = "error" if failure is None else "refused" if failure is ApiFailure.PERMANENT else "unavailable"
                self._on_failure(kind)
            if failure is ApiFailure.PERMANENT:
                log.error("%s was refused, not retrying: %s", job.describe, describe_failure(e, self.server))
            elif failure is not None:
                self._wait_for_api(job, e)
            else:
                self._retry_later(job, e)
        else:
            self._api_backoff.reset()
            log.debug("%s: done", job.describe)

    def _refuse(self, job: _Job, refused: _Refused) -> None:
        """One error line and a Warning Event naming the claim and the server's reason; not retried (the
        reconciliation tries again once the claim has changed)."""
        ref = refused.ref
        with self._cond:
            self._refused[ref.uid] = refused.resource_version
        log.error("%s was refused, not retrying: %s", job.describe, refused)
        message = (
            f"node {self.node_name}: the API server refused the status of claim {ref.namespace}/{ref.name}: {refused}"
        )
        self._enqueue_event(ref, EVENT_STATUS_WRITE_REFUSED, message[:1024], "Warning")

    def _wait_for_api(self, job: _Job, error: Exception) -> None:
        """The API server is unavailable (or someone keeps conflicting): hold the whole queue, this job first.

        Every job would fail the same way, and holding them keeps their order; none is given up.
        """
        delay = self._api_backoff.next_delay(error)
        with self._cond:
            waiting = len(self._jobs) + 1
            self._paused_until = time.monotonic() + delay
            self._requeue_locked(job)
        log.warning(
            "%s failed: %s; retrying in %.1f s (%d claim report(s) waiting)",
            job.describe,
            describe_failure(error, self.server),
            delay,
            waiting,
        )

    def _retry_later(self, job: _Job, error: Exception) -> None:
        """Not the API's failure (a bug, an answer migdra cannot read): this job alone, a few times."""
        if job.attempts >= self._max_attempts:
            log.error("giving up %s after %d attempts: %r", job.describe, job.attempts, error)
            return
        if job.backoff is None:
            job.backoff = self._backoff_policy.start()
        delay = job.backoff.next_delay()
        log.warning("%s failed (%r); retrying in %.1f s", job.describe, error, delay)
        job.not_before = time.monotonic() + delay
        with self._cond:
            self._requeue_locked(job)

    def _requeue_locked(self, job: _Job) -> None:
        if self._closing or self.stopping:
            return
        if any(j.key == job.key for j in self._jobs):
            return  # superseded by a newer write while this one ran
        self._jobs.append(job)  # its old sequence keeps its place in the order
        self._cond.notify_all()

    # -- the writes ----------------------------------------------------------------------------

    def _converge(self, ref: ClaimRef, reported: ClaimRecord | None, generation: int | None) -> None:
        """Make this node's plugin's part of the claim's status say what the checkpoint says now: one
        read, then a forced server-side apply of exactly that part (skipped when the claim says it)."""
        raw = self._client.get(CLAIMS, ref.namespace, ref.name)
        if raw is None:
            raise _Gone(f"claim {ref.namespace}/{ref.name} no longer exists")
        claim = ResourceClaimView.model_validate(raw)
        if claim.metadata.uid != ref.uid:
            raise _Gone(f"claim {ref.namespace}/{ref.name} now has UID {claim.metadata.uid}, not {ref.uid}")
        # Read after the claim: a change of the record after this read comes with its own report,
        # queued behind this one, which reads again.
        record = self._checkpoint.get(ref.uid) if self._checkpoint is not None else reported
        observed = claim.metadata.generation if claim.metadata.generation is not None else generation
        now = rfc3339(dt.datetime.now(dt.UTC))
        entries = build_plugin_entries(claim, self.driver_name, self.node_name, record, observed, now)
        if claimstatus.is_applied(claim, self.field_manager, self.driver_name, entries):
            return
        body = claimstatus.build_apply_body(ref.namespace, ref.name, ref.uid, self.driver_name, entries)
        try:
            written = self._client.apply_status(CLAIMS, body, field_manager=self.field_manager, force=True)
        except ApiException as e:
            if e.status == 404 or claimstatus.is_uid_mismatch(status_of(e)):
                raise _Gone(f"claim {ref.namespace}/{ref.name} no longer exists as UID {ref.uid}") from e
            if classify_failure(e) is ApiFailure.PERMANENT:
                raise _Refused(ref, claim.metadata.resource_version or "", e, self.server) from e
            raise
        if self.claims is not None:
            self.claims.assume(written)

    def _reconcile(self) -> None:
        """Converge every claim whose entries of this driver and pool disagree with the checkpoint."""
        checkpoint, informer = self._checkpoint, self.claims
        assert checkpoint is not None
        assert informer is not None
        if not informer.wait_synced(0):
            raise _NotListed  # never a decision on a partial view: again once the informer has listed
        claims = parse_claims(informer.items())
        records = {record.claim_uid: record for record in checkpoint.records()}  # after the claims: see above
        now = rfc3339(dt.datetime.now(dt.UTC))
        stale: list[ClaimRef] = []
        with self._cond:
            refused = dict(self._refused)
        for claim in claims:
            record = records.pop(claim.metadata.uid, None)
            if refused.get(claim.metadata.uid) == claim.metadata.resource_version:
                continue  # refused as it is: again once the claim changes
            wanted = build_plugin_entries(
                claim, self.driver_name, self.node_name, record, claim.metadata.generation, now
            )
            if not claimstatus.is_applied(claim, self.field_manager, self.driver_name, wanted):
                stale.append(claim_ref(claim))
        for ref in stale:
            self._enqueue_status(
                ref, f"writing status of {ref.namespace}/{ref.name}: reconcile with the checkpoint", None
            )
        if stale:
            log.info(
                "claim status reconciliation: %d claim(s) disagree with the checkpoint: %s",
                len(stale),
                ", ".join(f"{ref.namespace}/{ref.name}" for ref in stale),
            )
        else:
            log.debug("claim status reconciliation: %d claim(s) listed, all agree with the checkpoint", len(claims))
