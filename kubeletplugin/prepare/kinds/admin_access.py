"""Admin access (``adminAccess: true``): monitoring or maintenance of a device another claim may hold,
so its prepare never creates or destroys anything.

    plan     never conflicts: it holds no hardware
    create   the instance migdra created at that placement, if a record names one (its MIG UUID goes
             into the CDI spec); else the parent GPU only
    undo     nothing was created
    release  nothing to destroy (the instance belongs to the claim that made it)
"""

from __future__ import annotations

from kubeletplugin.prepare.devices import DeviceTarget
from kubeletplugin.prepare.kinds.base import CreatesNothing, DeviceStep
from kubeletplugin.prepare.records import DeviceRecord


class AdminAccess(CreatesNothing):
    """The steps of admin access to a device (module docstring)."""

    def create(self, step: DeviceStep, device: DeviceRecord, target: DeviceTarget) -> DeviceRecord:
        intent = device.intent
        if not intent.is_mig:
            return device
        assert intent.profile_id is not None
        assert intent.placement is not None
        owner = step.context.store.find_owner(intent.gpu_uuid, intent.profile_id, intent.placement)
        return device if owner is None else device.with_instance_of(owner)
