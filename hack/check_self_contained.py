#!/usr/bin/env python3
"""Fail when a file of the repository points into ``../shared`` (or ``/work/shared``).

Why: migdra was written beside a folder of research notes that a user of the repository does not
have.  Every fact the code relies on now lives in ``docs/`` (in our words, naming the public upstream
source), the researched MIG table in ``hack/data/`` and the hardware recordings in
``tests/golden/recordings/``.  A path into that folder, or a citation of one of its notes by section
(``kubelet-grpc.md §3``), would be a reference nobody can follow, so ``make lint`` runs this check
over every file git tracks or would add (untracked files that are not ignored), except this script,
whose patterns are the offence itself.

    python hack/check_self_contained.py            # exit 1 listing each offence as FILE:LINE: ...

One line per offending line, so an editor or CI annotates it directly.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SELF = Path(__file__).resolve().relative_to(REPO).as_posix()

# What a path into the research folder looks like, in prose, shell and Python: ``../shared/...``,
# ``/work/shared/...``, ``shared/reference/...`` and ``REPO.parent / "shared" / "reference"``.
_SHARED = r"""["']?shared["']?"""
_NOTES = r"\b(kubelet-grpc|resource-api|nvml-mig|structured-allocator|cel-for-dra|prior-art)"
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("relative path to the research notes", re.compile(r"\.\./shared\b")),
    ("absolute path to the research notes", re.compile(r"/work/shared\b")),
    ("path to the research notes", re.compile(r"(?<![\w.-])shared/reference\b")),
    ("path built to the research notes", re.compile(r"""\.parent\s*/\s*["']shared["']""")),
    ("path built to the research notes", re.compile(_SHARED + r"""\s*/\s*["']reference["']""")),
    # The notes were cited by file and section ("kubelet-grpc.md §3"); docs/ pages are cited by heading.
    ("section of a research note", re.compile(_NOTES + r"\.md,?\s+(§|sections?\s+\d)")),
)


def find_offences(path: str, text: str) -> list[str]:
    """``FILE:LINE: what (the line)`` for every line of ``text`` that points into the folder; pure."""
    offences = []
    for number, line in enumerate(text.splitlines(), start=1):
        for what, pattern in PATTERNS:
            if pattern.search(line):
                shown = line.strip()
                shown = shown if len(shown) <= 100 else shown[:97] + "..."
                offences.append(f"{path}:{number}: {what} ({shown})")
                break
    return offences


def scan(root: Path, paths: Iterable[str]) -> list[str]:
    """The offences of ``paths`` (relative to ``root``); this script, binary and vanished files are skipped."""
    offences = []
    for relative in paths:
        if relative == SELF:
            continue
        try:
            text = (root / relative).read_text(encoding="utf-8")
        except (FileNotFoundError, IsADirectoryError, UnicodeDecodeError):
            continue  # deleted but still in the index, a submodule, or not text
        offences.extend(find_offences(relative, text))
    return offences


def repository_files(root: Path) -> list[str]:
    """Every file git tracks, plus untracked files it would add (not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout
    return sorted({name for name in listed.decode().split("\0") if name})


def main() -> int:
    offences = scan(REPO, repository_files(REPO))
    for offence in offences:
        print(offence)
    if offences:
        print(
            f"{len(offences)} line(s) point outside the repository: put the fact in docs/ (naming the public "
            "source) or the file in the repository, and point there",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
