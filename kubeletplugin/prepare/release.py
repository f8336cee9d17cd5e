"""Taking a claim's devices down again: the release of a record (unprepare, a stale record rolled back
before a new prepare, start-up recovery) and the undo of a prepare that failed half-way.

Common to every kind of device, in the order the record lists them, last first; what each kind
destroys is its own (:mod:`~kubeletplugin.prepare.kinds`).  Per device, under its GPU's lock, each NVML
step is followed by the write of what the device's record must say next, so a failure or a kill -9
between two steps never leaves a record naming an instance that no longer exists, nor one that forgets
an instance that does.  A device that NVML refuses to release (in use) or whose GPU's lock times out
is kept as last recorded; the other devices are still released.  Callers hold the claim's lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from dra_driver.logs import log_context
from kubeletplugin.prepare.errors import LockTimeoutError, ReleaseError
from kubeletplugin.prepare.kinds import DeviceStep, PrepareContext, kind_of
from kubeletplugin.prepare.records import ClaimRecord, ClaimState, DeviceRecord

log = logging.getLogger(__name__)


def release_record(context: PrepareContext, record: ClaimRecord) -> ReleaseError | None:
    """Destroy every instance ``record`` names, last device first, recording each step; then drop the
    record, or keep what is left of it as PrepareStarted.  The first device's error (None: all released).

    The record is marked PrepareStarted (being released) before anything is destroyed.
    """
    store = context.store
    if record.state is not ClaimState.PREPARE_STARTED:
        store.put(record.being_released())
    remaining: list[DeviceRecord] = []
    first_error: ReleaseError | None = None
    for index in reversed(range(len(record.devices))):
        device = record.devices[index]
        kind = kind_of(device.intent)
        if not kind.creates_instances:
            continue
        step = DeviceStep(context, record.claim_uid, index)
        try:
            with (
                log_context(claim_uid=record.claim_uid, claim=record.label, gpu_uuid=device.intent.gpu_uuid),
                context.gpu_locks.hold(device.intent.gpu_uuid),
            ):
                kind.release(step, device)
        except (ReleaseError, LockTimeoutError) as e:
            log.error("claim %s (UID %s): %s", record.label, record.claim_uid, e.message)
            remaining.insert(0, _as_recorded(context, record, index))
            first_error = first_error or (
                e if isinstance(e, ReleaseError) else ReleaseError(e.message, names_claim=e.names_claim)
            )
    if first_error is None:
        store.drop(record.claim_uid)
    else:
        store.put(record.being_released(tuple(remaining)))
    return first_error


def undo_prepare(
    context: PrepareContext,
    started: ClaimRecord,
    realized: Sequence[DeviceRecord],
    delete_files: Callable[[str], object],
) -> None:
    """Destroy what a failed prepare created (``realized``: its devices as far as they got, last first);
    record what could not be destroyed, or drop the record; then the claim's files."""
    left: list[tuple[int, DeviceRecord]] = []
    for index in reversed(range(len(realized))):
        device = realized[index]
        kind = kind_of(device.intent)
        if not kind.creates_instances:
            continue
        try:
            with context.gpu_locks.hold(device.intent.gpu_uuid):
                gone = kind.undo(DeviceStep(context, started.claim_uid, index), device)
        except (ReleaseError, LockTimeoutError) as e:
            log.error("claim %s: rolling back device %s failed: %s", started.label, device.intent.device_name, e)
            gone = False
        if not gone:
            left.insert(0, (index, device))
    # The record tells the truth first: a spec that cannot be deleted (a read-only CDI directory)
    # must never leave a record naming a GI that is gone -- an operator's GI may get its ID next.
    if left:
        context.store.put(started.being_released(tuple(device for _, device in left)))
    else:
        context.store.drop(started.claim_uid)
    try:
        delete_files(started.claim_uid)
    except OSError as e:
        log.error(
            "claim %s (UID %s): removing its CDI spec after the failed prepare failed: %s; the spec names no "
            "instance and is removed at the next unprepare or start-up",
            started.label,
            started.claim_uid,
            e,
        )


def _as_recorded(context: PrepareContext, record: ClaimRecord, index: int) -> DeviceRecord:
    """Device ``index`` as the checkpoint says now (a failed release keeps it as last recorded)."""
    current = context.store.get(record.claim_uid)
    if current is None or index >= len(current.devices):
        return record.devices[index]
    return current.devices[index]
