"""The device model configuration file (``--device-config``): read, checked and merged with its flags.

Owns turning a YAML file and the ``--driver-name`` / ``--exclude-gpu`` flags into one
:class:`~dra_driver.devicemodel.config.DeviceModelConfig` (the model itself is the device model's),
with every problem one :class:`~dra_driver.errors.ConfigurationError` naming the file or flag and the
key.  Used by ``migdra kubelet-plugin`` and ``migdra slices``.  The processes' settings (flags and
``MIGDRA_*`` variables) are not here: each process's groups are in its ``settings`` module
(``kubeletplugin.settings``, :mod:`dra_driver.controller.settings`, :mod:`dra_driver.nvml.settings`).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from dra_driver.devicemodel.config import DeviceModelConfig, ProfileFilter, gpu_reference_problem
from dra_driver.errors import ConfigurationError, describe_yaml_error, validator_message


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
            f"{what}: expected a mapping of driverName, profiles, excludeGpus, sharedDevices at the top level, "
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
    message = validator_message(error["msg"])
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


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
