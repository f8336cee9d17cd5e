"""The placement policy: the order in which devices are listed, which is how a DRA driver steers
kube-scheduler's choice.

kube-scheduler's allocator is first-fit: it visits pools and slices in no fixed order but the devices
*inside a slice* in list order, and takes the first device that fits.  So whatever comes first in a
slice is what gets allocated first.  A policy is a small object with one job: order a GPU's devices
and order the GPUs.  This module holds the simple static policy; smarter, fragmentation-aware
policies (a later roadmap step) implement the same interface.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from dra_driver.devicemodel.pool import Device


class PlacementPolicy(Protocol):
    """Decides device order; must be deterministic (the same pool always yields the same order)."""

    def order_gpus(self, gpu_minors: Sequence[int]) -> list[int]: ...

    def order_devices(self, devices: Sequence[Device], memory_slices: int) -> list[Device]:
        """Order one GPU's devices; ``memory_slices`` is the GPU's number of placement units."""
        ...


class StaticPlacementPolicy:
    """Pack GPUs in minor order; on each GPU, small profiles from the high end, large ones from the low end.

    Filling 1g/2g instances from the top (start 6, 5, 4 …) and 3g/4g/7g from slice 0 keeps the big
    contiguous ranges free as long as possible: with a 1g at 6 and a 3g at 0, a 2g still fits at 4,
    whereas first-fit from slice 0 for everything would split the GPU into unusable holes.  Within a
    GPU, smaller profiles come first, so a selector that several profiles satisfy gets the best fit.
    """

    def order_gpus(self, gpu_minors: Sequence[int]) -> list[int]:
        return sorted(gpu_minors)

    def order_devices(self, devices: Sequence[Device], memory_slices: int) -> list[Device]:
        def key(device: Device) -> tuple[int, int, int, int, str]:
            if device.placement is None:
                return (0, 0, 0, 0, device.name)
            size, start = device.placement.size, device.placement.start
            small = 2 * size < memory_slices
            return (size, device.compute_slices, device.profile_id or 0, -start if small else start, device.name)

        return sorted(devices, key=key)
