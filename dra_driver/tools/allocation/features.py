"""Feature gates the allocator honours, and the set kube-scheduler 1.36 enables by default.

The allocator receives gate *names* (as ``--feature-gates`` spells them) and reads them once into
:class:`Features`, so the search never looks a string up in a set.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

ADMIN_ACCESS = "DRAAdminAccess"
PRIORITIZED_LIST = "DRAPrioritizedList"
PARTITIONABLE_DEVICES = "DRAPartitionableDevices"
DEVICE_TAINTS = "DRADeviceTaints"
BINDING_CONDITIONS = "DRADeviceBindingConditions"
DEVICE_STATUS = "DRAResourceClaimDeviceStatus"
CONSUMABLE_CAPACITY = "DRAConsumableCapacity"

KNOWN_FEATURES = frozenset(
    {
        ADMIN_ACCESS,
        PRIORITIZED_LIST,
        PARTITIONABLE_DEVICES,
        DEVICE_TAINTS,
        BINDING_CONDITIONS,
        DEVICE_STATUS,
        CONSUMABLE_CAPACITY,
    }
)

# kube-scheduler 1.36: every gate above is beta (or GA) and on, so the `incubating` allocator runs.
DEFAULT_FEATURES = KNOWN_FEATURES


@dataclass(frozen=True, slots=True)
class Features:
    """The gates as booleans; ``binding_and_status`` needs both binding gates, as in Kubernetes."""

    admin_access: bool
    prioritized_list: bool
    partitionable_devices: bool
    device_taints: bool
    binding_and_status: bool
    consumable_capacity: bool

    @classmethod
    def from_names(cls, names: Iterable[str]) -> Features:
        enabled = set(names)
        return cls(
            admin_access=ADMIN_ACCESS in enabled,
            prioritized_list=PRIORITIZED_LIST in enabled,
            partitionable_devices=PARTITIONABLE_DEVICES in enabled,
            device_taints=DEVICE_TAINTS in enabled,
            binding_and_status=BINDING_CONDITIONS in enabled and DEVICE_STATUS in enabled,
            consumable_capacity=CONSUMABLE_CAPACITY in enabled,
        )
