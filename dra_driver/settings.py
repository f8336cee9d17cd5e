"""Settings, grouped by concern, built once at start-up and passed explicitly.

Each group is a pydantic-settings model: a field can come from its environment variable
(``MIGDRA_<FIELD>``) or from a CLI flag (init arguments win over the environment).  Nothing else in
migdra reads ``os.environ`` for configuration.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.errors import ConfigurationError
from dra_driver.mig.catalog import load_catalog


def parse_sim_gpus(value: object) -> tuple[str, ...]:
    """``"H100-SXM5-80GB:8,A100-SXM4-40GB"`` -> eight H100 keys then one A100 key, in that order.

    The count after ``:`` defaults to 1; model names are catalog keys or aliases and are normalised
    to catalog keys, so a typo fails here with the list of known models.
    """
    if value is None or value == "":
        return ()
    items: list[str]
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, (list, tuple)):
        items = [str(v).strip() for v in value]
    else:
        raise ValueError(f"expected 'MODEL[:COUNT],...', got {value!r}")
    catalog = load_catalog()
    gpus: list[str] = []
    for item in items:
        model, _, count_text = item.partition(":")
        try:
            count = int(count_text) if count_text else 1
        except ValueError:
            raise ValueError(f"{item!r}: the count after ':' must be an integer") from None
        if not 1 <= count <= 64:
            raise ValueError(f"{item!r}: the count must be between 1 and 64")
        try:
            key = catalog.model(model).key
        except KeyError as exc:
            raise ValueError(str(exc.args[0])) from None
        gpus.extend([key] * count)
    return tuple(gpus)


class NvmlSettings(BaseSettings):
    """Which NVML library the hardware boundary talks to."""

    model_config = SettingsConfigDict(env_prefix="MIGDRA_", extra="forbid", frozen=True)

    nvml: Literal["real", "simulated"] = Field(
        default="real",
        description="'real': libnvidia-ml.so.1 through pynvml; 'simulated': the MIG simulator beneath pynvml",
    )
    sim_state: Path | None = Field(
        default=None,
        description="state file of the simulated hardware (created if absent); unset: a throw-away node that "
        "lives as long as the process",
    )
    sim_gpus: Annotated[tuple[str, ...], NoDecode, BeforeValidator(parse_sim_gpus)] = Field(
        default=(),
        description="simulated GPUs, 'MODEL[:COUNT],...' (catalog keys): creates a new state file; an existing "
        "one must hold the same models",
    )
    sim_mig_enabled: bool = Field(default=True, description="start simulated GPUs with MIG mode enabled")

    @field_validator("sim_state")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        return value.expanduser().absolute() if value is not None else None

    @model_validator(mode="before")
    @classmethod
    def _simulated_gpus_imply_the_simulator(cls, data: object) -> object:
        """``--sim-gpus`` or ``--sim-state`` alone means the simulator: nobody asks for simulated GPUs on
        real NVML."""
        if isinstance(data, dict) and (data.get("sim_gpus") or data.get("sim_state")) and "nvml" not in data:
            return {**data, "nvml": "simulated"}
        return data

    @model_validator(mode="after")
    def _simulated_needs_hardware(self) -> NvmlSettings:
        if self.nvml == "simulated" and self.sim_state is None and not self.sim_gpus:
            raise ValueError(
                "--nvml simulated needs --sim-gpus (MIGDRA_SIM_GPUS) for a throw-away node, "
                "or --sim-state (MIGDRA_SIM_STATE) for a persistent one"
            )
        return self


def build_nvml_settings(**overrides: object) -> NvmlSettings:
    """Environment plus explicit overrides (``None`` means 'not given'); errors name the field."""
    given = {key: value for key, value in overrides.items() if value is not None}
    try:
        return NvmlSettings(**given)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise ConfigurationError(f"invalid NVML settings: {describe_settings_error(exc, NvmlSettings)}") from exc


def load_device_model_config(
    path: Path | None, *, driver_name: str | None = None, exclude_gpus: tuple[str, ...] = ()
) -> DeviceModelConfig:
    """The device model configuration from a YAML file (camelCase or snake_case keys) plus flags."""
    raw: dict[str, object] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigurationError(f"cannot read device model configuration {path}: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ConfigurationError(f"{path}: expected a mapping at the top level")
        raw = {_snake(str(key)): value for key, value in loaded.items()}
    if driver_name is not None:
        raw["driver_name"] = driver_name
    if exclude_gpus:
        raw["exclude_gpus"] = tuple(raw.get("exclude_gpus", ()) or ()) + tuple(exclude_gpus)  # type: ignore[arg-type]
    try:
        return DeviceModelConfig.model_validate(raw)
    except ValidationError as exc:
        where = f" in {path}" if path else ""
        problems = "; ".join(
            f"{'.'.join(_camel(str(p)) for p in e['loc'])}: {_message(e['msg'])}" for e in exc.errors()
        )
        raise ConfigurationError(f"invalid device model configuration{where}: {problems}") from exc


def describe_settings_error(exc: ValidationError, model: object) -> str:
    """One line for a settings model's validation errors, naming each field as a user sets it.

    pydantic's own text is several lines with internal field names and a documentation URL; a user
    typed a flag (``--sim-gpus``) or a variable (``MIGDRA_SIM_GPUS``), so those are what we name.
    """
    config = getattr(model, "model_config", {})
    prefix = str(config.get("env_prefix", "")) if isinstance(config, dict) else ""
    problems = []
    for error in exc.errors():
        message = _message(error["msg"])
        if not error["loc"]:  # a whole-model rule: its message names the flags itself
            problems.append(message)
            continue
        field = str(error["loc"][0])
        flag, variable = f"--{field.replace('_', '-')}", f"{prefix}{field.upper()}"
        if error["type"] == "missing":  # the input is the whole settings dict: nothing to quote
            problems.append(f"{flag} is required (or set {variable})")
        else:
            problems.append(f"{flag} ({variable}): {message} (got {error['input']!r})")
    return "; ".join(problems)


def _message(text: str) -> str:
    """pydantic prefixes messages from our validators with 'Value error, '; the user needs only ours."""
    return text.removeprefix("Value error, ").removeprefix("Assertion failed, ")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
