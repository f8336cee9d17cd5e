"""The kinds of device a claim's prepare handles, one module each, each with the same steps in the same
order (:mod:`~kubeletplugin.prepare.kinds.base`): exclusive MIG device, share of a shared GPU
instance, whole GPU, admin access.  :func:`kind_of` is the one place that tells them apart."""

from __future__ import annotations

from kubeletplugin.prepare.kinds.admin_access import AdminAccess
from kubeletplugin.prepare.kinds.base import DeviceKind, DeviceStep, InstanceLeftError, PrepareContext
from kubeletplugin.prepare.kinds.exclusive_mig import ExclusiveMigDevice
from kubeletplugin.prepare.kinds.shared_gpu_instance import SharedGpuInstance
from kubeletplugin.prepare.kinds.whole_gpu import WholeGpu
from kubeletplugin.prepare.records import DeviceIntent

__all__ = ["DeviceKind", "DeviceStep", "InstanceLeftError", "PrepareContext", "kind_of"]

_ADMIN_ACCESS = AdminAccess()
_WHOLE_GPU = WholeGpu()
_SHARE = SharedGpuInstance()
_EXCLUSIVE = ExclusiveMigDevice()


def kind_of(intent: DeviceIntent) -> DeviceKind:
    """The kind of the device ``intent`` describes.  Admin access first: it never creates anything, even
    on a shared device (a shareID allocated with admin access is kept for the status, nothing more)."""
    if intent.admin_access:
        return _ADMIN_ACCESS
    if not intent.is_mig:
        return _WHOLE_GPU
    if intent.is_share:
        return _SHARE
    return _EXCLUSIVE
