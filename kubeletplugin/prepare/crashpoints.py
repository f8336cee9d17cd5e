"""Crash points for reliability tests: SIGKILL this process at a named step of prepare.

Only tests set one (``MIGDRA_TEST_CRASH_AT`` through :class:`~kubeletplugin.prepare.settings.
PrepareSettings`, or ``crash_at=`` on the service).  A crash point dies the way ``kill -9`` does: no
exception handlers, no ``finally`` blocks, no atexit, so the files and the (simulated) hardware are
left exactly as a real crash would leave them.  The simulator's own fault plan
(``MIGDRA_SIM_FAULTS``, ``kill_after``) covers crashes inside NVML calls.

This module never decides anything else; with no crash point configured it does nothing.
"""

from __future__ import annotations

import enum
import logging
import os
import signal

log = logging.getLogger(__name__)


class CrashPoint(enum.StrEnum):
    """Where prepare can be killed, in the order prepare passes them."""

    AFTER_CHECKPOINT_STARTED = "after-checkpoint-started"
    AFTER_CHECKPOINT_REQUESTED = "after-checkpoint-requested"  # the GI request recorded, NVML not called yet
    AFTER_GPU_INSTANCE = "after-gpu-instance"  # the GI exists, its ID is not recorded yet
    AFTER_CHECKPOINT_GPU_INSTANCE = "after-checkpoint-gpu-instance"  # the GI ID recorded, no CI yet
    AFTER_COMPUTE_INSTANCE = "after-compute-instance"
    AFTER_CDI = "after-cdi"
    AFTER_CHECKPOINT_COMPLETED = "after-checkpoint-completed"


class CrashHook:
    """Call ``hook(point)`` at each crash point; kills the process at the configured one."""

    def __init__(self, crash_at: CrashPoint | None = None) -> None:
        self.crash_at = crash_at

    def __call__(self, point: CrashPoint) -> None:
        if self.crash_at is not None and point is self.crash_at:
            log.warning("test crash point %s reached: killing this process with SIGKILL", point.value)
            for handler in logging.getLogger().handlers:
                handler.flush()
            os.kill(os.getpid(), signal.SIGKILL)
