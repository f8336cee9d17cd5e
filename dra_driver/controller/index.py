"""Every claim's reservations, kept per pool and recomputed only where something changed.

Why: the reservation controller must cost the same per claim on a 500-node cluster with 10,000
claims as on a small one.  Recomputing every reservation from the whole caches on every pass (what
:func:`~dra_driver.controller.reservations.compute_reservations` does) made each pass cost in
proportion to all claims and slices, and a busy cluster runs a pass for every change.  But every
verdict depends on one pool only -- a conflict is two devices of one GPU, and a pool is one node's
GPUs; a device is gone only from its own completely listed pool -- and on whether every pool is
completely listed when a device's pool is absent (a removed node).  So the index keeps, per pool, its
newest generation as read from its slices, the claims holding a device in it, and their reservations
there; a pass asks the informers which claims and slices changed
(:meth:`~dra_driver.kube.informer.Informer.changed_since`), re-reads only the pools whose slices
changed, recomputes only the pools those claims and slices touch, and hands back the claims whose
reservations changed or which changed themselves: the only ones the controller needs to look at.
When an informer no longer remembers a change (or on the first pass) everything is read again.

It holds the informers' slices by reference (never copies, never changes them) and each claim as read
into :class:`~dra_driver.resourceclaim.ResourceClaimView` once, when the informer says it changed.
"""

from __future__ import annotations

from collections import defaultdict

from dra_driver.controller.reservations import (
    DeviceReservation,
    Pool,
    claim_pools,
    compute_published_devices,
    pool_reservations,
)
from dra_driver.gcpause import garbage_collector_paused
from dra_driver.jsontypes import JSON
from dra_driver.kube.informer import Informer
from dra_driver.resourceclaim import ResourceClaimView, parse_claim

Key = tuple[str, str]  # (namespace, name), as the informers key their objects


class ReservationIndex:
    """The reservations of every allocated claim of ``driver``, brought up to date by :meth:`refresh`."""

    def __init__(self, driver: str) -> None:
        self.driver = driver
        self._claim_revision = 0
        self._slice_revision = 0
        self._pool_of_slice: dict[Key, str] = {}
        self._slices_of_pool: dict[str, dict[Key, JSON]] = defaultdict(dict)
        self._pools: dict[str, Pool] = {}  # every pool with a generation listed
        self._incomplete: set[str] = set()  # ... of which not every slice of the newest is listed
        self._claims: dict[Key, ResourceClaimView] = {}  # every claim holding a (non-admin) device of the driver
        self._uids: set[str] = set()  # ... their UIDs
        self._pools_of_claim: dict[Key, frozenset[str]] = {}
        self._claims_of_pool: dict[str, set[Key]] = defaultdict(set)
        self._reservations: dict[str, tuple[DeviceReservation, ...]] = {}  # pool -> its devices' reservations
        self._touched: set[str] = set()  # pools whose slices or claims changed since take_touched_pools()

    # -- reading ------------------------------------------------------------------------------------

    def claim(self, key: Key) -> ResourceClaimView | None:
        """The claim as indexed: None once it is deleted or holds no device of the driver."""
        return self._claims.get(key)

    def holds(self, uid: str) -> bool:
        """Whether the claim of this UID holds a device of the driver."""
        return uid in self._uids

    def reservations_of(self, key: Key) -> list[DeviceReservation]:
        """The claim's reservations in its result order (as :func:`compute_reservations` lists them)."""
        claim = self._claims.get(key)
        if claim is None:
            return []
        uid = claim.metadata.uid
        order: dict[tuple[str, str, str], int] = {}
        for result in claim.results_of(self.driver):
            order.setdefault((result.pool, result.device, result.share or ""), len(order))
        held = [
            reservation
            for pool in sorted(self._pools_of_claim.get(key, ()))
            for reservation in self._reservations.get(pool, ())
            if reservation.claim_uid == uid
        ]
        return sorted(held, key=lambda r: order.get((r.pool, r.device_name, r.share_id or ""), len(order)))

    def pool_objects(self, pool: str) -> tuple[list[JSON], list[ResourceClaimView]]:
        """The pool's slices and the claims holding a device in it: what anything computed per pool
        (the occupancy metrics) reads."""
        slices = list(self._slices_of_pool.get(pool, {}).values())
        return slices, [self._claims[key] for key in sorted(self._claims_of_pool.get(pool, ()))]

    def take_touched_pools(self) -> set[str]:
        """The pools whose slices or claims changed since the last call (each pool once)."""
        touched, self._touched = self._touched, set()
        return touched

    def all_reservations(self) -> list[DeviceReservation]:
        """Every reservation (the metrics' whole picture: costs in proportion to them, so not per pass)."""
        return [reservation for pool in sorted(self._reservations) for reservation in self._reservations[pool]]

    # -- keeping up ---------------------------------------------------------------------------------

    def refresh(self, claims: Informer, slices: Informer) -> set[Key]:
        """Take in what changed in the caches since the last refresh; the keys of the claims that changed
        or whose reservations did (including claims deleted or no longer holding a device)."""
        self._slice_revision, slice_keys = slices.changed_since(self._slice_revision)
        self._claim_revision, claim_keys = claims.changed_since(self._claim_revision)
        if slice_keys is None:
            slice_keys = set(self._pool_of_slice) | {_key(s) for s in slices.items()}
        if claim_keys is None:
            claim_keys = set(self._claims) | {_key(c) for c in claims.items()}
        reread = self._take_slices(slices, slice_keys)
        stale = reread | self._take_claims(claims, claim_keys) | self._reread_pools(reread)
        changed = set(claim_keys)
        self._touched |= stale
        for pool in stale:
            changed |= self._recompute(pool)
        return changed

    def _take_slices(self, slices: Informer, keys: set[Key]) -> set[str]:
        """File the changed slices under their pools; the pools whose slices changed."""
        pools: set[str] = set()
        for key in keys:
            old = self._pool_of_slice.pop(key, None)
            if old is not None:
                self._slices_of_pool[old].pop(key, None)
                pools.add(old)
            current = slices.get(*key)
            spec = (current or {}).get("spec") or {}
            if current is None or spec.get("driver") != self.driver:
                continue
            pool = str((spec.get("pool") or {}).get("name", ""))
            self._pool_of_slice[key] = pool
            self._slices_of_pool[pool][key] = current
            pools.add(pool)
        return pools

    def _take_claims(self, claims: Informer, keys: set[Key]) -> set[str]:
        """File the changed claims under the pools they hold devices in; the pools they held devices in
        before or hold now (both: the old pool's reservations must drop the claim)."""
        pools: set[str] = set()
        with garbage_collector_paused():  # on a catch-up, every claim of the cluster (dra_driver/gcpause.py)
            for key in keys:
                pools |= self._take_claim(claims, key)
        return pools

    def _take_claim(self, claims: Informer, key: Key) -> set[str]:
        """One changed claim: read it again (once, here) and file it; the pools it held and holds."""
        pools: set[str] = set()
        for pool in self._pools_of_claim.pop(key, ()):
            self._claims_of_pool[pool].discard(key)
            pools.add(pool)
        gone = self._claims.pop(key, None)
        if gone is not None:
            self._uids.discard(gone.metadata.uid)
        obj = claims.get(*key)
        current = parse_claim(obj) if obj is not None else None
        held = claim_pools(current, self.driver) if current is not None else frozenset()
        if current is None or not held:
            return pools
        self._claims[key] = current
        self._uids.add(current.metadata.uid)
        self._pools_of_claim[key] = held
        for pool in held:
            self._claims_of_pool[pool].add(key)
        return pools | held

    def _reread_pools(self, pools: set[str]) -> set[str]:
        """Read the newest generation of each pool from its slices again; the pools whose verdicts may
        have changed besides them (every absent pool a claim names, when whether every pool is
        completely listed changed)."""
        every_complete_before = not self._incomplete
        for name in pools:
            read = compute_published_devices(self._slices_of_pool.get(name, {}).values(), self.driver).get(name)
            if not self._slices_of_pool.get(name):
                self._slices_of_pool.pop(name, None)
            if read is None:
                self._pools.pop(name, None)
                self._incomplete.discard(name)
                continue
            self._pools[name] = read
            if read.complete:
                self._incomplete.discard(name)
            else:
                self._incomplete.add(name)
        if every_complete_before == (not self._incomplete):
            return set()
        return {pool for pool in self._claims_of_pool if pool not in self._pools}

    def _recompute(self, pool: str) -> set[Key]:
        """The pool's reservations again; the claims whose reservations there changed."""
        holders = self._claims_of_pool.get(pool, set())
        claims = [self._claims[key] for key in holders]
        read = self._pools.get(pool)
        new = tuple(
            pool_reservations(
                claims,
                {pool: read} if read is not None else {},
                self.driver,
                every_pool_complete=not self._incomplete,
                only_pool=pool,
            )
        )
        old = self._reservations.get(pool, ())
        if new:
            self._reservations[pool] = new
        else:
            self._reservations.pop(pool, None)
        if not holders:
            self._claims_of_pool.pop(pool, None)
        if new == old:
            return set()
        before = {(r.namespace, r.claim_name, r) for r in old}
        after = {(r.namespace, r.claim_name, r) for r in new}
        return {(namespace, name) for namespace, name, _ in before ^ after}


def _key(obj: JSON) -> Key:
    meta = obj["metadata"]
    return str(meta.get("namespace", "")), str(meta["name"])
