"""The bad-input corpus: every case is a mistake a user can make, and each must end in one clear line.

Cases are data (``cases/*.yaml``), so adding one needs no code.  Each runs ``migdra`` as a fresh
process in an empty directory with a clean environment (no ``MIGDRA_*``, no ``KUBECONFIG``, no
in-cluster variables, ``HOME`` inside the directory) and must:

- exit with the expected status (2 for usage errors: a flag, variable or file that cannot be used;
  1 for everything else),
- print exactly one line on stderr, ``migdra: error: ...``, containing the expected fragment (which
  names the flag, variable or file), and no traceback,
- finish within the case's time bound (a hang fails the case; it is never waited out).

A case file holds a list of mappings::

    - id: sim-state-is-a-directory           # unique, kebab-case
      argv: [gpus, --sim-state, "{tmp}/dir"]  # migdra's arguments
      env: {MIGDRA_NVML: simulated}           # optional, added to the clean environment
      files:                                  # optional, created under {tmp} before the run
        dir/: {}                              # a directory
        state.json: '{"gpus": 5}'             # a text file
        blob.bin: {hex: "00ff"}               # a binary file
      fixtures: [busy_port]                   # optional: busy_port (a listening TCP port), closed_port
      status: 2
      message: "--sim-state"                  # fragment of the one error line
      timeout: 20                             # optional, seconds (default 30)

``{tmp}``, ``{busy_port}`` and ``{closed_port}`` are replaced in argv, env, file contents and message.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

CASES_DIR = Path(__file__).parent / "cases"
DEFAULT_TIMEOUT_S = 30.0
ERROR_PREFIX = "migdra: error: "
# Variables that would let a case see this machine's configuration instead of its own.
_LEAKY_ENV_PREFIXES = ("MIGDRA_", "KUBERNETES_", "KUBECONFIG")


@dataclass(frozen=True)
class BadInputCase:
    id: str
    argv: list[str]
    status: int
    message: str
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, Any] = field(default_factory=dict)
    fixtures: list[str] = field(default_factory=list)
    timeout: float = DEFAULT_TIMEOUT_S
    stdin: str | None = None
    source: str = ""


def load_cases() -> list[BadInputCase]:
    cases: list[BadInputCase] = []
    for path in sorted(CASES_DIR.glob("*.yaml")):
        for raw in yaml.safe_load(path.read_text()) or []:
            cases.append(BadInputCase(**raw, source=path.name))
    ids = [case.id for case in cases]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    assert not duplicates, f"duplicate bad-input case ids: {duplicates}"
    return cases


CASES = load_cases()


def test_the_corpus_is_large_enough() -> None:
    """The issue that created the corpus asks for at least 60 cases; shrinking it is a regression."""
    assert len(CASES) >= 60, f"only {len(CASES)} bad-input cases"


def _listening_socket(stack: ExitStack) -> int:
    server = stack.enter_context(closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)))
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    return int(server.getsockname()[1])


def _closed_port() -> int:
    """A port nothing listens on: bound once to learn a free number, then released."""
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def substitutions(tmp_path: Path) -> Iterator[dict[str, str]]:
    with ExitStack() as stack:
        values = {"tmp": str(tmp_path), "busy_port": str(_listening_socket(stack)), "closed_port": str(_closed_port())}
        yield values


def _fill(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


def _make_files(root: Path, files: dict[str, Any], values: dict[str, str]) -> None:
    for name, content in files.items():
        path = root / _fill(name, values)
        if name.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, dict) and "hex" in content:
            path.write_bytes(bytes.fromhex(content["hex"]))
        else:
            path.write_text(_fill(content if isinstance(content, str) else yaml.safe_dump(content), values))


def _clean_environment(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_LEAKY_ENV_PREFIXES)}
    env["HOME"] = str(tmp_path)
    env["PYTHONWARNINGS"] = "ignore"  # a deprecation warning is not the user's error line
    return env


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_gets_one_clear_line(case: BadInputCase, tmp_path: Path, substitutions: dict[str, str]) -> None:
    _make_files(tmp_path, case.files, substitutions)
    env = _clean_environment(tmp_path) | {k: _fill(str(v), substitutions) for k, v in case.env.items()}
    argv = [sys.executable, "-m", "dra_driver.cli.main", *(_fill(str(a), substitutions) for a in case.argv)]
    try:
        done = subprocess.run(
            argv,
            cwd=tmp_path,
            env=env,
            input=case.stdin,
            stdin=None if case.stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=case.timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{case.id} ({case.source}): still running after {case.timeout} s (a hang); stderr: {exc.stderr!r}")
    stderr_lines = [line for line in done.stderr.splitlines() if line.strip()]
    report = f"{case.id} ({case.source}): exit {done.returncode}, stderr:\n{done.stderr}"
    assert "Traceback" not in done.stderr, report
    assert done.returncode == case.status, report
    assert len(stderr_lines) == 1, report
    assert stderr_lines[0].startswith(ERROR_PREFIX), report
    message = _fill(case.message, substitutions)
    assert message in stderr_lines[0], f"expected {message!r} in the error line. {report}"
