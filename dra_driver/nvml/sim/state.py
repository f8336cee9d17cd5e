"""The simulated machine's persisted state and the store that guards it.

This module owns two things:

- the versioned pydantic models of what a real GPU would remember (MIG mode, GPU and compute
  instances, which devices a process holds) — written as JSON so a human can read it;
- :class:`StateStore`, the only code that reads or writes the state file.  Every mutation is one
  transaction under an inter-process lock (``filelock``, lock file beside the state file) and ends in
  an atomic replace (tmp file + fsync + ``os.replace``), so a process killed with SIGKILL leaves either
  the old or the new state, never a torn one.  Reads take no lock and re-parse only when the file's
  identity (device, inode, size, mtime_ns) changed, so read-heavy NVML workloads stay cheap.

It must never know MIG rules (that is ``hardware.py``) or ctypes (that is ``library.py``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from filelock import FileLock
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dra_driver.durable import write_file_atomically
from dra_driver.mig.catalog import Placement
from dra_driver.nvml.sim.errors import StateFileError

STATE_SCHEMA_VERSION: Literal[1] = 1

# Lock waiters poll; filelock's default 50 ms would dominate every contended NVML call.
_LOCK_POLL_INTERVAL_S = 0.001


class _StateModel(BaseModel):
    # Mutable on purpose: transactions edit a deep copy and the store compares it with the original.
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


class SimState(_StateModel):
    """Everything the simulated machine remembers, one file per machine."""

    schema_version: Literal[1] = STATE_SCHEMA_VERSION
    driver_version: str = Field(description="nvmlSystemGetDriverVersion, e.g. 580.65.06")
    cuda_driver_version: int = Field(description="nvmlSystemGetCudaDriverVersion, e.g. 13000")
    uuid_namespace: str = Field(description="UUID namespace the GPU and MIG UUIDs are derived from")
    instance_serial: int = Field(
        default=0, ge=0, description="bumped per created compute instance, so a re-created one gets a new UUID"
    )
    gpus: list[SimGpu]

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
    """Validate a state file's bytes; a file from another schema version is refused, not guessed at."""
    try:
        raw = json.loads(data)
    except json.JSONDecodeError as e:
        raise StateFileError(f"{source}: not a simulator state file ({e})") from e
    version = raw.get("schema_version") if isinstance(raw, dict) else None
    if version != STATE_SCHEMA_VERSION:
        raise StateFileError(
            f"{source}: state schema version {version!r}, this simulator reads {STATE_SCHEMA_VERSION}; "
            "delete the file to start afresh"
        )
    try:
        return SimState.model_validate(raw)
    except ValidationError as e:
        raise StateFileError(f"{source}: invalid simulator state: {e}") from e


class StateStore:
    """Reads, caches and transactionally rewrites one state file; safe across threads and processes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file_lock = FileLock(f"{path}.lock", poll_interval=_LOCK_POLL_INTERVAL_S)
        self._cache_lock = threading.Lock()
        self._cached: tuple[_FileKey, SimState] | None = None

    def initialise(self, build: Callable[[], SimState]) -> tuple[SimState, bool]:
        """Load the state file, or create it from ``build()`` if it does not exist yet.

        Returns the state and whether it was created.  Done under the lock so two processes starting
        at once agree on one file.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._file_lock:
            if self.path.exists():
                return self._load(), False
            state = build()
            self._write(state, previous_mtime_ns=0)
            return state, True

    def read(self) -> SimState:
        """The current state.  Shared with other readers: never mutate it (use :meth:`transaction`)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError as e:
            raise StateFileError(f"simulator state file {self.path} is gone") from e
        with self._cache_lock:
            if self._cached is not None and self._cached[0] == _key(st):
                return self._cached[1]
        return self._load()

    @contextmanager
    def transaction(self) -> Iterator[SimState]:
        """Yield a private copy of the state; persist it on normal exit if it changed.

        An exception inside the block discards every change: NVML calls either happen or do not.
        """
        with self._file_lock:
            current = self._load()
            working = current.model_copy(deep=True)
            yield working
            if working != current:
                self._write(working, previous_mtime_ns=self._cached_key_mtime())

    def _cached_key_mtime(self) -> int:
        with self._cache_lock:
            return self._cached[0][3] if self._cached is not None else 0

    def _load(self) -> SimState:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError as e:
            raise StateFileError(f"simulator state file {self.path} is gone") from e
        try:
            # The key comes from the open descriptor, so it describes exactly the bytes we parse even
            # if a writer replaces the file meanwhile.
            key = _key(os.fstat(fd))
            with self._cache_lock:
                if self._cached is not None and self._cached[0] == key:
                    return self._cached[1]
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
        finally:
            os.close(fd)
        state = parse_state(b"".join(chunks), self.path)
        with self._cache_lock:
            self._cached = (key, state)
        return state

    def _write(self, state: SimState, previous_mtime_ns: int) -> None:
        data = state.model_dump_json(indent=1).encode()
        # A freed inode can be reused by the next write and coarse clocks repeat mtimes; forcing the
        # mtime strictly past the previous one keeps every written version's key distinct for readers.
        mtime_ns = max(time.time_ns(), previous_mtime_ns + 1)
        write_file_atomically(self.path, data, before_replace=lambda tmp: os.utime(tmp, ns=(mtime_ns, mtime_ns)))
        key = _key(os.stat(self.path))
        with self._cache_lock:
            self._cached = (key, state)
