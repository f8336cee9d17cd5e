"""The node's record of what migdra prepared: its store, shared by every plugin process of the node.

This module owns the checkpoint's store (:class:`CheckpointStore`) and its layout on disk; the
versioned, checksummed record schema and file formats are :mod:`kubeletplugin.prepare.records`'s.
The service writes ``PrepareStarted`` (the intended devices: GPU, profile, placement) **before** it
touches NVML; then, per MIG device and under the GPU's lock, the GPU instances standing on the GPU
just before it asks NVML for the GI (``gpuInstancesBefore``: "creation requested"), and the GI ID as
soon as NVML returns it (before the compute instance is created); and ``PrepareCompleted`` (plus the
compute instance, MIG UUID and CDI IDs) after the CDI spec is on disk.  So after a crash the record
tells recovery exactly which instances may be migdra's, and :meth:`CheckpointStore.owned` tells the
slice publisher about an instance from the moment it exists.  It never talks to NVML or the API server
and never decides what to destroy.

Layout: one file per claim, ``<state dir>/claims/<boot ID>/<claim UID>.json``, so a change of a claim
rewrites that claim's file alone and a prepare's disk work does not grow with the claims the node
holds (one file holding every claim was rewritten whole for every step: 225 rewrites and 9.4 MB for
56 claims).  ``<state dir>/checkpoint.json`` is a marker naming that layout and its schema version
(:mod:`~kubeletplugin.prepare.records`): :meth:`CheckpointStore.load` writes it into a fresh state
directory and refuses one of a version it does not read.

What is durable, and why no record write is fsynced.  Each record file is replaced atomically (a
temporary file renamed over it): every process of this kernel -- this one after a ``kill -9``, the
other pod of a rolling update -- sees the old record or the new one, never a torn one, because they
all read the kernel's page cache, which a process's death does not touch.  An fsync would only add
that the record survives a crash *of the kernel* (a panic, a power cut).  But then the node reboots
and no MIG instance survives a reboot: every record of the previous boot is thrown away unread, and
that is why the boot ID is part of the records' directory -- :meth:`~CheckpointStore.load` removes the
directories of other boots without parsing them, so a record torn or emptied by the crash can never
stop the plugin.  So neither the file fsync before the rename ("the rename must not expose an empty
file after a crash") nor the directory fsync after it ("the record must be on disk before NVML is
asked to create the instance") protects anything: the instance the record describes dies with the
page cache that holds the record.  The one fsynced file is the marker, written once per node (a
fresh state directory): it is read before the boot is known, so an empty marker after a crash would
stop the plugin.  Not defended: a disk that loses writes while the
kernel runs on (a failing device under the state directory), which the CDI specs and kubelet's own
state on the same disk would not survive either.

Several processes: during a rolling update the old and the new plugin pod share the state directory
and both prepare.  :class:`CheckpointStore` therefore keeps no state of its own that the files do not
have: each change is made under an exclusive ``flock`` of ``<state dir>/prepare.lock`` (held for that
change only) to the claim's record as it is on disk then, and each read re-reads the files that
changed.  Leftover temporary files of interrupted writes are removed at :meth:`CheckpointStore.load`,
under that lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dra_driver.devicemodel.pool import OwnedInstances
from dra_driver.durable import WriteCost, remove_leftover_temporary_files, write_file_atomically
from dra_driver.mig.catalog import Placement
from kubeletplugin.prepare.errors import CheckpointError, DeviceConflictError, LockTimeoutError
from kubeletplugin.prepare.locks import describe_lock_timeout, release_flock, try_flock
from kubeletplugin.prepare.records import (
    CLAIMS_DIRECTORY,
    ClaimRecord,
    ClaimState,
    DeviceIntent,
    DeviceRecord,
    build_checkpoint_marker,
    build_claim_file,
    compute_conflicting_device,
    parse_checkpoint_marker,
    parse_claim_file,
)

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "checkpoint.json"
STATE_LOCK_FILE = "prepare.lock"
BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
RECORD_SUFFIX = ".json"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def read_node_boot_id(path: Path = BOOT_ID_PATH) -> str:
    """The kernel's boot ID: it changes on every reboot, and MIG instances do not survive one."""
    try:
        return path.read_text(encoding="ascii").strip()
    except OSError as e:
        raise CheckpointError(f"cannot read the node boot ID from {path}: {e}") from e


def safe_file_name(key: str) -> str:
    """``key`` itself when it is a plain file name, else a digest of it.

    Claim UIDs come from kubelet and boot IDs from the kernel (or a test); a key such as ``../x``
    must never name a file outside the checkpoint's directory.
    """
    if _SAFE_NAME.match(key):
        return key
    return f"sha256-{hashlib.sha256(key.encode('utf-8', 'surrogateescape')).hexdigest()[:32]}"


def claim_file_name(claim_uid: str) -> str:
    return safe_file_name(claim_uid) + RECORD_SUFFIX


@dataclass(frozen=True, slots=True)
class LoadOutcome:
    """What :meth:`CheckpointStore.load` found; ``discarded``: records of another boot, dropped."""

    records: tuple[ClaimRecord, ...]
    discarded: tuple[ClaimRecord, ...]
    previous_boot_id: str | None


@dataclass(frozen=True, slots=True)
class CheckpointWriteStats:
    """The checkpoint's disk work done by one store (one per plugin process), counted as it is done.

    ``writes``: files written (each an atomic replacement); ``bytes``: their size, summed; ``fsyncs``:
    of files and directories; ``removals``: record files removed (a dropped claim).
    """

    writes: int = 0
    bytes: int = 0
    fsyncs: int = 0
    removals: int = 0

    def __sub__(self, earlier: CheckpointWriteStats) -> CheckpointWriteStats:
        """The work done between ``earlier`` and this reading."""
        return CheckpointWriteStats(
            self.writes - earlier.writes,
            self.bytes - earlier.bytes,
            self.fsyncs - earlier.fsyncs,
            self.removals - earlier.removals,
        )

    def plus(self, cost: WriteCost) -> CheckpointWriteStats:
        return CheckpointWriteStats(self.writes + 1, self.bytes + cost.bytes, self.fsyncs + cost.fsyncs, self.removals)


FileKey = tuple[int, int, int, int]


def _file_key(st: os.stat_result) -> FileKey:
    """Which file, and which version of it: device, inode, modification time (ns), size."""
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


@dataclass(frozen=True, slots=True)
class _Pinned:
    """A record file as last read or written: its open descriptor, its key, its record."""

    fd: int
    key: FileKey
    record: ClaimRecord


class CheckpointStore:
    """The checkpoint of one node, shared by every plugin process of the node; thread-safe.

    The files are the truth, not this process's memory: during a rolling update the other plugin pod
    changes them too.  So

    - every change is made under an exclusive ``flock`` of ``<state dir>/prepare.lock`` (taken per
      change and held only for it): the claim's file is re-read if it changed, and replaced
      atomically before the lock is released; :meth:`begin` re-reads every changed file under that
      lock, for its check against the other claims;
    - every read re-reads first the files that changed since this process last read or wrote them
      (no lock needed: a file is only ever replaced by a rename, so a reader sees a whole record);
      :meth:`get` looks at its claim's file alone, the others list the directory and ``stat`` each
      file, and parse only those that changed.

    "Changed" is decided by a file's (device, inode, mtime, size).  Every write is a new inode, and
    the descriptor of each file last read stays open, so that inode cannot be reused by a later write
    and mistaken for the version already read.

    Records are immutable values; callers replace a claim's record as a whole.  A wait for the lock
    longer than ``lock_timeout`` raises :class:`~kubeletplugin.prepare.errors.LockTimeoutError`
    naming the lock file and its holder.
    """

    def __init__(
        self,
        state_dir: Path,
        boot_id: str,
        *,
        lock_timeout: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        observe_write: Callable[[float], None] | None = None,
        on_share_change: Callable[[], None] | None = None,
    ) -> None:
        self._observe_write = observe_write  # seconds of each write or removal: a metric
        # Called after a write or removal of a record holding shares, once it is on disk: what the
        # shared devices admit follows the CI placements the records hold (share_compute_instances).
        self._on_share_change = on_share_change
        self.state_dir = state_dir
        self.path = state_dir / CHECKPOINT_FILE  # the marker: layout and schema version
        self.claims_root = state_dir / CLAIMS_DIRECTORY
        self.directory = self.claims_root / safe_file_name(boot_id)  # this boot's record files
        self.lock_path = state_dir / STATE_LOCK_FILE
        self.boot_id = boot_id
        self._lock_timeout = lock_timeout
        self._clock = clock
        self._writer = threading.Lock()  # one change of this process at a time (held while waiting for the flock)
        self._view_lock = threading.Lock()  # the view below; held briefly, never while waiting for the flock
        self._files: dict[str, _Pinned] = {}  # by file name
        self._stats = CheckpointWriteStats()

    def claim_path(self, claim_uid: str) -> Path:
        """The file of the claim's record: the layout's answer to "where is claim X" (for tests and
        tools that inspect a state directory; the store itself works by file name)."""
        return self.directory / claim_file_name(claim_uid)

    def write_stats(self) -> CheckpointWriteStats:
        """The disk work of this store's writes so far (cumulative; subtract two readings for a span)."""
        with self._view_lock:
            return self._stats

    def load(self) -> LoadOutcome:
        """Read the records at start-up, after checking the marker and cleaning up what needs it.

        Under the checkpoint's lock: removes leftover temporary files of dead writers; writes the
        marker into a fresh state directory, or checks the one there; removes the record directories
        of other boots (MIG instances do not survive a reboot); then reads every record of this boot.
        Raises :class:`CheckpointError` if a file cannot be trusted (naming it; nothing is removed
        then) or the lock stayed held.
        """
        try:
            with self._exclusive(), self._view_lock:
                self._unpin_all()
                # Every writer of these files holds this lock: no temporary file of them is being written now.
                remove_leftover_temporary_files(self.state_dir, lambda target: target == CHECKPOINT_FILE)
                remove_leftover_temporary_files(self.directory, lambda target: target.endswith(RECORD_SUFFIX))
                found_this_boot = self.directory.is_dir()
                self._check_marker_locked()
                discarded, older_boot = self._discard_other_boots_locked()
                self.directory.mkdir(parents=True, exist_ok=True)
                self._refresh_all_locked()
                records = tuple(pinned.record for pinned in self._sorted_files())
                previous = older_boot or (self.boot_id if found_this_boot or records else None)
                return LoadOutcome(records, tuple(discarded), previous)
        except LockTimeoutError as e:
            raise CheckpointError(f"cannot load the checkpoint: {e.message}") from e
        except OSError as e:
            raise CheckpointError(f"cannot read the checkpoint in {self.state_dir}: {e}") from e

    def close(self) -> None:
        """Let go of the files last read (the store can still be used; it re-reads)."""
        with self._view_lock:
            self._unpin_all()

    # -- reads: the files as they are now -----------------------------------------------------------

    def get(self, claim_uid: str) -> ClaimRecord | None:
        """The claim's record as on disk now: its own file is looked at, no other."""
        with self._view_lock:
            return self._refresh_one_locked(claim_file_name(claim_uid))

    def records(self) -> tuple[ClaimRecord, ...]:
        """Every record as on disk now (re-read where another process or thread changed it)."""
        with self._view_lock:
            self._refresh_all_locked()
            return tuple(pinned.record for pinned in self._sorted_files())

    def owned(self) -> OwnedInstances:
        """Every GPU instance the records say migdra created (admin access excluded), from one read.

        By GI ID from the intermediate write right after NVML created it, so an instance still waiting
        for its compute instance is migdra's, not a foreign one, in every publish round -- whichever
        plugin process created it.  By (GPU UUID, GI profile ID, placement) while NVML is being asked
        and the ID is unknown: the entry is recorded under the GPU's lock after the placement was found
        free, before the NVML call, and replaced by the GI ID in one step (one replacement of the
        claim's file).  Both come from the same read of the records, so the instance is named by one
        or the other whenever that read falls; read before and after the node's instances, the two
        reads together name every GI migdra created that the inventory shows.
        """
        records = self.records()
        return OwnedInstances(
            instances=frozenset(
                (device.intent.gpu_uuid, device.gpu_instance_id)
                for record in records
                for device in record.devices
                if device.owns_instance and device.gpu_instance_id is not None
            ),
            placements=frozenset(
                (device.intent.gpu_uuid, device.intent.profile_id, device.intent.placement)
                for record in records
                for device in record.devices
                if device.creation_in_flight
                and device.intent.profile_id is not None
                and device.intent.placement is not None
            ),
        )

    def live_shares(self) -> int:
        """How many devices of the records are shares of a shared GPU instance (prepared, being
        prepared or being released): while any is, the shared devices must stay published."""
        return sum(1 for record in self.records() for device in record.devices if device.intent.is_share)

    def share_compute_instances(self) -> dict[tuple[str, int, Placement], tuple[Placement, ...]]:
        """The CI placements shares hold in each shared GI, by (GPU UUID, GI profile ID, GI placement),
        sorted by start: every share record whose CI placement is recorded (prepared, being created --
        the placement is recorded before NVML is asked -- or being released), so the publisher never
        offers a size whose placement one of them takes."""
        taken: dict[tuple[str, int, Placement], list[Placement]] = {}
        for record in self.records():
            for device in record.devices:
                intent = device.intent
                placement = device.compute_instance_placement
                if intent.is_share and placement is not None and intent.profile_id is not None and intent.placement:
                    taken.setdefault((intent.gpu_uuid, intent.profile_id, intent.placement), []).append(placement)
        return {key: tuple(sorted(placements, key=lambda p: p.start)) for key, placements in taken.items()}

    def find_owner(self, gpu_uuid: str, profile_id: int, placement: Placement) -> DeviceRecord | None:
        """The completed, non-admin device record that created the instance at exactly this placement."""
        for record in self.records():
            if record.state is not ClaimState.PREPARE_COMPLETED:
                continue
            for device in record.devices:
                intent = device.intent
                if (
                    device.owns_instance
                    and intent.gpu_uuid == gpu_uuid
                    and intent.profile_id == profile_id
                    and intent.placement == placement
                ):
                    return device
        return None

    # -- changes: one claim's file, under the checkpoint's lock -------------------------------------

    def put(self, record: ClaimRecord) -> None:
        """Record ``record`` as the claim's record (nothing is written if the file already says so)."""
        with self._exclusive(), self._view_lock:
            before = self._refresh_one_locked(claim_file_name(record.claim_uid))
            if before == record:
                return
            self._write_locked(record)
        self._shares_written(before, record)

    def begin(self, record: ClaimRecord) -> None:
        """Record ``PrepareStarted`` unless another claim already holds one of its devices.

        The check and the write are one step under the checkpoint's lock, which every writer of every
        record holds: so two claims allocated the same or an overlapping placement (a double
        allocation) never both proceed, whichever plugin process prepares them.  The check reads every
        record (parsing only the files that changed); the write is the claim's file alone.
        """
        with self._exclusive(), self._view_lock:
            self._refresh_all_locked()
            for pinned in self._sorted_files():
                other = pinned.record
                if other.claim_uid == record.claim_uid:
                    continue
                for device in record.devices:
                    held = compute_conflicting_device(device.intent, other.devices)
                    if held is not None:
                        raise DeviceConflictError(
                            f"device {device.intent.device_name}: GPU {device.intent.gpu_uuid} "
                            f"{_describe_intent(held.intent)} is already prepared for claim {other.label} "
                            f"(UID {other.claim_uid}); refusing a double allocation"
                        )
            self._write_locked(record)
        self._shares_written(None, record)

    def drop(self, claim_uid: str) -> None:
        """Remove the claim's record (its file); nothing happens if it has none."""
        name = claim_file_name(claim_uid)
        with self._exclusive(), self._view_lock:
            before = self._refresh_one_locked(name)
            if before is None:
                return
            started = time.perf_counter()
            # No directory fsync: a removal lost in a crash of the node is a record of a previous boot,
            # which the next load discards unread (module docstring).
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.directory / name)
            self._observed(started)
            self._stats = CheckpointWriteStats(
                self._stats.writes, self._stats.bytes, self._stats.fsyncs, self._stats.removals + 1
            )
            self._unpin(name)
        self._shares_written(before, None)

    def update_device(self, claim_uid: str, index: int, device: DeviceRecord) -> ClaimRecord:
        """Replace device ``index`` of the claim's record (a step of its prepare); the new record.

        Raises :class:`KeyError` when the claim has no record: callers hold the claim's lock (in every
        plugin process), so its record cannot vanish under them.
        """
        with self._exclusive(), self._view_lock:
            record = self._refresh_one_locked(claim_file_name(claim_uid))
            if record is None:
                raise KeyError(claim_uid)
            updated = record.with_device(index, device)
            self._write_locked(updated)
        self._shares_written(record, updated)
        return updated

    def _shares_written(self, before: ClaimRecord | None, after: ClaimRecord | None) -> None:
        """Tell the listener when a record that holds (or held) a share was written or removed."""
        if self._on_share_change is None:
            return
        if any(device.intent.is_share for record in (before, after) if record for device in record.devices):
            self._on_share_change()

    # -- the files ----------------------------------------------------------------------------------

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        """This process's writer lock, then the checkpoint's ``flock`` (bounded wait)."""
        deadline = self._clock() + self._lock_timeout
        if not self._writer.acquire(timeout=self._lock_timeout):
            raise LockTimeoutError(
                f"waited {self._lock_timeout:g} s for the checkpoint: another thread of this plugin process kept "
                f"writing it (or waiting for {self.lock_path}); kubelet retries the claim"
            )
        try:
            fd = try_flock(self.lock_path, deadline, self._clock)
            if fd is None:
                raise LockTimeoutError(
                    describe_lock_timeout(self.lock_path, "the checkpoint's lock", self._lock_timeout)
                )
            try:
                yield
            finally:
                release_flock(self.lock_path, fd, remove=False)
        finally:
            self._writer.release()

    def _check_marker_locked(self) -> None:
        """Write the marker into a fresh state directory; refuse one of a layout this migdra does not read."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            self._write_marker_locked()
            return
        parse_checkpoint_marker(raw, self.path)  # CheckpointError naming the file and its version

    def _write_marker_locked(self) -> None:
        # The one fsynced write (both fsyncs): the marker is read before the boot is known, so it must
        # not be empty or torn after a crash of the node; it is written once per state directory.
        self._write_file_locked(self.path, build_checkpoint_marker(), sync=True)

    def _discard_other_boots_locked(self) -> tuple[list[ClaimRecord], str | None]:
        """Remove the record directories of other boots; the records that could still be read, and a boot ID.

        A record of an earlier boot may be torn or empty (a crash of the node before it reached the
        disk): it is logged and removed, never trusted and never an error.
        """
        discarded: list[ClaimRecord] = []
        previous: str | None = None
        try:
            entries = sorted(os.scandir(self.claims_root), key=lambda entry: entry.name)
        except FileNotFoundError:
            return [], None
        for entry in entries:
            if entry.name == self.directory.name or not entry.is_dir(follow_symlinks=False):
                continue
            directory = Path(entry.path)
            records: list[ClaimRecord] = []
            for path in sorted(directory.iterdir()):
                if path.name.endswith(RECORD_SUFFIX) and not path.name.startswith("."):
                    try:
                        loaded = parse_claim_file(path.read_bytes(), path)
                    except (CheckpointError, OSError) as e:
                        log.warning("discarding %s, a record of an earlier boot that cannot be read: %s", path, e)
                    else:
                        records.append(loaded.claim)
                        previous = loaded.node_boot_id
                with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                    path.unlink()
            with contextlib.suppress(OSError):
                directory.rmdir()
            log.warning(
                "checkpoint records of boot %s (%s) discarded: %d claim(s) (MIG instances do not survive a reboot)",
                previous or entry.name,
                directory,
                len(records),
            )
            discarded += records
            previous = previous or entry.name
        return discarded, previous

    def _refresh_all_locked(self) -> None:
        """Bring the view up to this boot's directory as it is now (caller holds ``_view_lock``)."""
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            if self._files:
                log.warning(
                    "checkpoint directory %s was removed while the plugin ran; its records are gone", self.directory
                )
            entries = []
        except OSError as e:
            raise CheckpointError(f"cannot read the checkpoint directory {self.directory}: {e}") from e
        present: set[str] = set()
        for entry in entries:
            name = entry.name
            if name.startswith(".") or not name.endswith(RECORD_SUFFIX):
                continue  # temporary files of writes in progress, or not migdra's
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed since the listing
            except OSError as e:
                raise CheckpointError(f"cannot read checkpoint record {entry.path}: {e}") from e
            present.add(name)
            pinned = self._files.get(name)
            if pinned is None or pinned.key != _file_key(st):
                self._reload_locked(name)
        for name in set(self._files) - present:
            self._unpin(name)

    def _refresh_one_locked(self, name: str) -> ClaimRecord | None:
        """The record in file ``name`` as it is now (re-read if it changed); None if there is none."""
        try:
            st = os.stat(self.directory / name)
        except FileNotFoundError:
            self._unpin(name)
            return None
        except OSError as e:
            raise CheckpointError(f"cannot read checkpoint record {self.directory / name}: {e}") from e
        pinned = self._files.get(name)
        if pinned is None or pinned.key != _file_key(st):
            pinned = self._reload_locked(name)  # verifies that the file is ``claim_uid``'s
        return pinned.record if pinned is not None else None

    def _reload_locked(self, name: str) -> _Pinned | None:
        """Read, verify and pin file ``name``; None (and forgotten) if it is gone."""
        path = self.directory / name
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            self._unpin(name)
            return None
        except OSError as e:
            raise CheckpointError(f"cannot read checkpoint record {path}: {e}") from e
        try:
            st = os.fstat(fd)
            loaded = parse_claim_file(_read(fd), path)
            if loaded.node_boot_id != self.boot_id:
                raise CheckpointError(
                    f"checkpoint record {path} belongs to boot {loaded.node_boot_id}, this is boot {self.boot_id}; "
                    "something other than migdra wrote it -- inspect it, then remove it only if no MIG instance "
                    "it names is in use"
                )
            if claim_file_name(loaded.claim.claim_uid) != name:
                raise CheckpointError(
                    f"checkpoint record {path} holds claim {loaded.claim.claim_uid}, whose file is "
                    f"{claim_file_name(loaded.claim.claim_uid)}; something other than migdra wrote it"
                )
        except OSError as e:
            os.close(fd)
            raise CheckpointError(f"cannot read checkpoint record {path}: {e}") from e
        except BaseException:
            os.close(fd)
            raise
        pinned = _Pinned(fd, _file_key(st), loaded.claim)
        self._pin(name, pinned)
        return pinned

    def _write_locked(self, record: ClaimRecord) -> None:
        """Replace the claim's file (caller holds the flock and ``_view_lock``) and make it the view."""
        name = claim_file_name(record.claim_uid)
        path = self.directory / name
        self._write_file_locked(path, build_claim_file(self.boot_id, record))
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)  # under the flock nobody else replaced it since the rename
        self._pin(name, _Pinned(fd, _file_key(os.fstat(fd)), record))

    def _write_file_locked(self, path: Path, data: bytes, *, sync: bool = False) -> None:
        """Atomically replace ``path``, counted in the write statistics and the metric.

        ``sync`` is False for record files: see the module docstring for why no fsync is needed.
        """
        started = time.perf_counter()
        cost = write_file_atomically(path, data, mode=0o600, sync=sync)
        self._observed(started)
        self._stats = self._stats.plus(cost)

    def _observed(self, started: float) -> None:
        if self._observe_write is not None:
            self._observe_write(time.perf_counter() - started)

    def _sorted_files(self) -> list[_Pinned]:
        return [self._files[name] for name in sorted(self._files)]

    def _pin(self, name: str, pinned: _Pinned) -> None:
        self._unpin(name)
        self._files[name] = pinned

    def _unpin(self, name: str) -> None:
        pinned = self._files.pop(name, None)
        if pinned is not None:
            os.close(pinned.fd)

    def _unpin_all(self) -> None:
        for name in list(self._files):
            self._unpin(name)


def _read(fd: int) -> bytes:
    chunks: list[bytes] = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _describe_intent(intent: DeviceIntent) -> str:
    if intent.placement is None:
        return "(the whole GPU)"
    return f"placement {intent.placement} ({intent.profile_name}, device {intent.device_name})"
