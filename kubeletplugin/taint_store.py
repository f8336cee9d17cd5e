"""The node's GPU faults, kept on disk so that device taints survive plugin restarts.

NVML does not replay events from before an event set existed: a plugin that restarts (an upgrade, a
crash, a node drain undone) would otherwise publish a GPU that raised XID 79 a minute ago as healthy
again.  So every fault the plugin acts on is written here first, and the store is loaded before the
first publish.  One JSON file in the state directory (``device-taints.json``), a versioned pydantic
model, replaced atomically (:func:`dra_driver.durable.write_file_atomically`) under an inter-process
``flock`` (``device-taints.json.lock``), because two writers exist: the running plugin (new faults,
faults expired by the healthy period) and an admin's ``migdra health clear`` (``kubectl exec`` into
the plugin pod).  Each write bumps ``generation``; readers notice a change by the file's identity
(inode, size, mtime), one ``stat`` per round.

A corrupt store (not JSON, another schema version, a shape the model refuses) is one clear
:class:`TaintStoreError` naming the file, never silently dropped: dropping it would make every faulty
device schedulable again without anyone deciding so.  The plugin refuses to start on it (the error
says how to recover: look at the file, then ``migdra health clear --all`` writes a fresh, empty store);
a store that turns corrupt while the plugin runs keeps the faults last read and logs the error every
round until someone repairs it.

It never decides which devices a fault taints (that is :mod:`dra_driver.devicemodel.faults`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from filelock import FileLock, Timeout
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dra_driver.devicemodel.faults import GpuFault
from dra_driver.durable import write_file_atomically
from dra_driver.errors import MigdraError
from dra_driver.mig.catalog import Placement

TAINT_STORE_FILE = "device-taints.json"
STORE_SCHEMA_VERSION: Literal[1] = 1
LOCK_TIMEOUT_S = 10.0


class TaintStoreError(MigdraError):
    """The taint store cannot be read or written: one line naming the file and what to do (permanent)."""


class StoredFault(BaseModel):
    """One fault as it is kept: what (``name``/``value``), where (GPU, and the GPU instance's memory
    slices if NVML attributed it to one), when first and last seen (seconds since the epoch)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu_uuid: str = Field(min_length=1)
    gpu_index: int = Field(ge=0, description="NVML index when it was seen (for `migdra health clear --gpu 1`)")
    name: str = Field(description="taint name under the driver's domain: xid, gpu-lost, double-bit-ecc")
    value: str = Field(default="", description="the XID, or empty")
    placement_start: int | None = Field(default=None, ge=0)
    placement_size: int | None = Field(default=None, ge=1)
    gpu_instance_id: int | None = Field(default=None, ge=0)
    compute_instance_id: int | None = Field(default=None, ge=0)
    first_seen: float = Field(ge=0)
    last_seen: float = Field(ge=0)

    @property
    def target(self) -> tuple[str, str, str, int | None, int | None]:
        """What makes two records the same fault: a repeat only moves ``last_seen``."""
        return (self.gpu_uuid, self.name, self.value, self.placement_start, self.placement_size)

    def to_fault(self) -> GpuFault:
        placement = (
            Placement(start=self.placement_start, size=self.placement_size)
            if self.placement_start is not None and self.placement_size is not None
            else None
        )
        added = datetime.fromtimestamp(int(self.first_seen), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return GpuFault(self.gpu_uuid, self.name, self.value, added, placement)


class TaintStoreFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = STORE_SCHEMA_VERSION
    generation: int = Field(default=0, ge=0, description="bumped by every write")
    faults: list[StoredFault] = Field(default_factory=list)


_FileKey = tuple[int, int, int, int]


class TaintStore:
    """Reads and transactionally rewrites ``<state dir>/device-taints.json``; safe across processes."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / TAINT_STORE_FILE
        self._lock = FileLock(self.path.with_name(f"{TAINT_STORE_FILE}.lock"), timeout=LOCK_TIMEOUT_S, mode=0o600)

    def key(self) -> _FileKey | None:
        """The file's identity now (None: no file): a change means someone wrote it."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def load(self) -> TaintStoreFile:
        """The stored faults; no file is an empty store.  Raises :class:`TaintStoreError` when corrupt."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return TaintStoreFile()
        except OSError as exc:
            raise TaintStoreError(f"taint store {self.path}: cannot read: {exc.strerror or exc}") from exc
        try:
            return TaintStoreFile.model_validate(json.loads(data.decode("utf-8")))
        except (ValueError, UnicodeDecodeError, ValidationError) as exc:
            reason = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            raise TaintStoreError(
                f"taint store {self.path} is corrupt ({reason}); it keeps the GPU faults that taint devices, so "
                "it is not dropped: look at it, then `migdra health clear --state-dir "
                f"{self.path.parent} --all` writes an empty store"
            ) from exc

    @contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self._lock.acquire()
        except Timeout as exc:
            raise TaintStoreError(
                f"taint store {self.path}: another process has held its lock for more than {LOCK_TIMEOUT_S:g} s"
            ) from exc
        try:
            yield
        finally:
            self._lock.release()

    def update(
        self, change: Callable[[list[StoredFault]], list[StoredFault]], *, replace_corrupt: bool = False
    ) -> TaintStoreFile:
        """Apply ``change`` to the stored faults under the lock and write them if they differ.

        ``replace_corrupt``: a corrupt store counts as empty (the admin's ``clear --all``), instead of raising.
        """
        with self._locked():
            try:
                current = self.load()
            except TaintStoreError:
                if not replace_corrupt:
                    raise
                current = TaintStoreFile(generation=0, faults=[_CORRUPT_MARKER])
            faults = change(list(current.faults))
            if faults == current.faults:
                return current
            new = TaintStoreFile(generation=current.generation + 1, faults=faults)
            try:
                write_file_atomically(self.path, (new.model_dump_json(indent=1) + "\n").encode(), mode=0o600)
            except OSError as exc:
                raise TaintStoreError(f"taint store {self.path}: cannot write: {exc.strerror or exc}") from exc
            return new

    def record(self, fault: StoredFault) -> bool:
        """Keep ``fault`` (a repeat of a kept one moves its ``last_seen``); True if it is a new one."""
        new = True

        def add(faults: list[StoredFault]) -> list[StoredFault]:
            nonlocal new
            for position, kept in enumerate(faults):
                if kept.target == fault.target:
                    new = False
                    faults[position] = kept.model_copy(update={"last_seen": max(kept.last_seen, fault.last_seen)})
                    return faults
            return [*faults, fault]

        self.update(add)
        return new

    def clear(self, gpu: str | None = None, xid: int | None = None) -> list[StoredFault]:
        """Drop the faults of GPU ``gpu`` (UUID or NVML index; None: every GPU), only XID ``xid`` if given;
        returns those dropped.  Clearing every fault of every GPU also replaces a corrupt store."""
        dropped: list[StoredFault] = []

        def matches(fault: StoredFault) -> bool:
            if gpu is not None and gpu not in (fault.gpu_uuid, str(fault.gpu_index)):
                return False
            return xid is None or (fault.name == "xid" and fault.value == str(xid))

        def drop(faults: list[StoredFault]) -> list[StoredFault]:
            dropped.extend(f for f in faults if matches(f) and f is not _CORRUPT_MARKER)
            return [f for f in faults if not matches(f)]

        self.update(drop, replace_corrupt=gpu is None and xid is None)
        return dropped

    def expire(self, now: float, healthy_for: float) -> list[StoredFault]:
        """Drop the faults whose target saw no new event for ``healthy_for`` seconds; returns them."""
        dropped: list[StoredFault] = []

        def drop(faults: list[StoredFault]) -> list[StoredFault]:
            dropped.extend(f for f in faults if now - f.last_seen >= healthy_for)
            return [f for f in faults if now - f.last_seen < healthy_for]

        self.update(drop)
        return dropped


# Stands for "whatever a corrupt file held" while `clear --all` replaces it (never written).
_CORRUPT_MARKER = StoredFault(gpu_uuid="?", gpu_index=0, name="?", first_seen=0, last_seen=0)
