"""Start-up recovery: reconcile the checkpoint with what NVML reports, before serving kubelet.

Rules (docs/prepare.md §7, which also says where they come from):

- a ``PrepareCompleted`` record is **adopted** only after NVML confirms every instance it names: the
  GI with the recorded ID exists at the recorded placement with the recorded profile, and holds the
  CI with the recorded ID and MIG UUID;
- a completed record that does not verify is logged loudly and rolled back like a started one;
- a ``PrepareStarted`` record (a crash mid-prepare, or a rollback that failed) is rolled back: the
  GI with *its recorded* ID (if still of the recorded profile at the recorded placement) is
  destroyed, compute instances first; a device without a recorded GI ID has its GI destroyed only
  if the record proves migdra created it (NVML was asked for it, it was not standing then, it has
  no compute instance: :func:`~kubeletplugin.prepare.realize.find_unrecorded_gpu_instance`) --
  any other GI at that placement is left alone, loudly, and the record dropped, so kubelet's retry
  fails cleanly with "occupied by ... that migdra did not create" instead of destroying it;
- an instance that no record names is **never** destroyed (pre-existing and foreign instances stay),
  and a GPU whose instances cannot be read is not touched at all (never act on a failed read);
- a record whose rollback fails stays, as ``PrepareStarted`` with what is left, for the next
  prepare, unprepare or start-up;
- a record whose claim lock another plugin process holds (the other pod of a rolling update is
  preparing or unpreparing it right now) is left to that process: its ``PrepareStarted`` is work in
  progress, not a crash.  The kernel drops the locks of a dead process, even after SIGKILL, so a
  record of a crashed process is never mistaken for one in progress.

This module decides and destroys; it never writes CDI specs or claim status (the service does, from
the report), and never creates anything.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from dra_driver.logs import log_context
from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.errors import NvmlError
from dra_driver.nvml.types import GpuInstanceInfo
from kubeletplugin.prepare.checkpoint import CheckpointStore
from kubeletplugin.prepare.errors import LockTimeoutError, ReleaseError
from kubeletplugin.prepare.locks import KeyedLocks
from kubeletplugin.prepare.realize import release_device
from kubeletplugin.prepare.records import ClaimRecord, ClaimState, DeviceRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What start-up recovery did, per claim record."""

    adopted: tuple[ClaimRecord, ...] = ()
    rolled_back: tuple[ClaimRecord, ...] = ()  # fully released and dropped
    kept: tuple[ClaimRecord, ...] = ()  # rollback incomplete, or GPU unreadable: still recorded
    discarded: tuple[ClaimRecord, ...] = ()  # from another boot
    in_flight: tuple[ClaimRecord, ...] = ()  # another plugin process was working on them: left to it


def compute_verification_problems(record: ClaimRecord, instances: Mapping[str, Sequence[GpuInstanceInfo]]) -> list[str]:
    """Why ``record``'s instances do not match NVML's ``instances`` (per GPU UUID); [] = verified.  Pure."""
    problems: list[str] = []
    for device in record.devices:
        intent = device.intent
        if intent.admin_access or not intent.is_mig:
            continue
        name = intent.device_name
        if device.gpu_instance_id is None or device.compute_instance_id is None or device.mig_uuid is None:
            problems.append(f"{name}: the record lacks the realized GI/CI identity")
            continue
        gi = next((g for g in instances.get(intent.gpu_uuid, ()) if g.gpu_instance_id == device.gpu_instance_id), None)
        if gi is None:
            problems.append(f"{name}: GI {device.gpu_instance_id} no longer exists on GPU {intent.gpu_uuid}")
            continue
        if gi.placement != intent.placement or gi.profile_id != intent.profile_id:
            problems.append(
                f"{name}: GI {gi.gpu_instance_id} is profile {gi.profile_id} at {gi.placement}, the record says "
                f"profile {intent.profile_id} at {intent.placement}"
            )
            continue
        ci = next((c for c in gi.compute_instances if c.compute_instance_id == device.compute_instance_id), None)
        if ci is None:
            problems.append(f"{name}: CI {device.compute_instance_id} of GI {gi.gpu_instance_id} no longer exists")
        elif ci.mig_uuid != device.mig_uuid:
            problems.append(f"{name}: CI {ci.compute_instance_id} is {ci.mig_uuid}, the record says {device.mig_uuid}")
    return problems


def read_instances(
    nvml: Nvml, gpu_locks: KeyedLocks, gpu_uuids: set[str]
) -> tuple[dict[str, list[GpuInstanceInfo]], set[str]]:
    """GPU instances per GPU, and the GPUs that could not be read (to be left alone).

    Each GPU is read under its lock: a GI that another plugin process destroys in the middle of a
    read would make NVML fail the read (a stale handle), and a GPU that cannot be read is not acted on.
    """
    found: dict[str, list[GpuInstanceInfo]] = {}
    unreadable: set[str] = set()
    for gpu_uuid in sorted(gpu_uuids):
        try:
            with gpu_locks.hold(gpu_uuid):
                found[gpu_uuid] = nvml.gpu_instances(gpu_uuid)
        except (NvmlError, LockTimeoutError) as e:
            log.error("cannot read the instances of GPU %s (%s); its records are left untouched", gpu_uuid, e)
            unreadable.add(gpu_uuid)
    return found, unreadable


def record_gpus(record: ClaimRecord) -> set[str]:
    """The GPUs on which ``record`` may have created instances (admin access and whole GPUs create none)."""
    return {d.intent.gpu_uuid for d in record.devices if d.intent.is_mig and not d.intent.admin_access}


def read_verification_problems(nvml: Nvml, gpu_locks: KeyedLocks, record: ClaimRecord) -> list[str] | None:
    """Why a completed ``record`` does not match NVML now ([] = verified); None when a GPU is unreadable."""
    instances, unreadable = read_instances(nvml, gpu_locks, record_gpus(record))
    if unreadable:
        return None
    return compute_verification_problems(record, instances)


def release_record(
    nvml: Nvml, gpu_locks: KeyedLocks, record: ClaimRecord, store: CheckpointStore
) -> tuple[tuple[DeviceRecord, ...], ReleaseError | None]:
    """Destroy every instance ``record`` names (last device first); the devices not released, and why.

    The record is marked ``PrepareStarted`` (being released) before anything is destroyed, and each
    device's record follows every step (compute instance gone, then the GI), so a failure or a crash
    between two steps never leaves a record naming an instance that no longer exists.  The caller
    holds the claim's lock.
    """
    if record.state is not ClaimState.PREPARE_STARTED:
        store.put(record.model_copy(update={"state": ClaimState.PREPARE_STARTED}))
    remaining: list[DeviceRecord] = []
    first_error: ReleaseError | None = None
    for index in reversed(range(len(record.devices))):
        current = [record.devices[index]]

        def progress(device: DeviceRecord, index: int = index, current: list[DeviceRecord] = current) -> None:
            store.update_device(record.claim_uid, index, device)
            current[0] = device

        gpu_uuid = record.devices[index].intent.gpu_uuid
        try:
            with (
                log_context(claim_uid=record.claim_uid, claim=record.label, gpu_uuid=gpu_uuid),
                gpu_locks.hold(gpu_uuid),
            ):
                release_device(nvml, record.devices[index], progress)
        except (ReleaseError, LockTimeoutError) as e:
            log.error("claim %s (UID %s): %s", record.label, record.claim_uid, e.message)
            remaining.insert(0, current[0])
            first_error = first_error or (
                e if isinstance(e, ReleaseError) else ReleaseError(e.message, names_claim=e.names_claim)
            )
    return tuple(remaining), first_error


class Outcome(enum.Enum):
    ADOPTED = "adopted"  # verified against NVML, kept as it is
    ROLLED_BACK = "rolled back"  # released and dropped
    KEPT = "kept"  # rollback incomplete, or a GPU unreadable: still recorded


def recover_record(nvml: Nvml, store: CheckpointStore, gpu_locks: KeyedLocks, record: ClaimRecord) -> Outcome:
    """Adopt ``record`` if it is completed and NVML confirms it, else roll it back.  The caller holds
    the claim's lock (so no plugin process is working on the claim) and passes the record as stored."""
    if record.state is ClaimState.PREPARE_COMPLETED:
        problems = read_verification_problems(nvml, gpu_locks, record)
        if problems is None:
            return Outcome.KEPT
        if not problems:
            log.info("recovery: adopted claim %s (UID %s): NVML confirms its instances", record.label, record.claim_uid)
            return Outcome.ADOPTED
        log.error(
            "RECOVERY: prepared claim %s (UID %s) does not match NVML and is rolled back: %s",
            record.label,
            record.claim_uid,
            "; ".join(problems),
        )
    else:
        log.warning(
            "recovery: claim %s (UID %s) was being prepared or released when a plugin process stopped; rolling back",
            record.label,
            record.claim_uid,
        )
    remaining, error = release_record(nvml, gpu_locks, record, store)
    if error is None:
        store.drop(record.claim_uid)
        return Outcome.ROLLED_BACK
    store.put(record.model_copy(update={"state": ClaimState.PREPARE_STARTED, "devices": remaining}))
    return Outcome.KEPT


def recover(
    nvml: Nvml,
    store: CheckpointStore,
    claim_locks: KeyedLocks,
    gpu_locks: KeyedLocks,
    after: Callable[[ClaimRecord, Outcome], None] = lambda record, outcome: None,
) -> RecoveryReport:
    """Adopt verified records, roll back the rest; see the module docstring for the rules.

    A record whose claim lock another plugin process holds is being prepared or unprepared by it right
    now (the other pod of a rolling update): it is left to that process, not rolled back.  ``after``
    runs for every record recovered here, still under the claim's lock (for its CDI spec and status).
    """
    adopted: list[ClaimRecord] = []
    rolled_back: list[ClaimRecord] = []
    kept: list[ClaimRecord] = []
    in_flight: list[ClaimRecord] = []
    for listed in store.records():
        with claim_locks.try_hold(listed.claim_uid) as held:
            if not held:
                log.info(
                    "recovery: claim %s (UID %s) is being prepared or unprepared by another plugin process (it holds "
                    "%s); left to it",
                    listed.label,
                    listed.claim_uid,
                    claim_locks.lock_path(listed.claim_uid),
                )
                in_flight.append(listed)
                continue
            record = store.get(listed.claim_uid)  # as it is now that nobody works on it
            if record is None:
                continue  # unprepared by the other process in the meantime
            outcome = recover_record(nvml, store, gpu_locks, record)
            if outcome is Outcome.ADOPTED:
                adopted.append(record)
            elif outcome is Outcome.ROLLED_BACK:
                rolled_back.append(record)
            else:
                kept.append(store.get(record.claim_uid) or record)
            after(record, outcome)
    return RecoveryReport(tuple(adopted), tuple(rolled_back), tuple(kept), in_flight=tuple(in_flight))
