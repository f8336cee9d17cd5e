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

import yaml


class MigdraError(Exception):
    """Base of every error migdra raises on purpose."""

    retryable: bool = False


class ConfigurationError(MigdraError):
    """Settings, flags or environment variables that cannot be used; the message names the field."""


def describe_yaml_error(exc: yaml.YAMLError) -> str:
    """``line L, column C: what`` for a file a user gave us, without PyYAML's multi-line excerpt.

    Binary content (a control character) says so, since that is the likelier mistake than YAML.
    """
    if isinstance(exc, yaml.reader.ReaderError):
        return f"character {exc.position}: {exc.reason} (#x{exc.character:04x}): not a text file"
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    parts = [getattr(exc, "context", None), getattr(exc, "problem", None)]
    what = ", ".join(str(part) for part in parts if part) or " ".join(str(exc).split())
    return f"line {mark.line + 1}, column {mark.column + 1}: {what}" if mark is not None else what
