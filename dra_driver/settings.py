"""Settings, grouped by concern, built once at start-up and passed explicitly.

Each group is a pydantic-settings model: a field can come from its environment variable
(``MIGDRA_<FIELD>``) or from a CLI flag (init arguments win over the environment).  Nothing else in
migdra reads ``os.environ`` for configuration.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Collection
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from dra_driver.devicemodel.config import DeviceModelConfig, ProfileFilter, gpu_reference_problem
from dra_driver.errors import ConfigurationError, describe_yaml_error
from dra_driver.mig.catalog import load_catalog

# Most GPUs one simulated node holds: far beyond any server, small enough to start in a moment.
MAX_SIM_GPUS = 64


def parse_sim_gpus(value: object) -> tuple[str, ...]:
    """``"H100-SXM5-80GB:8,A100-SXM4-40GB"`` -> eight H100 keys then one A100 key, in that order.

    The count after ``:`` defaults to 1; model names are catalog keys or aliases and are normalised
    to catalog keys, so a typo fails here with the list of known models.
    """
    if value is None or value == "":
        return ()
    items: list[str]
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",")]
    elif isinstance(value, (list, tuple)):
        items = [str(v).strip() for v in value]
    else:
        raise ValueError(f"expected 'MODEL[:COUNT],...', got {value!r}")
    catalog = load_catalog()
    gpus: list[str] = []
    for position, item in enumerate(items, start=1):
        if not item:
            raise ValueError(f"entry {position} is empty; expected 'MODEL[:COUNT],...', e.g. H100-SXM5-80GB:8")
        model, _, count_text = item.partition(":")
        try:
            count = int(count_text) if count_text else 1
        except ValueError:
            raise ValueError(f"{item!r}: the count after ':' must be an integer") from None
        if not 1 <= count <= MAX_SIM_GPUS:
            raise ValueError(f"{item!r}: the count must be between 1 and {MAX_SIM_GPUS}")
        try:
            key = catalog.model(model).key
        except KeyError as exc:
            raise ValueError(str(exc.args[0])) from None
        gpus.extend([key] * count)
    if len(gpus) > MAX_SIM_GPUS:
        raise ValueError(f"{len(gpus)} GPUs in all; a simulated node holds at most {MAX_SIM_GPUS}")
    return tuple(gpus)


class NvmlSettings(BaseSettings):
    """Which NVML library the hardware boundary talks to."""

    # An empty variable (`MIGDRA_SIM_STATE=`) means unset, as for most tools; an empty flag is refused.
    model_config = SettingsConfigDict(env_prefix="MIGDRA_", extra="forbid", frozen=True, env_ignore_empty=True)

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

    @field_validator("sim_state", mode="before")
    @classmethod
    def _not_empty(cls, value: object) -> object:
        if isinstance(value, (str, Path)) and not str(value).strip():  # Path("") is ".": the current directory
            raise ValueError("is empty; give the path of a state file, e.g. ./node.json")
        return value

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
        if self.nvml == "real":
            # A simulator flag beside real NVML is a mistake either way round; ignoring one would run
            # on the wrong hardware without a word.
            simulator_flags = [
                flag
                for flag, given in (
                    ("--sim-gpus (MIGDRA_SIM_GPUS)", bool(self.sim_gpus)),
                    ("--sim-state (MIGDRA_SIM_STATE)", self.sim_state is not None),
                )
                if given
            ]
            if simulator_flags:
                raise ValueError(
                    f"--nvml real (MIGDRA_NVML) cannot be combined with {' or '.join(simulator_flags)}: "
                    "drop --nvml real to use the simulator, or the simulator flags to use the GPUs"
                )
            if "sim_mig_enabled" in self.model_fields_set:
                flag = "--sim-mig-enabled" if self.sim_mig_enabled else "--sim-mig-disabled"
                raise ValueError(
                    f"{flag} (MIGDRA_SIM_MIG_ENABLED) applies only to the simulator: add --sim-gpus MODEL:N "
                    "or --sim-state PATH, or drop it"
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
    """The device model configuration from a YAML file (camelCase or snake_case keys) plus flags.

    Every problem is one :class:`ConfigurationError` naming the file (or the flag) and the key: a file
    that cannot be read, is not UTF-8 YAML, holds more than one document or a key twice, is not a
    mapping, or has unknown keys or wrong types.
    """
    raw: dict[str, object] = {}
    if path is not None:
        raw = _read_device_model_file(path)
    if driver_name is not None:
        raw["driver_name"] = driver_name
    for value in exclude_gpus:
        problem = gpu_reference_problem(value)
        if problem is not None:
            raise ConfigurationError(f"--exclude-gpu: {problem}")
    if exclude_gpus:
        from_file = raw.get("exclude_gpus") or ()
        if isinstance(from_file, (list, tuple)):  # else the model reports the file's wrong type
            raw["exclude_gpus"] = (*from_file, *exclude_gpus)
    try:
        return DeviceModelConfig.model_validate(raw)
    except ValidationError as exc:
        where = f" in {path}" if path else ""
        problems = "; ".join(_device_model_problem(error) for error in exc.errors())
        raise ConfigurationError(f"invalid device model configuration{where}: {problems}") from exc


def check_excluded_gpus_exist(
    config: DeviceModelConfig, gpus: list[tuple[str, str]], *, from_flags: tuple[str, ...], path: Path | None
) -> None:
    """Refuse exclusions that name no GPU of this node (``gpus``: (UUID, PCI bus id) in NVML order): a
    typo would otherwise publish the very GPU the administrator meant to keep out."""
    unmatched = config.unmatched_exclusions(gpus)
    if not unmatched:
        return
    named = ", ".join(
        f"--exclude-gpu {value}" if value in from_flags else f"excludeGpus in {path}: {value}" for value in unmatched
    )
    present = ", ".join(f"{index}: {uuid} ({bus})" for index, (uuid, bus) in enumerate(gpus)) or "none"
    raise ConfigurationError(f"{named} names no GPU of this node; its GPUs: {present}")


# A device model configuration is a few lines; anything this large is some other file.
_MAX_DEVICE_MODEL_FILE_BYTES = 1024 * 1024


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML keeps the last of two equal keys without a word; a configuration must not."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[object, object]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} appears twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read_device_model_file(path: Path) -> dict[str, object]:
    what = f"device model configuration {path}"
    try:
        # A device (/dev/zero) would be read forever, a FIFO opened without O_NONBLOCK waits for a writer.
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise ConfigurationError(f"{what} is not a regular file")
            data = handle.read(_MAX_DEVICE_MODEL_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigurationError(f"cannot read {what}: {exc.strerror or exc}") from exc
    if len(data) > _MAX_DEVICE_MODEL_FILE_BYTES:
        raise ConfigurationError(f"{what} is larger than {_MAX_DEVICE_MODEL_FILE_BYTES} bytes; it is not one")
    try:
        loaded = yaml.load(data.decode("utf-8"), Loader=_UniqueKeyLoader)  # a SafeLoader: no arbitrary objects
    except UnicodeDecodeError as exc:
        raise ConfigurationError(
            f"{what} is not valid YAML (not UTF-8 text: byte {exc.start} is {exc.object[exc.start]:#04x})"
        ) from exc
    except yaml.YAMLError as exc:
        raise ConfigurationError(f"{what} is not valid YAML ({describe_yaml_error(exc)})") from exc
    if loaded is None:  # empty, or only comments: nothing configured
        return {}
    if not isinstance(loaded, dict):
        kind = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}
        raise ConfigurationError(
            f"{what}: expected a mapping of driverName, profiles, excludeGpus at the top level, "
            f"not {kind.get(type(loaded), type(loaded).__name__)}"
        )
    raw: dict[str, object] = {}
    spelled: dict[str, str] = {}
    for key, value in loaded.items():
        name = _snake(str(key))
        if name in raw:
            raise ConfigurationError(f"{what}: {spelled[name]!r} and {key!r} are the same key ({_camel(name)})")
        raw[name], spelled[name] = value, str(key)
    return raw


def _device_model_problem(error: ErrorDetails) -> str:
    """One pydantic error of the device model configuration, with the key as it is written in YAML."""
    location = ".".join(str(part) if part == "*" else _camel(str(part)) for part in error["loc"])
    message = _message(error["msg"])
    if error["type"] == "extra_forbidden":
        parent = error["loc"][:-1]
        fields = ProfileFilter.model_fields if parent[:1] == ("profiles",) else DeviceModelConfig.model_fields
        message = f"unknown key; valid keys: {', '.join(_camel(name) for name in fields)}"
    elif error["type"] in {"tuple_type", "list_type"}:
        message = "expected a list"
    elif error["type"] in {"dict_type", "mapping_type", "model_type"}:
        message = "expected a mapping"
        if error["type"] == "model_type" and error["loc"][:1] == ("profiles",):
            message += f" of {', '.join(ProfileFilter.model_fields)}"
    return f"{location}: {message}" if location else message


def describe_settings_error(exc: ValidationError, model: object, flag_fields: Collection[str] | None = None) -> str:
    """One line for a settings model's validation errors, naming each field as a user sets it.

    pydantic's own text is several lines with internal field names and a documentation URL; a user
    typed a flag (``--sim-gpus``) or a variable (``MIGDRA_SIM_GPUS``), so those are what we name.
    ``flag_fields``: the fields a command has flags for (None: all); the others are variables only.
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
        variable = f"{prefix}{field.upper()}"
        has_flag = flag_fields is None or field in flag_fields
        flag = f"--{field.replace('_', '-')}" if has_flag else variable
        named = f"{flag} ({variable})" if has_flag else variable
        if error["type"] == "missing":  # the input is the whole settings dict: nothing to quote
            problems.append(f"{flag} is required" + (f" (or set {variable})" if has_flag else ""))
        elif error["type"] == "bool_parsing":
            expected = "expected true or false (or 1/0, yes/no, on/off)"
            problems.append(f"{named}: {expected}, got {error['input']!r}")
        else:
            problems.append(f"{named}: {message} (got {error['input']!r})")
    return "; ".join(problems)


def _message(text: str) -> str:
    """pydantic prefixes messages from our validators with 'Value error, '; the user needs only ours."""
    return text.removeprefix("Value error, ").removeprefix("Assertion failed, ")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
