"""Shared counters (DRAPartitionableDevices): a device fits while no counter of its pool goes negative.

Available = the pool's counter sets - what devices of allocated claims consume (in any slice of the
pool, also slices for other nodes) - what the devices chosen so far in this attempt consume.  The
search reserves a device's counters when it tries the device and releases them when it backtracks
(kubernetes#140431 fixed a leak there; this port releases on every path).
"""

from __future__ import annotations

from dra_driver.tools.allocation.devices import Candidate, DeviceFactsCache
from dra_driver.tools.allocation.pools import Pool, PoolID
from dra_driver.tools.allocation.quantities import Amount
from dra_driver.tools.allocation.state import AllocatedState


class CounterBook:
    """Available and in-attempt consumed counters, per pool, for one allocation attempt."""

    def __init__(self, allocated: AllocatedState, facts: DeviceFactsCache) -> None:
        self._allocated = allocated
        self._facts = facts
        self._available: dict[PoolID, dict[str, dict[str, Amount]]] = {}
        self._exhausted: dict[PoolID, bool] = {}  # some counter already below zero
        self._consumed: dict[PoolID, dict[str, dict[str, Amount]]] = {}

    def available(self, pool: Pool) -> dict[str, dict[str, Amount]]:
        """Counters left by allocated claims (computed once per pool and attempt)."""
        available = self._available.get(pool.id)
        if available is None:
            available = {name: dict(counters) for name, counters in pool.counter_sets.items()}
            taken = self._allocated.by_pool.get(pool.id)
            if taken:
                devices = pool.devices_by_name()
                for device_name in taken:
                    device = devices.get(device_name)
                    if device is None:
                        continue
                    for set_name, counters in self._facts.get(device).consumes:
                        remaining = available.get(set_name)
                        if remaining is None:
                            continue
                        for counter, amount in counters:
                            if counter in remaining:
                                remaining[counter] -= amount
            self._available[pool.id] = available
            self._exhausted[pool.id] = any(value < 0 for counters in available.values() for value in counters.values())
        return available

    def exhausted(self, pool: Pool) -> bool:
        """Allocated claims already over-consume some counter of the pool: no device that consumes
        counters fits there (``reserve`` refuses it), whatever it consumes itself."""
        self.available(pool)
        return self._exhausted[pool.id]

    def consumed(self, pool: Pool) -> dict[str, dict[str, Amount]]:
        return self._consumed.get(pool.id, {})

    def reserve(self, candidate: Candidate) -> bool:
        """Add the device's consumption; False (and nothing reserved) if any counter would go negative.

        Consumption is never negative, so counters the device does not touch stay within their
        availability, except where allocated claims already over-consume one: then nothing fits.
        """
        pool = candidate.pool
        available = self.available(pool)
        if self._exhausted[pool.id]:
            return False
        consumed = self._consumed.setdefault(pool.id, {})
        fits = True
        for set_name, counters in candidate.facts.consumes:
            used = consumed.setdefault(set_name, {})
            limit = available[set_name]
            for counter, amount in counters:
                total = used.get(counter, 0) + amount
                used[counter] = total
                if total > limit[counter]:
                    fits = False
        if not fits:
            self.release(candidate)
        return fits

    def release(self, candidate: Candidate) -> None:
        consumed = self._consumed[candidate.pool.id]
        for set_name, counters in candidate.facts.consumes:
            used = consumed[set_name]
            for counter, amount in counters:
                used[counter] -= amount
