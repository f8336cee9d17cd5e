"""Leader election with a ``coordination.k8s.io/v1`` Lease, as client-go's ``leaderelection`` does it.

Why: the controller runs as two replicas so a node failure does not stop reservations, and two
writers of the same claim would fight over its ``Reserved`` condition.  One replica holds the Lease
and writes; the other keeps its caches warm and waits.

The rules (client-go's, so a Go controller and this one could even share a Lease):

- A Lease is free when it has no holder, or when its record has not changed for
  ``leaseDurationSeconds`` *as observed on this replica's own monotonic clock* -- never by comparing
  ``renewTime`` with the local wall clock, so clock skew between machines cannot make two leaders.
- Acquiring and renewing are read-modify-write with the Lease's ``resourceVersion``: of two replicas
  that both saw the Lease free, one write fails with 409 and that replica stays a follower.
- The leader renews every ``retry_period``; if it could not renew for ``renew_deadline`` (shorter than
  the lease duration) it stops leading *before* another replica may take over, and the process exits
  (Kubernetes restarts it as a follower).  ``on_stopped_leading`` is that exit.
- On a clean stop the leader releases the Lease (holder cleared, duration 1 s), so the other replica
  takes over at its next retry instead of after a whole lease duration.

It is a thread of its own, not a :class:`~dra_driver.kube.loop.ControlLoop`: a control loop converges
a set of keys from a cache and may retry any key later, while an election is one timed state machine
(follow, acquire, renew before a deadline, or stop leading) whose deadline must not wait behind a
queue -- the shape client-go gives it too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dra_driver.kube.client import LEASES, Client, status_code
from dra_driver.kube.failures import describe_failure

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LeaseTiming:
    """Seconds; client-go's defaults.  ``renew_deadline`` < ``lease_duration``; ``retry_period`` <
    ``renew_deadline``."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                f"leader election needs 0 < retry period ({self.retry_period:g} s) < renew deadline "
                f"({self.renew_deadline:g} s) < lease duration ({self.lease_duration:g} s)"
            )


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Runs on its own thread; calls ``on_started_leading`` once when it becomes leader and
    ``on_stopped_leading`` once if it stops (lost renewal or :meth:`stop`)."""

    def __init__(
        self,
        client: Client,
        namespace: str,
        name: str,
        identity: str,
        timing: LeaseTiming,
        on_started_leading: Callable[[], None],
        on_stopped_leading: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timing = timing
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._clock = clock
        self._observed: tuple[str, str, int] | None = None  # (holder, renewTime, transitions) last seen
        self._observed_at = 0.0
        self._leading = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)

    @property
    def is_leader(self) -> bool:
        return self._leading.is_set()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop competing; a leader releases the Lease first."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.timing.renew_deadline + 5)

    # -- the loop ------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            if self._try_acquire_or_renew():
                break
            self._stopping.wait(self.timing.retry_period)
        if self._stopping.is_set():
            # stop() may have come while an acquire was on its way (written, or even answered with an
            # error after the server wrote it): hand back a Lease that names us, or it stays held until
            # it expires.  _release reads it first and leaves anyone else's alone.
            self._release()
            return
        log.info("became leader: Lease %s/%s held by %s", self.namespace, self.name, self.identity)
        self._leading.set()
        self._on_started()
        last_renewed = self._clock()
        while not self._stopping.wait(self.timing.retry_period):
            if self._try_acquire_or_renew():
                last_renewed = self._clock()
            elif self._clock() - last_renewed >= self.timing.renew_deadline or self._held_by_other():
                log.error(
                    "lost leadership of Lease %s/%s (not renewed for %.1f s); stopping",
                    self.namespace,
                    self.name,
                    self._clock() - last_renewed,
                )
                self._leading.clear()
                self._on_stopped()
                return
        self._release()
        self._leading.clear()
        self._on_stopped()

    def _held_by_other(self) -> bool:
        return self._observed is not None and self._observed[0] not in ("", self.identity)

    def _try_acquire_or_renew(self) -> bool:
        """One attempt; True when this replica holds the Lease afterwards."""
        try:
            lease = self._client.get(LEASES, self.namespace, self.name)
            now = _micro_time()
            if lease is None:
                self._client.create(LEASES, self._new_lease(now))
                self._observe(self.identity, now, 0)
                return True
            spec = lease.get("spec") or {}
            holder = str(spec.get("holderIdentity") or "")
            renew_time = str(spec.get("renewTime") or "")
            transitions = int(spec.get("leaseTransitions") or 0)
            self._observe(holder, renew_time, transitions)
            duration = float(spec.get("leaseDurationSeconds") or self.timing.lease_duration)
            if holder not in ("", self.identity) and self._clock() - self._observed_at < duration:
                return False  # another replica's Lease, renewed within its duration as we observed it
            if holder != self.identity:
                spec["acquireTime"] = now
                spec["leaseTransitions"] = transitions + 1
            spec["holderIdentity"] = self.identity
            spec["leaseDurationSeconds"] = int(self.timing.lease_duration)
            spec["renewTime"] = now
            lease["spec"] = spec
            self._client.update(LEASES, lease)  # with its resourceVersion: a rival's write first is a 409
            self._observe(self.identity, now, int(spec["leaseTransitions"]))
            return True
        except Exception as exc:
            if status_code(exc) == 409:
                log.debug("Lease %s/%s: another replica wrote first", self.namespace, self.name)
            else:
                log.warning("Lease %s/%s: %s", self.namespace, self.name, describe_failure(exc))
            return False

    def _observe(self, holder: str, renew_time: str, transitions: int) -> None:
        record = (holder, renew_time, transitions)
        if record != self._observed:
            self._observed = record
            self._observed_at = self._clock()

    def _new_lease(self, now: str) -> dict[str, Any]:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.timing.lease_duration),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }

    def _release(self) -> None:
        """Hand the Lease back (client-go's ReleaseOnCancel): holder cleared, a 1 s duration."""
        try:
            lease = self._client.get(LEASES, self.namespace, self.name)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            lease["spec"].update(
                {"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": _micro_time(), "acquireTime": None}
            )
            self._client.update(LEASES, lease)
            log.info("released Lease %s/%s", self.namespace, self.name)
        except Exception as exc:
            log.warning("Lease %s/%s not released: %s", self.namespace, self.name, describe_failure(exc))
