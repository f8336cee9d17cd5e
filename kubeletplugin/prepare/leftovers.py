"""Temporary files that interrupted atomic writes left behind, and when they may be removed.

``dra_driver.durable.write_file_atomically`` writes ``.<target>.<writer PID>.<hex>.tmp`` and renames it
over the target; a writer killed in between (``kill -9``, a node crash) leaves the temporary file for
ever.  Prepare writes two kinds: the checkpoint's (``.checkpoint.json.*.tmp`` in the state directory,
``.<claim UID>.json.*.tmp`` in its records' directory ``claims/<boot ID>/``) and CDI specs'
(``.<driver>-claim_<UID>.json.*.tmp`` in the CDI directory).  None is ever read (the checkpoint and
CDI's scan skip names that start with ``.``), but they accumulate.  Those of a record directory of an
earlier boot go with that directory.

A temporary file is removed only when all of these hold:

- its name is exactly of that form, for a target the caller names (never another vendor's file);
- the caller holds the lock every writer of that target holds (the checkpoint's lock, or the claim's
  lock), so no writer -- of this process or of the other plugin pod of a rolling update -- is
  between creating and renaming it;
- its writer is not a live process: its PID is unused here, or is this very process (whose writers
  of the target hold the same lock).  The second case matters in containers, where every plugin
  runs as PID 1 of its own namespace.

This module never decides which targets are the caller's, and never takes a lock itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from dra_driver.durable import parse_temporary_name

log = logging.getLogger(__name__)


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
