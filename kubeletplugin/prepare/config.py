"""The opaque device configuration of this driver: schema, strict parsing and precedence.

A claim or DeviceClass passes parameters to migdra in ``spec.devices.config[].opaque`` with
``driver: <driver name>``; the allocation copies them to ``status.allocation.devices.config`` with a
``source`` (``FromClass`` / ``FromClaim``).  Schema (``apiVersion: <driver name>/v1alpha1``)::

    apiVersion: gpu.migdra.io/v1alpha1
    kind: MigDeviceConfig
    env:                       # extra environment for the containers that use the device
      NCCL_DEBUG: INFO

Parsing is strict: an unknown field, kind or apiVersion, a non-string value, an invalid variable name
or one migdra owns (``NVIDIA_VISIBLE_DEVICES``, ``CUDA_VISIBLE_DEVICES``, ``MIGDRA_*``) is a
per-claim error naming the field, e.g. ``config[1].opaque.parameters.sharing: extra fields not
permitted``; every problem of every entry is named at once, as the chart's admission policy names
them (``helm/migdra/templates/configpolicy.yaml``).  ``MigDeviceConfig`` applies to every device of
this driver, MIG or whole GPU.

Precedence (:func:`compute_device_config`): class configs, then claim configs; within each, later
entries win; an entry with ``requests`` applies only to results of those requests (a request name
also covers its ``<request>/<subrequest>`` results).  ``env`` maps are merged key by key.

Everything here is pure and side-effect free: kubelet may call prepare repeatedly, and the same
allocation must always yield the same configuration.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from kubeletplugin.prepare.claims import DriverConfigEntry
from kubeletplugin.prepare.errors import DeviceConfigError

CONFIG_VERSION = "v1alpha1"
MIG_DEVICE_CONFIG_KIND = "MigDeviceConfig"
KNOWN_KINDS = (MIG_DEVICE_CONFIG_KIND,)
RESERVED_ENV_NAMES = frozenset({"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"})
RESERVED_ENV_PREFIX = "MIGDRA_"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SOURCE_ORDER = {"FromClass": 0, "FromClaim": 1}


def config_api_version(driver_name: str) -> str:
    """``<driver name>/v1alpha1``: the config's group is the driver's own domain."""
    return f"{driver_name}/{CONFIG_VERSION}"


def _check_env_name(name: str) -> str:
    if not _ENV_NAME.match(name):
        raise ValueError("not a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
    if name in RESERVED_ENV_NAMES or name.startswith(RESERVED_ENV_PREFIX):
        raise ValueError(
            f"reserved: migdra sets it (devices come through CDI; {sorted(RESERVED_ENV_NAMES)} and "
            f"{RESERVED_ENV_PREFIX}* cannot be overridden)"
        )
    return name


EnvName = Annotated[str, AfterValidator(_check_env_name)]


class MigDeviceConfig(BaseModel):
    """``kind: MigDeviceConfig``: what a claim may ask of a migdra device."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, validate_by_name=True, validate_by_alias=True)

    api_version: str = Field(alias="apiVersion")
    kind: str
    env: dict[EnvName, str] = Field(
        default_factory=dict, description="extra container environment, merged into the device's CDI edits"
    )


@dataclass(frozen=True, slots=True)
class ParsedConfig:
    index: int
    source: str
    requests: tuple[str, ...]
    config: MigDeviceConfig


def parse_driver_configs(entries: Sequence[DriverConfigEntry], driver_name: str) -> tuple[ParsedConfig, ...]:
    """Every config entry of this driver, strictly parsed; any problem raises one
    :class:`DeviceConfigError` naming every problem of every entry (field path and reason, ``; ``
    between them), as the chart's admission policy names them."""
    problems = [problem for entry in entries for problem in compute_config_problems(entry, driver_name)]
    if problems:
        raise DeviceConfigError("; ".join(problems))
    return tuple(
        ParsedConfig(entry.index, entry.source, entry.requests, parse_opaque_parameters(entry, driver_name))
        for entry in entries
    )


def parse_opaque_parameters(entry: DriverConfigEntry, driver_name: str) -> MigDeviceConfig:
    """One entry's parameters; its problems (all of them) raise one :class:`DeviceConfigError`."""
    problems = compute_config_problems(entry, driver_name)
    if problems:
        raise DeviceConfigError("; ".join(problems))
    return MigDeviceConfig.model_validate(dict(entry.parameters))


def compute_config_problems(entry: DriverConfigEntry, driver_name: str) -> list[str]:
    """Every problem of one entry's parameters, ``config[<index>].opaque.parameters<field>: <reason>``;
    pure.  Empty when the parameters are a valid configuration."""
    path = f"config[{entry.index}].opaque.parameters"
    parameters = entry.parameters
    if not isinstance(parameters, Mapping):
        return [f"{path}: must be an object with apiVersion and kind"]
    problems: list[str] = []
    expected_version = config_api_version(driver_name)
    api_version = parameters.get("apiVersion")
    if api_version is None:
        problems.append(f"{path}.apiVersion: required (use {expected_version})")
    elif api_version != expected_version:
        problems.append(f"{path}.apiVersion: unsupported '{api_version}'; this driver reads {expected_version}")
    kind = parameters.get("kind")
    if kind is None:
        problems.append(f"{path}.kind: required (known kinds: {', '.join(KNOWN_KINDS)})")
    elif kind not in KNOWN_KINDS:
        problems.append(f"{path}.kind: unsupported '{kind}'; known kinds: {', '.join(KNOWN_KINDS)}")
    try:
        MigDeviceConfig.model_validate(dict(parameters))
    except ValidationError as e:
        problems += [
            f"{path}{_field_path(error['loc'])}: {_reason(error)}"
            for error in e.errors()
            if error["loc"][:1] not in (("apiVersion",), ("kind",))  # said above, in the API server's words
        ]
    return problems


def _field_path(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if item == "[key]":
            continue  # pydantic's marker for "the key itself was invalid": the key is already named
        parts.append(f"[{item}]" if isinstance(item, int) else f".{item}")
    return "".join(parts)


def _reason(error: Mapping[str, Any]) -> str:
    if error["type"] == "extra_forbidden":
        return "extra fields not permitted"
    message = str(error["msg"])
    return message.removeprefix("Value error, ")


def compute_device_config(configs: Sequence[ParsedConfig], request_names: Sequence[str]) -> dict[str, str]:
    """The effective environment of a device serving ``request_names``; pure.

    Class configs first, then claim configs, each in allocation order; an entry restricted to
    ``requests`` applies if it names one of the device's requests (or its parent request).
    """
    env: dict[str, str] = {}
    for parsed in sorted(configs, key=lambda c: (_SOURCE_ORDER.get(c.source, 1), c.index)):
        if _applies(parsed.requests, request_names):
            env.update(parsed.config.env)
    return env


def _applies(config_requests: Sequence[str], request_names: Sequence[str]) -> bool:
    if not config_requests:
        return True
    wanted = set(config_requests)
    return any(name in wanted or name.split("/", 1)[0] in wanted for name in request_names)
