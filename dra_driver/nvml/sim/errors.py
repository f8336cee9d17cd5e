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
    └── StateFileError             the state file is unusable as ``install`` was asked to use it: absent
        │                          with no ``gpus`` to create it from, or from another schema version.
        │                          Also a ValueError (a bad argument to ``install``).  Permanent.
        └── StateMismatchError     it describes other GPUs than ``install(gpus=...)`` asked for.
                                   Permanent: delete the state file or stop passing ``gpus``.
"""

from __future__ import annotations

from dra_driver.errors import MigdraError


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


class StateFileError(SimulatorError, ValueError):
    """The simulator's state file cannot be used as it is."""


class StateMismatchError(StateFileError):
    """The state file exists but describes other GPUs than the caller asked for."""
