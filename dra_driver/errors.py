"""The root of migdra's error hierarchy.

Every error migdra raises on purpose derives from :class:`MigdraError`; each subsystem adds its own
branch in its own ``errors`` module and draws it there.  ``retryable`` tells callers whether the same
call may succeed later without anyone changing anything (a busy device, a conflict) or whether it is
permanent until a person or the configuration changes (an illegal placement, a missing library).

    MigdraError
     ├── ConfigurationError        bad settings or CLI input (permanent)
     ├── ApiRequestError           dra_driver.kubeapi: a request to the API server failed (retryable or not)
     ├── NvmlError                 dra_driver.nvml.errors: everything the hardware boundary reports
     └── SimulatorError            dra_driver.nvml.sim.errors: the simulated hardware's own refusals
"""

from __future__ import annotations


class MigdraError(Exception):
    """Base of every error migdra raises on purpose."""

    retryable: bool = False


class ConfigurationError(MigdraError):
    """Settings, flags or environment variables that cannot be used; the message names the field."""
