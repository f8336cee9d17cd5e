"""The one way a test waits: :func:`wait_for`, a bounded wait on observable state.

Tests wait for something they can see (the API's state, the simulated NVML's state file, a process's
output or its sockets), never for a fixed time: a sleep long enough on a loaded two-core machine wastes
time everywhere else, and one short enough fails there.  Every wait is bounded, and a wait that runs out
says what it waited for and what it saw last, so the failure explains itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

WAIT = 60.0
"""Seconds a wait may take unless told otherwise: starting a process or a cluster on two busy CPUs fits."""
POLL = 0.05
"""Seconds between two looks when nothing signals a change."""

_T = TypeVar("_T")


def wait_for(
    what: str,
    probe: Callable[[], _T | None],
    *,
    timeout: float = WAIT,
    changes: threading.Event | None = None,
    detail: Callable[[], str] | None = None,
) -> _T:
    """Call ``probe`` until it returns something truthy, and return that.

    After ``timeout`` seconds the test fails with one message naming ``what`` (a description: "the pod to
    run"), the last value ``probe`` returned and, when given, ``detail()`` (a process's log, say).  An
    exception ``probe`` raises ends the wait at once: a probe can fail early when what it waits for can no
    longer happen (the process exited).  ``changes`` is an event set on every change of what ``probe``
    reads (an API server's writes): the wait then sleeps until the next change instead of polling.
    """
    deadline = time.monotonic() + timeout
    while True:
        if changes is not None:
            changes.clear()  # before the look: a change during it ends the sleep below at once
        value = probe()
        if value:
            return value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            message = f"timed out after {timeout:g} s waiting for {what}; last seen: {_shown(value)}"
            raise AssertionError(f"{message}\n{detail()}" if detail is not None else message)
        if changes is not None:
            changes.wait(remaining)
        else:
            time.sleep(min(POLL, remaining))


def _shown(value: object, limit: int = 500) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


QUIET = 0.5
"""Seconds :func:`stays` watches by default: several rounds of a controller that would act at once."""


def stays(what: str, probe: Callable[[], object], seconds: float = QUIET) -> None:
    """``probe()`` stays truthy for ``seconds``: the bounded check that something does not happen (a pod
    stays Pending, a claim is kept).  Fails at the first look that finds it false, naming ``what``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = probe()
        assert value, f"expected {what} to hold; saw {_shown(value)}"
        time.sleep(POLL)
