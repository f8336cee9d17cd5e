"""A whole GPU: allocated as it is, so its prepare creates nothing on NVML.

plan     nothing to check on NVML (the claim's own devices are checked against each other: a
         whole GPU overlaps every MIG device on it)
create   the device as its intent says: the CDI spec names the GPU
undo     nothing was created
release  nothing to destroy
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from dra_driver.nvml.types import GpuInstanceInfo
from kubeletplugin.prepare.conflicts import PlacementConflict
from kubeletplugin.prepare.devices import DeviceTarget
from kubeletplugin.prepare.kinds.base import DeviceStep
from kubeletplugin.prepare.records import ClaimRecord, DeviceIntent, DeviceRecord


class WholeGpu:
    """The steps of a whole GPU (module docstring)."""

    creates_instances = False

    def plan(
        self, instances: Sequence[GpuInstanceInfo], intent: DeviceIntent, records: Iterable[ClaimRecord], claim_uid: str
    ) -> PlacementConflict | None:
        return None

    def create(self, step: DeviceStep, device: DeviceRecord, target: DeviceTarget) -> DeviceRecord:
        return device

    def undo(self, step: DeviceStep, device: DeviceRecord) -> bool:
        return True

    def release(self, step: DeviceStep, device: DeviceRecord) -> None:
        return None
