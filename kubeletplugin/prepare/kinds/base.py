"""What every kind of device's prepare works with, and the steps each kind implements.

Why one shape for all kinds: a claim's prepare (:mod:`kubeletplugin.prepare.service`) walks its devices
without knowing what they are, and a reader follows one kind top to bottom in its own module --
:mod:`~kubeletplugin.prepare.kinds.exclusive_mig`, :mod:`~kubeletplugin.prepare.kinds.shared_gpu_instance`,
:mod:`~kubeletplugin.prepare.kinds.whole_gpu`, :mod:`~kubeletplugin.prepare.kinds.admin_access` -- each
with the same steps in the same order (docs/prepare.md):

    plan     is the device's placement free, from NVML's reads and the checkpoint? (before the intent
             is recorded; advisory -- ``create`` checks again under the GPU's lock)
    create   under the GPU's lock, record each step in the checkpoint before the NVML call it announces,
             then the result; a failure destroys what this call created before it raises
    undo     the claim's prepare failed after this device was created: destroy what it created
    release  unprepare (and start-up recovery): destroy what the record proves migdra's, recording each
             step before the next

Records change only through :class:`~kubeletplugin.prepare.records.DeviceRecord`'s typed steps, and a
device's record is written through :class:`DeviceStep`.  No kind takes a claim's lock: the service holds
it around the whole claim.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from dra_driver.mig.catalog import Placement
from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.types import GpuInstanceInfo
from kubeletplugin.prepare.checkpoint import CheckpointStore
from kubeletplugin.prepare.conflicts import PlacementConflict
from kubeletplugin.prepare.devices import DeviceTarget
from kubeletplugin.prepare.errors import CheckpointError, LockTimeoutError, RealizeError
from kubeletplugin.prepare.locks import KeyedLocks
from kubeletplugin.prepare.records import ClaimRecord, DeviceIntent, DeviceRecord
from kubeletplugin.settings import CrashPoint

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PrepareContext:
    """What the kinds' steps work with on this node: NVML, the checkpoint, the GPUs' locks, and the
    test-only crash points."""

    nvml: Nvml
    store: CheckpointStore
    gpu_locks: KeyedLocks
    crash_at: CrashPoint | None = None
    # CI placements where NVML and the catalog differ, logged once each (GPU, GI profile, CI profile, NVML's).
    placement_differences: set[tuple[str, int | None, str, tuple[Placement, ...]]] = field(default_factory=set)

    def crash(self, point: CrashPoint) -> None:
        """TESTS ONLY: at the configured crash point, die as ``kill -9`` does (no handler, no ``finally``)."""
        if self.crash_at is not None and point is self.crash_at:
            log.warning("test crash point %s reached: killing this process with SIGKILL", point.value)
            for handler in logging.getLogger().handlers:
                handler.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    def other_records(self, claim_uid: str) -> list[ClaimRecord]:
        """Every other claim's record, as the checkpoint says now."""
        return [record for record in self.store.records() if record.claim_uid != claim_uid]


@dataclass(frozen=True)
class DeviceStep:
    """Device ``index`` of one claim's record: where each step of its creation or release is written."""

    context: PrepareContext
    claim_uid: str
    index: int

    def record(self, device: DeviceRecord, what: str) -> DeviceRecord:
        """Write ``device`` as the record's device; a failure is the claim's :class:`RealizeError` (after
        a GI exists, the caller destroys it)."""
        try:
            self.context.store.update_device(self.claim_uid, self.index, device)
        except (OSError, CheckpointError, LockTimeoutError) as e:
            raise RealizeError(
                f"device {device.intent.device_name}: recording {what} in the checkpoint failed: {e}"
            ) from e
        return device

    def record_release(self, device: DeviceRecord, now: DeviceRecord) -> DeviceRecord:
        """The device as it is ``now`` in a release, written when it changed.  A failed write raises before
        the device's next NVML step, so nothing is destroyed that the record does not account for."""
        if now != device:
            self.context.store.update_device(self.claim_uid, self.index, now)
        return now


class DeviceKind(Protocol):
    """The steps of one kind of device (module docstring)."""

    creates_instances: bool  # False: nothing of it exists on NVML (no lock, no read, no undo)

    def plan(
        self, instances: Sequence[GpuInstanceInfo], intent: DeviceIntent, records: Iterable[ClaimRecord], claim_uid: str
    ) -> PlacementConflict | None: ...

    def create(self, step: DeviceStep, device: DeviceRecord, target: DeviceTarget) -> DeviceRecord: ...

    def undo(self, step: DeviceStep, device: DeviceRecord) -> bool: ...

    def release(self, step: DeviceStep, device: DeviceRecord) -> None: ...


class CreatesNothing:
    """The steps of a kind that creates nothing on NVML (a whole GPU, admin access): nothing to check,
    undo or release; only :meth:`create` says what the device is."""

    creates_instances = False

    def plan(
        self, instances: Sequence[GpuInstanceInfo], intent: DeviceIntent, records: Iterable[ClaimRecord], claim_uid: str
    ) -> PlacementConflict | None:
        return None

    def undo(self, step: DeviceStep, device: DeviceRecord) -> bool:
        return True

    def release(self, step: DeviceStep, device: DeviceRecord) -> None:
        return None


class InstanceLeftError(RealizeError):
    """A device's prepare failed after its GI existed, and destroying the GI failed too: ``device`` is
    the device as recorded, with that GI's ID, so the record keeps naming it for a retry."""

    def __init__(self, message: str, device: DeviceRecord) -> None:
        super().__init__(message)
        self.device = device
