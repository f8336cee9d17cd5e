"""What allocated claims already hold: devices taken, and capacity consumed on shared devices.

kube-scheduler gathers this from every allocated ResourceClaim: a result with ``adminAccess: true``
takes nothing; a result with a ``shareID`` (DRAConsumableCapacity) consumes capacity of a device that
allows multiple allocations instead of taking the device; every other result takes its device.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from dra_driver.jsontypes import JSON
from dra_driver.quantity import Quantity, QuantityError
from dra_driver.tools.allocation.devices import DeviceID

ConsumedCapacity = dict[str, Quantity]  # fully qualified capacity name -> amount


def qualified(name: str, driver: str) -> str:
    """A capacity name with its domain: a bare name belongs to the driver's domain."""
    return name if "/" in name else f"{driver}/{name}"


@dataclass(slots=True)
class AllocatedState:
    devices: set[DeviceID] = field(default_factory=set)
    shared_devices: set[DeviceID] = field(default_factory=set)
    capacity: dict[DeviceID, ConsumedCapacity] = field(default_factory=dict)
    by_pool: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # taken or shared device names

    def is_allocated(self, device_id: DeviceID) -> bool:
        """``IsDeviceAllocated``: taken, or shared by some allocation (its counters are consumed)."""
        return device_id in self.devices or device_id in self.shared_devices


Held = tuple[tuple[DeviceID, bool, tuple[tuple[str, Quantity], ...]], ...]  # (device, shared, consumed)

# What each allocated claim holds, by the identity of the claim dict (a scheduler keeps its claims in
# an informer cache and passes the same dicts again for every pod): parsed once, summed per call.
_HELD_CACHE_SIZE = 1 << 16
# The allocation dict's identity is checked too, so setting or replacing a claim's status in place is seen.
_held: dict[tuple[int, bool], tuple[JSON, object, Held]] = {}


def _held_by(claim: JSON, consumable_capacity: bool) -> Held:
    key = (id(claim), consumable_capacity)
    current = (claim.get("status") or {}).get("allocation")
    entry = _held.get(key)
    if entry is not None and entry[0] is claim and entry[1] is current:
        return entry[2]
    held = []
    allocation = current or {}
    for result in (allocation.get("devices") or {}).get("results") or ():
        if result.get("adminAccess"):
            continue
        device_id = (str(result.get("driver", "")), str(result.get("pool", "")), str(result.get("device", "")))
        if consumable_capacity and result.get("shareID"):
            consumed = []
            for name, value in (result.get("consumedCapacity") or {}).items():
                try:
                    consumed.append((qualified(str(name), device_id[0]), Quantity.parse(str(value))))
                except QuantityError:
                    continue  # written by a scheduler; never malformed in practice
            held.append((device_id, True, tuple(consumed)))
        else:
            held.append((device_id, False, ()))
    if len(_held) >= _HELD_CACHE_SIZE:
        _held.clear()
    _held[key] = (claim, current, tuple(held))
    return tuple(held)


def allocated_state(claims: Iterable[JSON], consumable_capacity: bool) -> AllocatedState:
    state = AllocatedState()
    for claim in claims:
        for device_id, shared, consumed in _held_by(claim, consumable_capacity):
            state.by_pool.setdefault(device_id[:2], set()).add(device_id[2])
            if not shared:
                state.devices.add(device_id)
                continue
            state.shared_devices.add(device_id)
            usage = state.capacity.setdefault(device_id, {})
            for key, amount in consumed:
                usage[key] = usage[key].add(amount) if key in usage else amount
    return state
