"""The simulated machine's persisted state and the store that guards it.

This module owns two things:

- the versioned pydantic models of what a real GPU would remember (MIG mode, GPU and compute
  instances, which devices a process holds) — written as JSON so a human can read it;
- :class:`StateStore`, the only code that reads or writes the state file.  Every mutation is one
  transaction under an inter-process lock (``filelock``, lock file beside the state file) and ends in
  an atomic replace (tmp file + fsync + ``os.replace``), so a process killed with SIGKILL leaves either
  the old or the new state, never a torn one.  Reads take no lock and re-parse only when the file's
  identity (device, inode, size, mtime_ns) changed, so read-heavy NVML workloads stay cheap.

A transaction (:class:`StateChange`) edits copies, never the cached state other readers hold, so a
failed mutation leaves nothing changed.  It copies only what it changes: the state's own fields and
each GPU it asks for (:meth:`StateChange.gpu`); the other GPUs stay shared with the cached state.  An
NVML call changes one GPU, so its cost no longer grows with the machine (a deep copy of 64 GPUs was
~20 ms per call).  Before writing, the changed GPUs are held to the same invariants a load checks
(``invariants.py``), so a rule's bug is refused here instead of writing a file every reader refuses.

Loading refuses, with one line naming the file, anything that is not a state this simulator wrote or
could have written: not a regular file, not UTF-8 JSON, another program's JSON, another schema
version, a shape the models reject, or a machine no hardware can be (``invariants.py``).  A refused
file is never rewritten or deleted.  Only creating the file and mutating it take the lock, so an
existing state file in a read-only directory can still be read (``migdra gpus``); waiting for the lock
is bounded (:attr:`StateStore.lock_timeout`).

It must never know MIG rules (that is ``hardware.py``) or ctypes (that is ``library.py``).
"""

from __future__ import annotations

import json
import os
import re
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from filelock import FileLock, Timeout
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dra_driver.durable import write_file_atomically
from dra_driver.mig.catalog import Placement
from dra_driver.nvml.sim.errors import (
    SimulatorError,
    StateFileError,
    StateFileMissingError,
    StateLockTimeout,
    describe_validation_error,
)
from dra_driver.nvml.sim.invariants import gpu_problems, state_problems

STATE_SCHEMA_VERSION: Literal[1] = 1

# Lock waiters poll; filelock's default 50 ms would dominate every contended NVML call.
_LOCK_POLL_INTERVAL_S = 0.001

DEFAULT_LOCK_TIMEOUT_S = 30.0
"""How long a transaction waits for another process's: simulated NVML calls hold the lock for
milliseconds (injected latency is slept outside it), so half a minute means a stuck or stopped
process, not a busy one."""

# NVIDIA driver versions: branch.minor[.patch], e.g. 580.65.06 or 470.57.
_DRIVER_VERSION = re.compile(r"^[0-9]+\.[0-9]+(\.[0-9]+)?$")

# A machine of 64 GPUs full of instances is well under 1 MiB; anything far larger is not a state file
# (and reading it whole would only waste memory).
MAX_STATE_FILE_BYTES = 16 * 1024 * 1024


class _StateModel(BaseModel):
    # Mutable on purpose: transactions edit copies (StateChange) and the store compares them with the originals.
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class SimComputeInstance(_StateModel):
    """One compute instance, hence one MIG device."""

    compute_instance_id: int = Field(ge=0)
    ci_profile_id: int = Field(ge=0, description="NVML_COMPUTE_INSTANCE_PROFILE_* (index == ID)")
    placement: Placement = Field(description="compute slices inside the GPU instance")
    uuid: str = Field(description="MIG-… UUID, fixed for the life of this instance")
    busy: bool = Field(default=False, description="a process holds this MIG device")


class SimGpuInstance(_StateModel):
    gpu_instance_id: int = Field(ge=0)
    profile_id: int = Field(ge=0, description="GPU-instance profile ID (not the NVML index)")
    placement: Placement = Field(description="memory slices of the GPU")
    compute_instances: list[SimComputeInstance] = Field(default_factory=list)


class SimGpu(_StateModel):
    index: int = Field(ge=0, description="NVML index; also the minor number")
    model: str = Field(description="catalog key, e.g. H100-SXM5-80GB")
    uuid: str
    pci_domain: int = Field(ge=0)
    pci_bus: int = Field(ge=0, le=0xFF)
    numa_node: int
    mig_mode_current: bool
    mig_mode_pending: bool
    busy: bool = Field(default=False, description="a process holds the whole GPU")
    gpu_instances: list[SimGpuInstance] = Field(default_factory=list)


MAX_KEPT_EVENTS = 256
"""Events the state file keeps (the oldest are dropped): an event set that has not waited for that many
events since they came has missed them, as one whose NVML queue overflowed."""


class SimEvent(_StateModel):
    """One NVML event that happened (``migdra sim xid``): every event set registered for its GPU and type
    and created before it returns it once.  ``serial`` orders them; it only grows."""

    serial: int = Field(ge=1)
    gpu_index: int = Field(ge=0)
    event_type: int = Field(gt=0, description="one nvmlEventType* bit")
    event_data: int = Field(default=0, ge=0, description="the XID of an XID critical error")
    gpu_instance_id: int = Field(default=0xFFFFFFFF, ge=0, le=0xFFFFFFFF, description="0xFFFFFFFF: not attributed")
    compute_instance_id: int = Field(default=0xFFFFFFFF, ge=0, le=0xFFFFFFFF, description="0xFFFFFFFF: not attributed")


class SimState(_StateModel):
    """Everything the simulated machine remembers, one file per machine."""

    schema_version: Literal[1] = STATE_SCHEMA_VERSION
    driver_version: str = Field(description="nvmlSystemGetDriverVersion, e.g. 580.65.06")
    cuda_driver_version: int = Field(ge=0, description="nvmlSystemGetCudaDriverVersion, e.g. 13000")
    uuid_namespace: str = Field(description="UUID namespace the GPU and MIG UUIDs are derived from")
    instance_serial: int = Field(
        default=0, ge=0, description="bumped per created compute instance, so a re-created one gets a new UUID"
    )
    event_serial: int = Field(default=0, ge=0, description="serial of the last event that happened")
    events: list[SimEvent] = Field(default_factory=list, description="the latest events, oldest first")
    gpus: list[SimGpu] = Field(min_length=1)

    @field_validator("driver_version")
    @classmethod
    def _a_driver_version(cls, value: str) -> str:
        if not _DRIVER_VERSION.match(value):
            raise ValueError(f"{value!r} is not a driver version such as 580.65.06")
        return value

    @field_validator("uuid_namespace")
    @classmethod
    def _a_uuid(cls, value: str) -> str:
        try:
            uuid.UUID(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a UUID") from None
        return value

    @property
    def nvml_version(self) -> str:
        """nvmlSystemGetNVMLVersion: CUDA major version, then the driver version (e.g. 13.580.65.06)."""
        return f"{self.cuda_driver_version // 1000}.{self.driver_version}"


# (st_dev, st_ino, st_size, st_mtime_ns): changes on every write because each write is a new file
# whose mtime the writer forces past the previous one (see StateStore._write).
_FileKey = tuple[int, int, int, int]


def _key(st: os.stat_result) -> _FileKey:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def parse_state(data: bytes, source: Path) -> SimState:
    """Validate a state file's bytes, refusing anything this simulator did not (or could not) write.

    Another program's file and another schema version are refused, never guessed at; a state no
    real machine can be in is refused with its first problem (``invariants.py``).
    """
    where = f"simulator state file {source}"
    if not data.strip():
        raise StateFileError(f"{where} is empty; it is not a migdra simulator state file")
    try:
        raw = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise StateFileError(f"{where} is not JSON (not UTF-8 text); it is not a migdra simulator state file") from e
    except json.JSONDecodeError as e:
        raise StateFileError(
            f"{where} is not JSON (line {e.lineno}, column {e.colno}: {e.msg}); it is not a migdra simulator state file"
        ) from e
    if not isinstance(raw, dict):
        kind = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}.get(type(raw), "null")
        raise StateFileError(
            f"{where} is not a migdra simulator state file (a JSON {kind}, not an object with schema_version)"
        )
    if "schema_version" not in raw:
        raise StateFileError(f"{where} is not a migdra simulator state file (no schema_version)")
    version = raw["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise StateFileError(f"{where}: schema_version {version!r} is not a number")
    if version > STATE_SCHEMA_VERSION:
        raise StateFileError(
            f"{where} has schema version {version}, written by a newer migdra; this one reads version "
            f"{STATE_SCHEMA_VERSION}: use that newer migdra, or another state file"
        )
    if version != STATE_SCHEMA_VERSION:
        raise StateFileError(
            f"{where} has schema version {version}, from an older migdra; this one reads version "
            f"{STATE_SCHEMA_VERSION}: delete the file to start afresh"
        )
    try:
        state = SimState.model_validate(raw)
    except ValidationError as e:
        raise StateFileError(f"{where}: {describe_validation_error(e)}") from e
    problems = state_problems(state)
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise StateFileError(f"{where}: {problems[0]}{more}")
    return state


class StateChange:
    """What one transaction edits: :attr:`state` and, through :meth:`gpu`, copies of the GPUs it changes.

    :attr:`state` is a shallow copy of the current state: its own fields (``instance_serial``) are
    private to this transaction, but every GPU in ``state.gpus`` is the current state's, shared with
    every reader, until :meth:`gpu` replaces it with a private deep copy.  So a GPU is changed only
    through ``change.gpu(index)``; anything reached through ``state.gpus`` otherwise is read-only.
    """

    def __init__(self, current: SimState) -> None:
        self._current = current
        self.state = current.model_copy(update={"gpus": list(current.gpus)})
        self._copied: set[int] = set()

    def gpu(self, index: int) -> SimGpu:
        """GPU ``index`` of :attr:`state`, made private to this transaction (copied once, on first ask)."""
        if index not in self._copied:
            self.state.gpus[index] = self._current.gpus[index].model_copy(deep=True)
            self._copied.add(index)
        return self.state.gpus[index]

    @property
    def changed_gpus(self) -> list[SimGpu]:
        """The GPUs this transaction copied and changed."""
        return [self.state.gpus[i] for i in sorted(self._copied) if self.state.gpus[i] != self._current.gpus[i]]

    @property
    def changed(self) -> bool:
        """Whether anything differs from the state the transaction started from."""
        own_fields = (name for name in type(self.state).model_fields if name != "gpus")
        return any(getattr(self.state, name) != getattr(self._current, name) for name in own_fields) or bool(
            self.changed_gpus
        )


class StateStore:
    """Reads, caches and transactionally rewrites one state file; safe across threads and processes."""

    def __init__(self, path: Path, lock_timeout: float = DEFAULT_LOCK_TIMEOUT_S) -> None:
        self.path = path
        self.lock_path = path.with_name(f"{path.name}.lock")
        self.lock_timeout = lock_timeout
        self._file_lock = FileLock(self.lock_path, timeout=lock_timeout, poll_interval=_LOCK_POLL_INTERVAL_S)
        self._lock_file_ready = False
        self._cache_lock = threading.Lock()
        self._cached: tuple[_FileKey, SimState] | None = None
        # Each GPU's JSON as last written, by the GPU object (kept, so its id is not reused): a
        # transaction shares every GPU it did not change with the state before it, so a write
        # serialises only the GPUs it changed (see _serialise).
        self._gpu_json: dict[int, tuple[SimGpu, str]] = {}

    def initialise(self, build: Callable[[], SimState] | None) -> tuple[SimState, bool]:
        """Load the state file, or create it from ``build()`` if it does not exist yet.

        Returns the state and whether it was created.  Loading an existing file takes no lock (writers
        replace it atomically), so it works in a directory this process cannot write.  Creating is done
        under the lock, so two processes starting at once agree on one file.  Without ``build`` a
        missing file is :class:`StateFileMissingError`, raised before anything is created.
        """
        self._check_location()
        if os.path.lexists(self.path):
            return self._load(), False
        if build is None:
            raise StateFileMissingError(self.path)
        state = build()
        self._create_directory()
        with self._locked():
            if os.path.lexists(self.path):
                return self._load(), False
            self._write(state, previous_mtime_ns=0)
            return state, True

    def read(self) -> SimState:
        """The current state.  Shared with other readers: never mutate it (use :meth:`transaction`)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError as e:
            raise StateFileError(f"simulator state file {self.path} is gone") from e
        except OSError as e:
            raise StateFileError(f"cannot read simulator state file {self.path}: {e.strerror or e}") from e
        with self._cache_lock:
            if self._cached is not None and self._cached[0] == _key(st):
                return self._cached[1]
        return self._load()

    @contextmanager
    def transaction(self) -> Iterator[StateChange]:
        """Yield a :class:`StateChange` of the current state; persist it on normal exit if it changed.

        An exception inside the block discards every change: NVML calls either happen or do not.  The
        work is the GPUs the block asks for (one per NVML call), not the machine; only serialising
        the file is the whole machine (its format is one JSON document).
        """
        with self._locked():
            change = StateChange(self._load())
            yield change
            if not change.changed:
                return
            problems = [problem for gpu in change.changed_gpus for problem in gpu_problems(gpu)]
            if problems:
                raise SimulatorError(
                    f"simulator bug: a change would leave simulator state file {self.path} in a state no "
                    f"hardware can be in ({problems[0]}); nothing was written"
                )
            self._write(change.state, previous_mtime_ns=self._cached_key_mtime())

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The inter-process lock, waited for at most :attr:`lock_timeout` seconds."""
        self._prepare_lock_file()
        try:
            self._file_lock.acquire()
        except Timeout as e:
            raise StateLockTimeout(
                f"another process has held {self.lock_path}, the lock of simulator state file {self.path}, "
                f"for more than {self.lock_timeout:g} s; a simulated NVML call takes milliseconds, so that "
                "process is stuck or stopped: end it and try again"
            ) from e
        try:
            yield
        finally:
            self._file_lock.release()

    def _prepare_lock_file(self) -> None:
        """Create the lock file ourselves first: filelock retries failures to create it until its
        timeout (forever by default) instead of reporting them, e.g. beside a path in /proc."""
        if self._lock_file_ready:
            return
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK, 0o644)
        except OSError as e:
            raise StateFileError(
                f"cannot create {self.lock_path}, the lock file of simulator state file {self.path}: "
                f"{e.strerror or e}; creating or changing simulated hardware needs a directory this "
                "process can write"
            ) from e
        os.close(fd)
        self._lock_file_ready = True

    def _check_location(self) -> None:
        """Refuse a path that cannot be a state file before anything is read, created or locked."""
        try:
            self._check_path()
        except OSError as e:  # e.g. a name too long for the file system
            raise StateFileError(f"simulator state file {self.path}: {e.strerror or e}") from e

    def _check_path(self) -> None:
        where = f"simulator state file {self.path}"
        if self.path.is_dir():
            raise StateFileError(f"{where} is a directory; name a file in it, e.g. {self.path / 'state.json'}")
        if os.path.islink(self.path) and not self.path.exists():
            raise StateFileError(f"{where} is a symbolic link (to {os.readlink(self.path)}) that leads to no file")
        if self.path.exists() and not self.path.is_file():
            raise StateFileError(f"{where} is not a regular file")
        ancestor = self.path.parent
        while not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            raise StateFileError(f"{where}: {ancestor} is not a directory")

    def _create_directory(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StateFileError(
                f"cannot create directory {self.path.parent} for simulator state file {self.path}: {e.strerror or e}"
            ) from e

    def _cached_key_mtime(self) -> int:
        with self._cache_lock:
            return self._cached[0][3] if self._cached is not None else 0

    def _load(self) -> SimState:
        try:
            # O_NONBLOCK: a FIFO named as the state file must not block the open until a writer appears.
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError as e:
            raise StateFileError(f"simulator state file {self.path} is gone") from e
        except OSError as e:
            raise StateFileError(f"cannot read simulator state file {self.path}: {e.strerror or e}") from e
        try:
            # The key comes from the open descriptor, so it describes exactly the bytes we parse even
            # if a writer replaces the file meanwhile.
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise StateFileError(f"simulator state file {self.path} is not a regular file")
            if st.st_size > MAX_STATE_FILE_BYTES:
                raise StateFileError(
                    f"simulator state file {self.path} is {st.st_size} bytes, far larger than any state file "
                    f"(at most {MAX_STATE_FILE_BYTES}); it is not a migdra simulator state file"
                )
            key = _key(st)
            with self._cache_lock:
                if self._cached is not None and self._cached[0] == key:
                    return self._cached[1]
            chunks = []
            try:
                while chunk := os.read(fd, 1 << 20):
                    chunks.append(chunk)
            except OSError as e:
                raise StateFileError(f"cannot read simulator state file {self.path}: {e.strerror or e}") from e
        finally:
            os.close(fd)
        state = parse_state(b"".join(chunks), self.path)
        with self._cache_lock:
            self._cached = (key, state)
        return state

    def _serialise(self, state: SimState) -> bytes:
        """``state.model_dump_json(indent=1)``, byte for byte, from each GPU's JSON as last written.

        The file is one JSON document, so every write is the whole machine; but a GPU object that is
        the same object as at the last write is unchanged (transactions copy what they change), so its
        text is reused and only the changed GPU is serialised.  ``gpus`` is the last field, and JSON
        strings hold no raw newlines, so indenting a GPU's own text by two spaces per line gives what
        serialising it inside the state would.
        """
        known = self._gpu_json
        fresh: dict[int, tuple[SimGpu, str]] = {}
        texts = []
        for gpu in state.gpus:
            entry = known.get(id(gpu))
            if entry is None or entry[0] is not gpu:
                entry = (gpu, "  " + gpu.model_dump_json(indent=1).replace("\n", "\n  "))
            fresh[id(gpu)] = entry
            texts.append(entry[1])
        self._gpu_json = fresh
        head = state.model_dump_json(indent=1, exclude={"gpus"}).removesuffix("\n}")
        return (head + ',\n "gpus": [\n' + ",\n".join(texts) + "\n ]\n}").encode()

    def _write(self, state: SimState, previous_mtime_ns: int) -> None:
        data = self._serialise(state)
        # A freed inode can be reused by the next write and coarse clocks repeat mtimes; forcing the
        # mtime strictly past the previous one keeps every written version's key distinct for readers.
        mtime_ns = max(time.time_ns(), previous_mtime_ns + 1)
        try:
            write_file_atomically(self.path, data, before_replace=lambda tmp: os.utime(tmp, ns=(mtime_ns, mtime_ns)))
        except OSError as e:
            raise SimulatorError(f"cannot write simulator state file {self.path}: {e.strerror or e}") from e
        key = _key(os.stat(self.path))
        with self._cache_lock:
            self._cached = (key, state)
