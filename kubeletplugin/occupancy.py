"""The occupancy of this node's pool, for an occupancy-aware placement policy (``dynamic``).

The ``dynamic`` policy (:mod:`dra_driver.devicemodel.policy`) orders the published devices by best fit
from what allocated claims hold, so the order must be re-published as claims come and go.
:class:`ClaimOccupancy` reads the process's list-then-watch cache of the cluster's ResourceClaims
(:class:`~dra_driver.kube.informer.Informer`: relists after 410 Gone and after the server went away;
the node process's one claim informer, which app.py makes and shares), computes the names of the
devices of this driver in this node's pool that their allocations hold
(:func:`compute_allocated_devices`), and when that set changes calls ``on_change`` -- the publish
loop's ``trigger`` -- at most as often as :class:`RepublishGate` lets it:

- **debounce**: ``debounce`` seconds after the first change not yet published (changes meanwhile go
  with it), so a burst of allocations -- a Job's pods scheduled together -- is one re-publish;
- **rate limit**: at least ``min_interval`` seconds between two calls; a change in that quiet period
  is not lost, it is published at its end.

The publisher asks :meth:`ClaimOccupancy.allocated` for the set once per round (a rescan too), and
writes only when the policy's order for it differs from what the API holds.  Nothing is decided on a
partial view: before the first complete list the set is empty and no change is signalled.

Only an occupancy-aware policy starts one (``static`` publishes no order for claims).  One thread (a
:class:`~dra_driver.kube.loop.ControlLoop` listening to the shared informer);
:meth:`ClaimOccupancy.stop` wakes and joins it, bounded.  ``compute_allocated_devices`` and
:class:`RepublishGate` are pure (explicit ``now``), for tests.  This module imports no typed model of
the Kubernetes client: claims are read as :class:`~kubeletplugin.prepare.claims.ResourceClaimView`, the
node plugin's one model of a claim.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from dra_driver.kube.informer import Changes, Informer
from dra_driver.kube.loop import ControlLoop
from dra_driver.resourceclaim import ResourceClaimView, parse_claims

log = logging.getLogger(__name__)

RESYNC_SECONDS = 30.0
"""A pass at least this often without a change (the set is recomputed from the cache)."""
FIRST_LIST_WAIT_SECONDS = 5.0
"""How long the plugin waits for the first list of claims before its first publish (then publishes anyway)."""


# -- pure ------------------------------------------------------------------------------------------


def compute_allocated_devices(claims: Iterable[ResourceClaimView], driver_name: str, pool_name: str) -> frozenset[str]:
    """Names of the devices of ``driver_name`` in pool ``pool_name`` that the claims' allocations hold.

    Every ``status.allocation.devices.results[]`` entry of that driver and pool counts, except those
    with ``adminAccess: true``: admin access (monitoring, diagnostics) holds nothing, the device stays
    allocatable to others.  A claim migdra cannot read was skipped by :func:`parse_claims`; pure.
    """
    return frozenset(
        result.device
        for claim in claims
        for result in claim.results_of(driver_name, pool_name)
        if result.admin_access is not True
    )


class RepublishGate:
    """When to signal a change: ``debounce`` s after the first unsignalled change, and never sooner than
    ``min_interval`` s after the previous signal.  Pure (the caller passes the clock's ``now``)."""

    def __init__(self, debounce: float, min_interval: float) -> None:
        if debounce < 0 or min_interval < 0:
            raise ValueError("debounce and min_interval must be >= 0")
        self.debounce = debounce
        self.min_interval = min_interval
        self._pending_since: float | None = None  # the first change not yet signalled
        self._last_signal: float | None = None

    @property
    def pending(self) -> bool:
        return self._pending_since is not None

    def change(self, now: float) -> None:
        """A change was seen at ``now`` (a later one before the signal goes with the first)."""
        if self._pending_since is None:
            self._pending_since = now

    def delay(self, now: float) -> float | None:
        """Seconds until the signal is due (0: now), or None with nothing pending."""
        if self._pending_since is None:
            return None
        due = self._pending_since + self.debounce
        if self._last_signal is not None:
            due = max(due, self._last_signal + self.min_interval)
        return max(0.0, due - now)

    def take(self, now: float) -> bool:
        """Whether to signal now; if so the pending change counts as signalled at ``now``."""
        if self.delay(now) != 0.0:
            return False
        self._pending_since = None
        self._last_signal = now
        return True


# -- around it: the claim informer and one thread ---------------------------------------------------


class ClaimOccupancy(ControlLoop):
    """The devices of this node's pool that allocated claims hold, kept current; see the module docstring.

    :meth:`start` runs it, :meth:`stop` joins it; ``claims`` is started and stopped by whoever made it.
    """

    def __init__(
        self,
        claims: Informer,
        driver_name: str,
        node_name: str,
        on_change: Callable[[], None],
        *,
        debounce: float,
        min_interval: float,
        resync: float = RESYNC_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.driver_name = driver_name
        self.pool_name = node_name  # one pool per node, named after it
        self._on_change = on_change
        self._clock = clock
        self._gate = RepublishGate(debounce, min_interval)
        self._lock = threading.Lock()
        self._allocated: frozenset[str] = frozenset()
        self._computed = threading.Event()  # a set was computed from a complete list (allocated() is real)
        self.signals = 0  # calls of ``on_change`` (tests and logs)
        self.claims = claims
        super().__init__("migdra-placement-occupancy", Changes(), (), resync, shared=(claims,))

    def allocated(self) -> frozenset[str]:
        """The devices allocated claims hold, as of the last complete view (empty before the first list)."""
        with self._lock:
            return self._allocated

    def sync(self) -> None:
        if not self.claims.wait_synced(0):
            return  # no complete list yet: nothing is decided on a partial view
        claims = parse_claims(self.claims.items())
        self.observe(compute_allocated_devices(claims, self.driver_name, self.pool_name), self._clock())
        self._computed.set()

    def wait_synced(self, timeout: float) -> bool:
        """Whether the first set of allocated devices was computed from a complete list within
        ``timeout`` seconds (the informer listing is not enough: the first publish must read the set,
        not the empty one before it); :meth:`stop` ends the wait at once."""
        deadline = time.monotonic() + timeout
        while not self._computed.wait(min(max(deadline - time.monotonic(), 0.0), 0.1)):  # returns once set
            if self.stopping or time.monotonic() >= deadline:
                return False
        return True

    def observe(self, allocated: frozenset[str], now: float) -> None:
        """Take the set computed at ``now``; call ``on_change`` when the gate lets a change through."""
        with self._lock:
            changed = allocated != self._allocated
            self._allocated = allocated
        if changed:
            log.debug("devices allocated in pool %s: %d", self.pool_name, len(allocated))
            self._gate.change(now)
        if self._gate.take(now):
            self.signals += 1
            try:
                self._on_change()
            except Exception:  # the callback is the publish loop's trigger; a bug there must not stop us
                log.exception("%s: signalling an occupancy change failed", self.name)

    def next_wake(self) -> float:
        delay = self._gate.delay(self._clock())
        return self.resync if delay is None else min(delay, self.resync)
