"""Errors of the NVML simulator.

This module owns the simulator's exception tree; it never imports ctypes or touches the state file.

::

    SimulatorError                 base of everything the simulator raises (a dra_driver MigdraError)
    ├── SimNvmlError               an NVML return code the simulated hardware answers with.  Raised by
    │                              the pure rules (hardware.py); the fake library turns it into the int
    │                              return code, so callers only ever see pynvml's NVMLError_* classes.
    ├── HardwareRefusedError       an operator action outside NVML (reset_gpu, set_busy) the simulated
    │                              machine refuses, e.g. resetting a GPU that still has GPU instances.
    │                              Permanent until the caller changes the state (destroy the instances).
    ├── StateLockTimeout           another process held the state file's lock longer than the bound
    │                              (``StateStore.lock_timeout``).  Retryable: a stuck or stopped process
    │                              holds it; once it exits the lock is free.
    ├── StateFileError             the state file is unusable as ``install`` was asked to use it: not a
    │   │                          regular file, unreadable, not JSON, another schema version, a state
    │   │                          no real machine can be in, or in a directory where neither it nor
    │   │                          its lock file can be created.  Also a ValueError (a bad argument to
    │   │                          ``install``); ``dra_driver.nvml.session`` re-raises it as the
    │   │                          ConfigurationError of the flag that named the file.  Permanent; the
    │   │                          file is never modified or deleted.
    │   ├── StateFileMissingError  it does not exist and no GPUs were given to create it from.
    │   └── StateMismatchError     it describes other GPUs than ``install(gpus=...)`` asked for.
    │                              Permanent: delete the state file or stop passing ``gpus``.
    ├── FaultPlanError             a fault plan (``MIGDRA_SIM_FAULTS`` or ``install(faults=...)``) that
    │                              is not JSON, has an unknown shape, or names a symbol the simulator
    │                              does not implement.  A ConfigurationError; permanent.
    └── LatencyProfileError        a recording given as a latency profile (``recorded_latency``,
                                   ``MIGDRA_SIM_LATENCY_PROFILE``) that is missing, not JSON, holds no
                                   latencies, or times a call migdra does not know.  A
                                   ConfigurationError (and a ValueError, so settings can name the
                                   variable); permanent.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from dra_driver.errors import ConfigurationError, MigdraError


class SimulatorError(MigdraError):
    """Base of every error the NVML simulator raises (a :class:`MigdraError`, so the CLI reports it
    in one line instead of a traceback)."""


class SimNvmlError(SimulatorError):
    """The simulated hardware answers an NVML call with ``code`` (one of pynvml's NVML_ERROR_*)."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"NVML return code {code}: {detail}")
        self.code = code
        self.detail = detail


class HardwareRefusedError(SimulatorError):
    """An operator action on the simulated machine (outside NVML) cannot be carried out now."""


class StateLockTimeout(SimulatorError):
    """Another process holds the state file's lock for longer than any simulated NVML call takes."""

    retryable = True


class StateFileError(SimulatorError, ValueError):
    """The simulator's state file cannot be used as it is; the message names the file."""


class StateFileMissingError(StateFileError):
    """The state file does not exist and nothing says which GPUs a new one should hold."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"simulator state file {path} does not exist, and no GPUs were given to create it")
        self.path = path


class StateMismatchError(StateFileError):
    """The state file exists but describes other GPUs than the caller asked for."""

    def __init__(self, path: Path, present: list[str], wanted: list[str]) -> None:
        super().__init__(
            f"simulator state file {path} holds GPUs {present}, not the requested {wanted}; "
            "delete it, or leave the GPUs out to use it as it is"
        )
        self.path = path
        self.present = present
        self.wanted = wanted


class FaultPlanError(SimulatorError, ConfigurationError, ValueError):
    """A fault plan that cannot be used; the message names where it came from and the field."""


class LatencyProfileError(SimulatorError, ConfigurationError, ValueError):
    """A recording that cannot serve as a latency profile; the message names the file and the problem."""


# pydantic names Python types; the files and variables it checks here are JSON.
_JSON_WORDS = {
    "list_type": "expected a JSON array",
    "tuple_type": "expected a JSON array",
    "dict_type": "expected a JSON object",
    "model_type": "expected a JSON object",
    "extra_forbidden": "unknown key",
}


def describe_validation_error(exc: ValidationError, shown: int = 2) -> str:
    """pydantic's errors as one line of ``field.path: message`` (pydantic's own text spans lines and
    links to its documentation; a person fixing a file needs the key and the reason)."""
    problems = []
    for error in exc.errors()[:shown]:
        location = ".".join(str(part) for part in error["loc"])
        message = _JSON_WORDS.get(error["type"]) or error["msg"].removeprefix("Value error, ").removeprefix(
            "Assertion failed, "
        )
        problems.append(f"{location}: {message}" if location else message)
    hidden = len(exc.errors()) - shown
    return "; ".join(problems) + (f" (and {hidden} more)" if hidden > 0 else "")
