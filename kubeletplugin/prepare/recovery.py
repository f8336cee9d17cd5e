"""Start-up recovery: reconcile the checkpoint with what NVML reports and sweep what nobody owns, before
serving kubelet.

Rules for the records (docs/prepare.md §7, which also says where they come from):

- a ``PrepareCompleted`` record is **adopted** only after NVML confirms every instance it names: the
  GI with the recorded ID exists at the recorded placement with the recorded profile, and holds the
  CI with the recorded ID and MIG UUID; its CDI spec and device metadata are written again where
  missing;
- a completed record that does not verify is logged loudly and rolled back like a started one (and
  its claim's status cleared);
- a ``PrepareStarted`` record (a crash mid-prepare, or a rollback that failed) is rolled back: the
  GI with *its recorded* ID (if still of the recorded profile at the recorded placement) is
  destroyed, compute instances first; a device without a recorded GI ID has its GI destroyed only
  if the record proves migdra created it (NVML was asked for it, it was not standing then, it has
  no compute instance: :func:`~kubeletplugin.prepare.kinds.gpu_instances.find_unrecorded_gpu_instance`) --
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

Then the sweeps: the files of records of another boot go with them; CDI specs and device metadata
directories no record names, and temporary spec files of dead writers, are removed -- each under its
claim's lock, skipping a claim another plugin process is working on.

This module decides and destroys; it never creates an instance.
"""

from __future__ import annotations

import contextlib
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dra_driver.durable import find_leftover_temporary_files, remove_temporary_files
from dra_driver.kubelet.calls import ClaimRef
from dra_driver.nvml.backend import Nvml
from kubeletplugin.prepare.cdi import claim_uid_of_spec, list_cdi_spec_claims
from kubeletplugin.prepare.checkpoint import CheckpointStore, LoadOutcome
from kubeletplugin.prepare.claim_files import ClaimFiles
from kubeletplugin.prepare.errors import ReleaseError
from kubeletplugin.prepare.locks import KeyedLocks
from kubeletplugin.prepare.metadata import list_metadata_claims, remove_metadata_directory
from kubeletplugin.prepare.records import ClaimRecord, ClaimState
from kubeletplugin.prepare.reporter import ClaimReporter
from kubeletplugin.prepare.verification import read_verification_problems

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What start-up recovery did, per claim record."""

    adopted: tuple[ClaimRecord, ...] = ()
    rolled_back: tuple[ClaimRecord, ...] = ()  # fully released and dropped
    kept: tuple[ClaimRecord, ...] = ()  # rollback incomplete, or GPU unreadable: still recorded
    discarded: tuple[ClaimRecord, ...] = ()  # from another boot
    in_flight: tuple[ClaimRecord, ...] = ()  # another plugin process was working on them: left to it


class Outcome(enum.Enum):
    ADOPTED = "adopted"  # verified against NVML, kept as it is
    ROLLED_BACK = "rolled back"  # released and dropped
    KEPT = "kept"  # rollback incomplete, or a GPU unreadable: still recorded


def recover_record(
    nvml: Nvml, gpu_locks: KeyedLocks, record: ClaimRecord, release: Callable[[ClaimRecord], ReleaseError | None]
) -> Outcome:
    """Adopt ``record`` if it is completed and NVML confirms it, else roll it back with ``release`` (the
    service's release path: destroys what the record names step by step, then drops the record or keeps
    what is left; its error, or None).  The caller holds the claim's lock (so no plugin process is
    working on the claim) and passes the record as stored."""
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
    return Outcome.ROLLED_BACK if release(record) is None else Outcome.KEPT


def recover_node(
    nvml: Nvml,
    store: CheckpointStore,
    loaded: LoadOutcome,
    files: ClaimFiles,
    claim_locks: KeyedLocks,
    gpu_locks: KeyedLocks,
    reporter: ClaimReporter,
    *,
    release: Callable[[ClaimRecord], ReleaseError | None],
) -> RecoveryReport:
    """Adopt verified records, roll back the rest (``release``: the service's release path, so a rollback
    at start-up records its steps exactly as an unprepare does), sweep leftovers; see the module docstring.

    ``loaded`` is what the store's load found; its records of another boot lose their files here (no
    process of this boot can be working on them).  A record whose claim lock another plugin process
    holds is being prepared or unprepared by it right now (the other pod of a rolling update): it is
    left to that process, not rolled back.  Raises :class:`LockTimeoutError` when the checkpoint's lock
    stays held.
    """
    for discarded in loaded.discarded:
        files.delete(discarded.claim_uid)
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
            outcome = recover_record(nvml, gpu_locks, record, release)
            if outcome is Outcome.ADOPTED:
                adopted.append(record)
                files.ensure(record, strict=False)
            elif outcome is Outcome.ROLLED_BACK:
                rolled_back.append(record)
                files.delete(record.claim_uid)
                if record.state is ClaimState.PREPARE_COMPLETED:
                    reporter.report_cleared(ClaimRef(record.namespace, record.name, record.claim_uid), record)
            else:
                kept.append(store.get(record.claim_uid) or record)
    sweep_cdi_leftovers(files, store, claim_locks)
    sweep_metadata_leftovers(files, store, claim_locks)
    return RecoveryReport(tuple(adopted), tuple(rolled_back), tuple(kept), loaded.discarded, tuple(in_flight))


def sweep_cdi_leftovers(files: ClaimFiles, store: CheckpointStore, claim_locks: KeyedLocks) -> None:
    """Spec files no record names, and temporary spec files of dead writers, each under its claim's lock.

    The directory is listed *before* the records are read: a spec is written after its claim's
    record, so one listed here whose record is gone under the claim's lock belongs to nobody.  A
    claim another plugin process is working on is skipped.
    """
    specs = list_cdi_spec_claims(files.cdi_dir, files.driver_name)
    temporaries: dict[str, list[Path]] = {}
    for path, target in find_leftover_temporary_files(files.cdi_dir, lambda target: True):
        uid = claim_uid_of_spec(Path(target), files.driver_name)
        if uid is not None:  # another vendor's file is never ours to remove
            temporaries.setdefault(uid, []).append(path)
    for uid in sorted(specs | temporaries.keys()):
        with claim_locks.try_hold(uid) as held:
            if not held:
                continue
            remove_temporary_files(temporaries.get(uid, ()))  # its writers hold this lock: none is writing
            if uid in specs and store.get(uid) is None:
                log.warning("removing CDI spec of claim UID %s: no checkpoint record names it", uid)
                files.delete(uid)


def sweep_metadata_leftovers(files: ClaimFiles, store: CheckpointStore, claim_locks: KeyedLocks) -> None:
    """Device metadata directories no record names (as CDI specs, docs/prepare.md §7).

    A directory is listed before the records are read, and removed only while no record names its
    claim and the lock of every claim UID its files name is held here: metadata is written after
    the claim's record, under its lock, so what is listed and then found unnamed belongs to nobody.
    """
    for listed in list_metadata_claims(files.metadata_root):
        with contextlib.ExitStack() as held:
            uids = sorted(uid for uid in listed.claim_uids if uid is not None)
            if not all(held.enter_context(claim_locks.try_hold(uid)) for uid in uids):
                continue  # another plugin process is working on one of them
            if any(r.namespace == listed.namespace and r.name == listed.name for r in store.records()):
                continue
            removed = remove_metadata_directory(files.metadata_root, listed.namespace, listed.name)
            log.warning(
                "removed the device metadata of claim %s/%s (%d file(s)): no checkpoint record names it",
                listed.namespace,
                listed.name,
                removed,
            )
