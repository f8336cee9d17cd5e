"""``hack/check_self_contained.py`` (run by ``make lint``) finds every line that points outside the repository.

The offending strings are assembled here from pieces, so this file does not trip the check itself.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
OUTSIDE = ".." + "/shared"
ABSOLUTE = "/work" + "/shared"


def _load_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_self_contained", REPO / "hack" / "check_self_contained.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check = _load_check()


@pytest.mark.parametrize(
    ("line", "what"),
    [
        (f"see {OUTSIDE}/reference/kubelet-grpc.md for the contract", "relative path to the research notes"),
        (f"# {ABSOLUTE}/reference/structured-allocator.md", "absolute path to the research notes"),
        ("// Written from the tables in shared" + "/reference/kubelet-grpc.md.", "path to the research notes"),
        ('TABLE = REPO.parent / "sha' + 'red" / "reference" / "mig-profiles.yaml"', "path built to the research notes"),
        ('*(ROOT / "sha' + 'red" / "reference").glob("*.json")', "path built to the research notes"),
        ("Contract (kubelet-grpc" + ".md §3):", "section of a research note"),
        ("may change its minor number (nvml-mig" + ".md section 5).", "section of a research note"),
    ],
    ids=["dotdot", "absolute", "relative", "path-join-parent", "path-join", "section-sign", "section-word"],
)
def test_a_line_pointing_outside_is_reported_with_file_and_line(line: str, what: str) -> None:
    text = f"first line\n{line}\nlast line\n"
    assert check.find_offences("docs/example.md", text) == [f"docs/example.md:2: {what} ({line.strip()})"]


@pytest.mark.parametrize(
    "line",
    [
        'the facts are in docs/kubelet-grpc.md, "DRAPlugin messages"',
        "recordings: tests/golden/recordings/h200-sxm-580.159.04-mig-disabled.json",
        "the table: hack/data/mig-profiles.yaml",
        'a claim named "shared" in namespace "shared"',
        "the shared/exclusive flag of a device",
        "docs/prepare.md §7 says how recovery works",
    ],
)
def test_a_line_inside_the_repository_passes(line: str) -> None:
    assert check.find_offences("docs/example.md", line) == []


def test_a_scan_reports_each_offending_line_once_and_skips_the_check_itself(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(f"ok\n{OUTSIDE}/reference/x.md and {ABSOLUTE} too\n")
    (tmp_path / "image.png").write_bytes(b"\x89PNG\xff\xfe")
    (tmp_path / "hack").mkdir()
    (tmp_path / "hack" / "check_self_contained.py").write_text(f"PATTERN = '{OUTSIDE}'\n")
    found = check.scan(tmp_path, ["docs/a.md", "image.png", "gone.md", "hack/check_self_contained.py"])
    assert found == [f"docs/a.md:2: relative path to the research notes ({OUTSIDE}/reference/x.md and {ABSOLUTE} too)"]


def test_long_lines_are_shortened_in_the_report() -> None:
    line = f"{OUTSIDE}/" + "x" * 200
    (offence,) = check.find_offences("f.txt", line)
    assert offence.startswith("f.txt:1: relative path to the research notes (")
    assert offence.endswith("...)")
    assert len(offence) < 150
