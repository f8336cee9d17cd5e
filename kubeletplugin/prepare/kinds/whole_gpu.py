"""A whole GPU: allocated as it is, so its prepare creates nothing on NVML.

plan     nothing to check on NVML (the claim's own devices are checked against each other: a
         whole GPU overlaps every MIG device on it)
create   the device as its intent says: the CDI spec names the GPU
undo     nothing was created
release  nothing to destroy
"""

from __future__ import annotations

from kubeletplugin.prepare.devices import DeviceTarget
from kubeletplugin.prepare.kinds.base import CreatesNothing, DeviceStep
from kubeletplugin.prepare.records import DeviceRecord


class WholeGpu(CreatesNothing):
    """The steps of a whole GPU (module docstring)."""

    def create(self, step: DeviceStep, device: DeviceRecord, target: DeviceTarget) -> DeviceRecord:
        return device
