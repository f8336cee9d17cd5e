"""What allocated claims already hold: devices taken, and capacity consumed on shared devices.

kube-scheduler gathers this from every allocated ResourceClaim: a result with ``adminAccess: true``
takes nothing; a result with a ``shareID`` (DRAConsumableCapacity) consumes capacity of a device that
allows multiple allocations instead of taking the device; every other result takes its device.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from dra_driver.quantity import Quantity, QuantityError
from dra_driver.resourceclaim import ResourceClaimView
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

# What each allocated claim holds, by the identity of the claim (a scheduler keeps its claims, read once,
# and passes the same ones again for every pod; a claim is immutable): parsed once, summed per call.
_HELD_CACHE_SIZE = 1 << 16
_held: dict[tuple[int, bool], tuple[ResourceClaimView, Held]] = {}


def _held_by(claim: ResourceClaimView, consumable_capacity: bool) -> Held:
    key = (id(claim), consumable_capacity)
    entry = _held.get(key)
    if entry is not None and entry[0] is claim:
        return entry[1]
    held = []
    for result in claim.results:
        if result.admin_access:
            continue
        device_id = (result.driver, result.pool, result.device)
        if consumable_capacity and result.share_id:
            consumed = []
            consumed_capacity = result.consumed_capacity if isinstance(result.consumed_capacity, Mapping) else {}
            for name, value in consumed_capacity.items():
                try:
                    consumed.append((qualified(str(name), device_id[0]), Quantity.parse(str(value))))
                except QuantityError:
                    continue  # written by a scheduler; never malformed in practice
            held.append((device_id, True, tuple(consumed)))
        else:
            held.append((device_id, False, ()))
    if len(_held) >= _HELD_CACHE_SIZE:
        _held.clear()
    _held[key] = (claim, tuple(held))
    return tuple(held)


def allocated_state(claims: Iterable[ResourceClaimView], consumable_capacity: bool) -> AllocatedState:
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
