"""Durable, atomic replacement of small files: the one implementation migdra uses.

Used for the prepare checkpoint and CDI specs, the simulated NVML's state file and the local API
server's snapshot.  A reader (the container runtime scanning the CDI directory, or migdra itself after
a crash or a power cut) sees the old content or the new, never a torn file: write a temporary file in
the same directory, fsync it, rename it over the target, fsync the directory.  Temporary names start
with ``.`` and end in ``.tmp`` so that CDI's directory scan (``*.json`` / ``*.yaml``) never loads them;
the full form, ``.<target name>.<writer PID>.<8 hex digits>.tmp``, is :func:`temporary_path`'s, and
:func:`parse_temporary_name` reads it back so that a process can clean up after writers that died.

Durability has a cost (two fsyncs per write) and is the caller's to waive: ``sync=False`` keeps the
atomicity (the rename) and drops both fsyncs, for files whose content is worthless once the kernel
that wrote them is gone -- the prepare checkpoint's per-claim records, which describe MIG instances
that do not survive a reboot either (``kubeletplugin/prepare/checkpoint.py`` says why that is safe),
and the CDI specs naming those instances (``kubeletplugin/prepare/cdi.py``).
Every write reports what it cost (:class:`WriteCost`) so that callers can count their disk work.

This module never decides *what* to write or where; callers own their paths.  They can ask first
whether a directory will take files (:func:`writable_directory_problem`), so that a process checks its
paths at start-up instead of failing at its first write.

**Leftovers.**  A writer killed between creating its temporary file and renaming it (``kill -9``, a
node crash) leaves the temporary file for ever.  None is ever read (the names start with ``.``), but
they accumulate, so their owners sweep them (:func:`find_leftover_temporary_files`,
:func:`remove_temporary_files`): the node plugin's checkpoint (``.checkpoint.json.*.tmp`` in the state
directory, ``.<claim UID>.json.*.tmp`` in its records' directory) and CDI specs
(``.<driver>-claim_<UID>.json.*.tmp`` in the CDI directory).  A temporary file is removed only when
all of these hold:

- its name is exactly of that form, for a target the caller names (never another vendor's file);
- the caller holds the lock every writer of that target holds (the checkpoint's lock, or the claim's
  lock), so no writer -- of this process or of the other plugin pod of a rolling update -- is
  between creating and renaming it;
- its writer is not a live process: its PID is unused here, or is this very process (whose writers
  of the target hold the same lock).  The second case matters in containers, where every plugin
  runs as PID 1 of its own namespace.

Which targets are the caller's, and which lock guards them, the caller decides; this module takes no
lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WriteCost:
    """The disk work of one :func:`write_file_atomically`: bytes handed to the kernel, and fsyncs."""

    bytes: int
    fsyncs: int


def write_file_atomically(
    path: Path,
    data: bytes,
    mode: int = 0o644,
    before_replace: Callable[[Path], None] | None = None,
    *,
    sync: bool = True,
) -> WriteCost:
    """Replace ``path`` with ``data`` so that a crash at any moment leaves the old or the new file.

    ``before_replace`` sees the complete temporary file just before the rename (e.g. to set its mtime).

    ``sync`` (the default) makes the replacement survive a power cut too: the file is fsynced before
    the rename, or the rename could reach the disk before the data and leave an empty file after a
    crash of the node; the directory is fsynced after it, or the new name could be lost.  Without
    ``sync`` the replacement is atomic for every process of this kernel (a ``kill -9`` leaves the old
    or the new file) but, after a crash of the node, the file may be old, new, empty or torn: only for
    content that the next boot throws away unread.
    """
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if sync:
                os.fsync(handle.fileno())
        if before_replace is not None:
            before_replace(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    if not sync:
        return WriteCost(bytes=len(data), fsyncs=0)
    fsync_directory(directory)
    return WriteCost(bytes=len(data), fsyncs=2)


_TEMPORARY_NAME = re.compile(r"^\.(?P<target>.+)\.(?P<pid>[1-9][0-9]{0,9})\.[0-9a-f]{8}\.tmp$")


def temporary_path(path: Path) -> Path:
    """A fresh temporary file name beside ``path`` that names this process as its writer."""
    return path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"


def parse_temporary_name(name: str) -> tuple[str, int] | None:
    """(target file name, writer's PID) of a :func:`temporary_path` name; None for any other name."""
    match = _TEMPORARY_NAME.match(name)
    if match is None:
        return None
    return match["target"], int(match["pid"])


def fsync_directory(directory: Path) -> None:
    """Persist a rename or unlink in ``directory`` (the entry, not just the file's data)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def writable_directory_problem(directory: Path) -> str | None:
    """Why files cannot be written in ``directory`` (made with its missing parents), or None if they can.

    Checked without creating anything: the nearest existing ancestor must be a directory in which
    this process can create a file (so a read-only file system, a parent that is a regular file, or
    ``/proc`` are refused even for root).
    """
    existing = directory
    while not existing.exists() and existing != existing.parent:
        if existing.is_symlink():
            return f"{existing} is a dangling symbolic link"
        existing = existing.parent
    if not existing.is_dir():
        if existing == directory:
            return f"{directory} exists and is not a directory"
        return f"{existing} is not a directory, so {directory} cannot be created"
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        where = "in it" if existing == directory else f"in {existing}, so {directory} cannot be created"
        return f"cannot create files {where}: {exc.strerror or exc}"
    return None


def process_is_gone(pid: int) -> bool:
    """Whether no process with ``pid`` exists (as this process sees PIDs)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # it exists, under another user
    return False


def find_leftover_temporary_files(directory: Path, is_target: Callable[[str], bool]) -> list[tuple[Path, str]]:
    """(temporary file, its target's name) in ``directory``, for targets ``is_target`` accepts, whose
    writer is not alive.  The caller must hold the lock of those targets' writers (module docstring)."""
    try:
        names = sorted(entry.name for entry in os.scandir(directory) if entry.is_file(follow_symlinks=False))
    except FileNotFoundError:
        return []
    leftovers: list[tuple[Path, str]] = []
    for name in names:
        parsed = parse_temporary_name(name)
        if parsed is None or not is_target(parsed[0]):
            continue
        target, pid = parsed
        if pid == os.getpid() or process_is_gone(pid):
            leftovers.append((directory / name, target))
    return leftovers


def remove_temporary_files(paths: Iterable[Path]) -> list[Path]:
    """Remove leftovers found by :func:`find_leftover_temporary_files` (caller holds their writers' lock)."""
    removed: list[Path] = []
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path)
            log.info("removed %s: a temporary file of an interrupted write whose writer is gone", path)
    return removed


def remove_leftover_temporary_files(directory: Path, is_target: Callable[[str], bool]) -> list[Path]:
    """Find and remove leftovers of the targets ``is_target`` accepts; the paths removed (logged)."""
    return remove_temporary_files(path for path, _ in find_leftover_temporary_files(directory, is_target))
