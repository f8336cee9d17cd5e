"""Asking a running ``migdra sim up`` to do something (``migdra sim roll``): a request file, SIGUSR1 to the
supervisor, an answer file.

Why files and a signal: the supervisor is a plain process with no API of its own, and whatever asks
(a person, a test) may outlive it or start after it; a request names what it wants and a token, the
supervisor writes the answer under the same token atomically, and the asker waits for that file with a
bound.  A request left behind by a supervisor that died is answered by nobody: the asker's wait says so.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

CONTROL_DIR = "control"
POLL_S = 0.1


@dataclass(frozen=True)
class Request:
    action: str  # "roll": a side-by-side rollout of one node's plugin
    node: str
    token: str


@dataclass(frozen=True)
class Answer:
    ok: bool
    message: str


def _path(workdir: Path, request: Request, suffix: str) -> Path:
    return workdir / CONTROL_DIR / f"{request.action}-{request.node}.{suffix}"


def write_request(workdir: Path, action: str, node: str) -> Request:
    request = Request(action, node, secrets.token_hex(8))
    _path(workdir, request, "answer").unlink(missing_ok=True)
    _write(_path(workdir, request, "request"), {"token": request.token})
    return request


def pending_requests(workdir: Path) -> list[Request]:
    found = []
    for path in sorted((workdir / CONTROL_DIR).glob("*.request")):
        action, _, node = path.stem.partition("-")
        try:
            token = str(json.loads(path.read_text())["token"])
        except (OSError, ValueError, KeyError):
            continue
        found.append(Request(action, node, token))
    return found


def answer(workdir: Path, request: Request, result: Answer) -> None:
    _write(_path(workdir, request, "answer"), {"token": request.token, "ok": result.ok, "message": result.message})
    _path(workdir, request, "request").unlink(missing_ok=True)


def wait_answer(workdir: Path, request: Request, timeout: float) -> Answer | None:
    """The supervisor's answer to ``request``, or None after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    path = _path(workdir, request, "answer")
    while time.monotonic() < deadline:
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError):
            found = None
        if found is not None and found.get("token") == request.token:
            return Answer(bool(found["ok"]), str(found["message"]))
        time.sleep(POLL_S)
    return None


def _write(path: Path, content: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f"{path.suffix}.{os.getpid()}.partial")
    partial.write_text(json.dumps(content))
    partial.replace(path)
