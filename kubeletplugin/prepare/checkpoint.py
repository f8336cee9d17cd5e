"""The node's record of what migdra prepared: its store, shared by every plugin process of the node.

This module owns the checkpoint's store (:class:`CheckpointStore`); the versioned, checksummed
record schema and file format are :mod:`kubeletplugin.prepare.records`'s.  The service writes
``PrepareStarted`` (the intended devices: GPU, profile, placement) **before** it touches NVML; then,
per MIG device and under the GPU's lock, the GPU instances standing on the GPU just before it asks
NVML for the GI (``gpuInstancesBefore``: "creation requested"), and the GI ID as soon as NVML
returns it (before the compute instance is created); and ``PrepareCompleted`` (plus the compute
instance, MIG UUID and CDI IDs) after the CDI spec is on disk.  So after a crash the record tells
recovery exactly which instances may be migdra's, and :meth:`CheckpointStore.owned_instances` /
:meth:`~CheckpointStore.owned_placements` tell the slice publisher about an instance from the moment
it exists.  It never talks to NVML or the API server and never decides what to destroy.

The file is written atomically.  A checkpoint of another boot (``/proc/sys/kernel/random/boot_id``
changed) is discarded: MIG instances do not survive a reboot.

One file, several processes: during a rolling update the old and the new plugin pod share the state
directory and both prepare.  :class:`CheckpointStore` therefore keeps no state of its own that the
file does not have: each change is a read-modify-write under an exclusive ``flock`` of
``<state dir>/prepare.lock`` (held for that change only), and each read re-reads the file when it
changed.  Leftover temporary files of interrupted writes are removed at :meth:`CheckpointStore.load`,
under that lock.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dra_driver.durable import write_file_atomically
from dra_driver.mig.catalog import Placement
from kubeletplugin.prepare.errors import CheckpointError, DeviceConflictError, LockTimeoutError
from kubeletplugin.prepare.leftovers import remove_leftover_temporary_files
from kubeletplugin.prepare.locks import describe_lock_timeout, release_flock, try_flock
from kubeletplugin.prepare.records import (
    Checkpoint,
    ClaimRecord,
    ClaimState,
    DeviceIntent,
    DeviceRecord,
    build_checkpoint_file,
    compute_conflicting_device,
    parse_checkpoint_file,
)

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "checkpoint.json"
STATE_LOCK_FILE = "prepare.lock"
BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


def read_node_boot_id(path: Path = BOOT_ID_PATH) -> str:
    """The kernel's boot ID: it changes on every reboot, and MIG instances do not survive one."""
    try:
        return path.read_text(encoding="ascii").strip()
    except OSError as e:
        raise CheckpointError(f"cannot read the node boot ID from {path}: {e}") from e


@dataclass(frozen=True, slots=True)
class LoadOutcome:
    """What :meth:`CheckpointStore.load` found; ``discarded``: records of another boot, dropped."""

    records: tuple[ClaimRecord, ...]
    discarded: tuple[ClaimRecord, ...]
    previous_boot_id: str | None


FileKey = tuple[int, int, int, int]


def _file_key(st: os.stat_result) -> FileKey:
    """Which file, and which version of it: device, inode, modification time (ns), size."""
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


class CheckpointStore:
    """The checkpoint of one node, shared by every plugin process of the node; thread-safe.

    The file is the truth, not this process's memory: during a rolling update the other plugin pod
    changes it too.  So

    - every change is a read-modify-write under an exclusive ``flock`` of ``<state dir>/prepare.lock``
      (taken per change and held only for it): the view is re-read if the file changed, changed, and
      the file rewritten atomically before the lock is released;
    - every read re-reads the file first if it changed since this process last read or wrote it
      (no lock needed: the file is only ever replaced by a rename, so a reader sees a whole file).

    "Changed" is decided by the file's (device, inode, mtime, size).  Every write is a new inode, and
    the descriptor of the file last read stays open, so that inode cannot be reused by a later write
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
    ) -> None:
        self._observe_write = observe_write  # seconds of each durable write (fsyncs included): a metric
        self.path = state_dir / CHECKPOINT_FILE
        self.lock_path = state_dir / STATE_LOCK_FILE
        self.boot_id = boot_id
        self._lock_timeout = lock_timeout
        self._clock = clock
        self._writer = threading.Lock()  # one change of this process at a time (held while waiting for the flock)
        self._view_lock = threading.Lock()  # the view below; held briefly, never while waiting for the flock
        self._checkpoint = Checkpoint(node_boot_id=boot_id)
        self._key: FileKey | None = None
        self._pinned: int | None = None

    def load(self) -> LoadOutcome:
        """Read the file at start-up (absent = empty) and remove leftover temporary files of it.

        Raises :class:`CheckpointError` if it cannot be trusted (or its lock stayed held); a
        checkpoint of another boot is discarded (MIG instances do not survive a reboot).
        """
        try:
            with self._exclusive():
                # Every writer of the checkpoint holds this lock: no temporary file of it is being written now.
                remove_leftover_temporary_files(self.path.parent, lambda target: target == self.path.name)
                with self._view_lock:
                    try:
                        fd, st = self._open()
                    except FileNotFoundError:
                        self._write_locked(Checkpoint(node_boot_id=self.boot_id))
                        return LoadOutcome((), (), None)
                    try:
                        loaded = parse_checkpoint_file(self._read(fd), self.path)
                    except BaseException:
                        os.close(fd)
                        raise
                    if loaded.node_boot_id != self.boot_id:
                        os.close(fd)
                        log.warning(
                            "checkpoint %s is from boot %s, this is boot %s: discarding its %d claim(s) "
                            "(MIG instances do not survive a reboot)",
                            self.path,
                            loaded.node_boot_id,
                            self.boot_id,
                            len(loaded.claims),
                        )
                        self._write_locked(Checkpoint(node_boot_id=self.boot_id))
                        return LoadOutcome((), tuple(loaded.claims.values()), loaded.node_boot_id)
                    self._pin(fd, st, loaded)
                    return LoadOutcome(tuple(loaded.claims.values()), (), loaded.node_boot_id)
        except LockTimeoutError as e:
            raise CheckpointError(f"cannot load the checkpoint: {e.message}") from e
        except OSError as e:
            raise CheckpointError(f"cannot read checkpoint {self.path}: {e}") from e

    def close(self) -> None:
        """Let go of the file last read (the store can still be used; it re-reads)."""
        with self._view_lock:
            self._unpin()

    # -- reads: the file as it is now --------------------------------------------------------------

    def current(self) -> Checkpoint:
        """The checkpoint as on disk now (re-read if another process or thread changed it)."""
        with self._view_lock:
            self._refresh_locked()
            return self._checkpoint

    def get(self, claim_uid: str) -> ClaimRecord | None:
        return self.current().claims.get(claim_uid)

    def records(self) -> tuple[ClaimRecord, ...]:
        return tuple(self.current().claims.values())

    def owned_instances(self) -> set[tuple[str, int]]:
        """(GPU UUID, GI ID) of every GPU instance a record says migdra created (admin access excluded).

        A GI counts from the intermediate write right after NVML created it, so an instance that is
        still waiting for its compute instance is migdra's, not a foreign one, in every publish round --
        whichever plugin process created it.
        """
        return {
            (device.intent.gpu_uuid, device.gpu_instance_id)
            for record in self.current().claims.values()
            for device in record.devices
            if device.owns_instance and device.gpu_instance_id is not None
        }

    def owned_placements(self) -> set[tuple[str, int, Placement]]:
        """(GPU UUID, GI profile ID, placement) of every GI NVML is being asked for, whose ID is unknown yet.

        Covers the moment between NVML creating a GI and its ID reaching the checkpoint: a GI of exactly
        that profile at exactly that placement on that GPU is migdra's.  The entry is recorded under the
        GPU's lock after the placement was found free, before the NVML call, and replaced by the GI ID
        (:meth:`owned_instances`) in one step; so, read after the node's instances were read, the two
        together name every GI migdra created.
        """
        return {
            (device.intent.gpu_uuid, device.intent.profile_id, device.intent.placement)
            for record in self.current().claims.values()
            for device in record.devices
            if device.creation_in_flight
            and device.intent.profile_id is not None
            and device.intent.placement is not None
        }

    def find_owner(self, gpu_uuid: str, profile_id: int, placement: Placement) -> DeviceRecord | None:
        """The completed, non-admin device record that created the instance at exactly this placement."""
        for record in self.current().claims.values():
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

    # -- changes: read-modify-write under the checkpoint's lock ------------------------------------

    def put(self, record: ClaimRecord) -> None:
        self._change(lambda claims: {**claims, record.claim_uid: record})

    def begin(self, record: ClaimRecord) -> None:
        """Record ``PrepareStarted`` unless another claim already holds one of its devices.

        The check and the write are one step under the checkpoint's lock, so two claims allocated the
        same or an overlapping placement (a double allocation) never both proceed, whichever plugin
        process prepares them.
        """

        def change(claims: dict[str, ClaimRecord]) -> dict[str, ClaimRecord]:
            for other in claims.values():
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
            return {**claims, record.claim_uid: record}

        self._change(change)

    def drop(self, claim_uid: str) -> None:
        def change(claims: dict[str, ClaimRecord]) -> dict[str, ClaimRecord] | None:
            if claim_uid not in claims:
                return None
            return {uid: record for uid, record in claims.items() if uid != claim_uid}

        self._change(change)

    def update_device(self, claim_uid: str, index: int, device: DeviceRecord) -> ClaimRecord:
        """Replace device ``index`` of the claim's record (a step of its prepare); the new record.

        Raises :class:`KeyError` when the claim has no record: callers hold the claim's lock (in every
        plugin process), so its record cannot vanish under them.
        """
        updated: list[ClaimRecord] = []

        def change(claims: dict[str, ClaimRecord]) -> dict[str, ClaimRecord]:
            record = claims[claim_uid]
            devices = (*record.devices[:index], device, *record.devices[index + 1 :])
            updated.append(record.model_copy(update={"devices": devices}))
            return {**claims, claim_uid: updated[0]}

        self._change(change)
        return updated[0]

    def _change(self, change: Callable[[dict[str, ClaimRecord]], dict[str, ClaimRecord] | None]) -> None:
        """Apply ``change`` to the claims as on disk now and write the result (None: nothing to write)."""
        with self._exclusive(), self._view_lock:
            self._refresh_locked()
            claims = change(dict(self._checkpoint.claims))
            if claims is not None:
                self._write_locked(self._checkpoint.model_copy(update={"claims": claims}))

    # -- the file ----------------------------------------------------------------------------------

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

    def _refresh_locked(self) -> None:
        """Re-read the file if it is not the version of the view (caller holds ``_view_lock``)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if self._key is not None:
                log.warning("checkpoint %s was removed while the plugin ran; its records are gone", self.path)
                self._unpin()
                self._checkpoint = Checkpoint(node_boot_id=self.boot_id)
            return
        except OSError as e:
            raise CheckpointError(f"cannot read checkpoint {self.path}: {e}") from e
        if _file_key(st) == self._key:
            return
        try:
            fd, st = self._open()
        except FileNotFoundError:
            return  # replaced and removed in between: the next read sees what is there
        except OSError as e:
            raise CheckpointError(f"cannot read checkpoint {self.path}: {e}") from e
        try:
            loaded = parse_checkpoint_file(self._read(fd), self.path)
            if loaded.node_boot_id != self.boot_id:
                raise CheckpointError(
                    f"checkpoint {self.path} now belongs to boot {loaded.node_boot_id}, this is boot {self.boot_id}; "
                    "something other than migdra rewrote it"
                )
        except BaseException:
            os.close(fd)
            raise
        self._pin(fd, st, loaded)

    def _open(self) -> tuple[int, os.stat_result]:
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        return fd, os.fstat(fd)

    @staticmethod
    def _read(fd: int) -> bytes:
        chunks: list[bytes] = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)

    def _write_locked(self, checkpoint: Checkpoint) -> None:
        """Replace the file (caller holds the flock and ``_view_lock``) and make it the view."""
        started = time.perf_counter()
        write_file_atomically(self.path, build_checkpoint_file(checkpoint), mode=0o600)
        if self._observe_write is not None:
            self._observe_write(time.perf_counter() - started)
        fd, st = self._open()  # under the flock nobody else replaced it since the rename
        self._pin(fd, st, checkpoint)

    def _pin(self, fd: int, st: os.stat_result, checkpoint: Checkpoint) -> None:
        self._unpin()
        self._pinned, self._key, self._checkpoint = fd, _file_key(st), checkpoint

    def _unpin(self) -> None:
        if self._pinned is not None:
            os.close(self._pinned)
        self._pinned, self._key = None, None


def _describe_intent(intent: DeviceIntent) -> str:
    if intent.placement is None:
        return "(the whole GPU)"
    return f"placement {intent.placement} ({intent.profile_name}, device {intent.device_name})"
