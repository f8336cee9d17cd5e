"""The root of migdra's error hierarchy.

Every error migdra raises on purpose derives from :class:`MigdraError`; each subsystem adds its own
branch in its own ``errors`` module and draws it there.  ``retryable`` tells callers whether the same
call may succeed later without anyone changing anything (a busy device, a conflict) or whether it is
permanent until a person or the configuration changes (an illegal placement, a missing library).

    MigdraError
     ├── ConfigurationError        bad settings or CLI input (permanent)
     ├── ApiRequestError           dra_driver.kube.failures: a request to the API server failed (retryable or not)
     ├── NvmlError                 dra_driver.nvml.errors: everything the hardware boundary reports
     └── SimulatorError            dra_driver.nvml.sim.errors: the simulated hardware's own refusals
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

import yaml
from pydantic import ValidationError

from dra_driver.flags import model_flags

SettingsT = TypeVar("SettingsT")


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


def describe_settings_error(exc: ValidationError, model: object) -> str:
    """One line for a settings model's validation errors, naming each field as a user sets it.

    pydantic's own text is several lines with internal field names and a documentation URL; a user
    typed a flag (``--sim-gpus``) or a variable (``MIGDRA_SIM_GPUS``), so those are what we name: the
    flag the field declares (:mod:`dra_driver.flags`), else its variable alone.
    """
    config = getattr(model, "model_config", {})
    prefix = str(config.get("env_prefix", "")) if isinstance(config, dict) else ""
    flags = model_flags(model)
    problems = []
    for error in exc.errors():
        message = validator_message(error["msg"])
        if not error["loc"]:  # a whole-model rule: its message names the flags itself
            problems.append(message)
            continue
        field = str(error["loc"][0])
        variable = f"{prefix}{field.upper()}"
        declared = flags.get(field)
        flag = declared.spelled(field) if declared is not None else variable
        named = f"{flag} ({variable})" if declared is not None else variable
        if error["type"] == "missing":  # the input is the whole settings dict: nothing to quote
            problems.append(f"{flag} is required" + (f" (or set {variable})" if declared is not None else ""))
        elif error["type"] == "bool_parsing":
            expected = "expected true or false (or 1/0, yes/no, on/off)"
            problems.append(f"{named}: {expected}, got {error['input']!r}")
        else:
            problems.append(f"{named}: {message} (got {error['input']!r})")
    return "; ".join(problems)


def build_settings(model: Callable[..., SettingsT], what: str, given: Mapping[str, object]) -> SettingsT:
    """A settings group from its flags (None = not given) plus ``MIGDRA_*`` variables; errors name the flag."""
    try:
        return model(**{key: value for key, value in given.items() if value is not None})
    except ValidationError as exc:
        raise ConfigurationError(f"invalid {what} settings: {describe_settings_error(exc, model)}") from exc


def validator_message(text: str) -> str:
    """pydantic prefixes messages from our validators with 'Value error, '; the user needs only ours."""
    return text.removeprefix("Value error, ").removeprefix("Assertion failed, ")
