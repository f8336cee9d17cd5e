"""What allocated claims already hold: devices taken, and capacity consumed on shared devices.

kube-scheduler gathers this from every allocated ResourceClaim: a result with ``adminAccess: true``
takes nothing; a result with a ``shareID`` (DRAConsumableCapacity) consumes capacity of a device that
allows multiple allocations instead of taking the device; every other result takes its device.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dra_driver.allocation.devices import DeviceID
from dra_driver.cel.quantity import Quantity, QuantityError

JSON = Mapping[str, Any]
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


def allocated_state(claims: Iterable[JSON], consumable_capacity: bool) -> AllocatedState:
    state = AllocatedState()
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or ():
            if result.get("adminAccess"):
                continue
            device_id = (str(result.get("driver", "")), str(result.get("pool", "")), str(result.get("device", "")))
            state.by_pool.setdefault(device_id[:2], set()).add(device_id[2])
            if consumable_capacity and result.get("shareID"):
                state.shared_devices.add(device_id)
                consumed = state.capacity.setdefault(device_id, {})
                for name, value in (result.get("consumedCapacity") or {}).items():
                    key = qualified(str(name), device_id[0])
                    try:
                        amount = Quantity.parse(str(value))
                    except QuantityError:
                        continue  # written by a scheduler; never malformed in practice
                    consumed[key] = consumed[key].add(amount) if key in consumed else amount
            else:
                state.devices.add(device_id)
    return state
