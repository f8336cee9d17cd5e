"""Opaque MigDeviceConfig: strict parsing that names the field, and class < claim precedence (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from kubeletplugin.prepare.claims import DriverConfigEntry
from kubeletplugin.prepare.config import MigDeviceConfig, ParsedConfig, compute_device_config, parse_driver_configs
from kubeletplugin.prepare.errors import DeviceConfigError

DRIVER = "gpu.migdra.io"
VERSION = f"{DRIVER}/v1alpha1"


def entry(
    parameters: Any, index: int = 1, source: str = "FromClaim", requests: tuple[str, ...] = ()
) -> DriverConfigEntry:
    return DriverConfigEntry(index=index, source=source, requests=requests, parameters=parameters)


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        pytest.param(
            {"apiVersion": VERSION, "kind": "MigDeviceConfig", "sharing": {"strategy": "MPS"}},
            "config[1].opaque.parameters.sharing: extra fields not permitted",
            id="unknown-field",
        ),
        pytest.param(
            {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "MigDeviceConfig"},
            "config[1].opaque.parameters.apiVersion: unsupported 'resource.nvidia.com/v1beta1'",
            id="foreign-api-version",
        ),
        pytest.param(
            {"apiVersion": f"{DRIVER}/v1", "kind": "MigDeviceConfig"},
            "config[1].opaque.parameters.apiVersion: unsupported 'gpu.migdra.io/v1'",
            id="unknown-version",
        ),
        pytest.param({"kind": "MigDeviceConfig"}, "config[1].opaque.parameters.apiVersion: required", id="no-version"),
        pytest.param(
            {"apiVersion": VERSION, "kind": "GpuConfig"},
            "config[1].opaque.parameters.kind: unsupported 'GpuConfig'",
            id="unknown-kind",
        ),
        pytest.param(
            {"apiVersion": VERSION, "kind": "MigDeviceConfig", "env": {"CUDA_VISIBLE_DEVICES": "0"}},
            "config[1].opaque.parameters.env.CUDA_VISIBLE_DEVICES: reserved",
            id="reserved-cuda-visible-devices",
        ),
        pytest.param(
            {"apiVersion": VERSION, "kind": "MigDeviceConfig", "env": {"NVIDIA_VISIBLE_DEVICES": "all"}},
            "config[1].opaque.parameters.env.NVIDIA_VISIBLE_DEVICES: reserved",
            id="reserved-nvidia-visible-devices",
        ),
        pytest.param(
            {"apiVersion": VERSION, "kind": "MigDeviceConfig", "env": {"MIGDRA_MIG_UUID": "x"}},
            "config[1].opaque.parameters.env.MIGDRA_MIG_UUID: reserved",
            id="reserved-migdra-prefix",
        ),
        pytest.param(
            {"apiVersion": VERSION, "kind": "MigDeviceConfig", "env": {"1BAD-NAME": "x"}},
            "config[1].opaque.parameters.env.1BAD-NAME: not a valid environment variable name",
            id="invalid-env-name",
        ),
        pytest.param(
            {"apiVersion": VERSION, "kind": "MigDeviceConfig", "env": {"THREADS": 4}},
            "config[1].opaque.parameters.env.THREADS: Input should be a valid string",
            id="non-string-value",
        ),
        pytest.param("not an object", "config[1].opaque.parameters: must be an object", id="not-an-object"),
    ],
)
def test_malformed_config_is_refused_naming_the_field(parameters: Any, message: str) -> None:
    with pytest.raises(DeviceConfigError) as raised:
        parse_driver_configs([entry(parameters)], DRIVER)
    assert raised.value.message.startswith(message), raised.value.message


def test_api_version_follows_the_configured_driver_name() -> None:
    parsed = parse_driver_configs(
        [entry({"apiVersion": "gpu.example.org/v1alpha1", "kind": "MigDeviceConfig"})], "gpu.example.org"
    )
    assert parsed[0].config == MigDeviceConfig(apiVersion="gpu.example.org/v1alpha1", kind="MigDeviceConfig")


def parsed(index: int, source: str, env: dict[str, str], requests: tuple[str, ...] = ()) -> ParsedConfig:
    config = MigDeviceConfig(apiVersion=VERSION, kind="MigDeviceConfig", env=env)
    return ParsedConfig(index=index, source=source, requests=requests, config=config)


@pytest.mark.parametrize(
    ("configs", "requests", "expected"),
    [
        pytest.param([], ("gpu",), {}, id="none"),
        pytest.param(
            [parsed(1, "FromClaim", {"A": "claim"}), parsed(0, "FromClass", {"A": "class", "B": "class"})],
            ("gpu",),
            {"A": "claim", "B": "class"},
            id="claim-overrides-class-whatever-the-order",
        ),
        pytest.param(
            [parsed(0, "FromClaim", {"A": "first"}), parsed(1, "FromClaim", {"A": "second"})],
            ("gpu",),
            {"A": "second"},
            id="later-entry-wins",
        ),
        pytest.param(
            [parsed(0, "FromClaim", {"A": "all"}), parsed(1, "FromClaim", {"A": "other"}, ("other",))],
            ("gpu",),
            {"A": "all"},
            id="request-scoped-entry-skips-other-requests",
        ),
        pytest.param(
            [parsed(0, "FromClaim", {"A": "all"}), parsed(1, "FromClaim", {"A": "mine"}, ("gpu",))],
            ("gpu/big",),
            {"A": "mine"},
            id="request-name-covers-its-subrequests",
        ),
        pytest.param(
            [parsed(0, "FromClaim", {"A": "sub"}, ("gpu/small",))],
            ("gpu/big",),
            {},
            id="other-subrequest-does-not-apply",
        ),
        pytest.param(
            [parsed(0, "FromClass", {"A": "class"}, ("a",)), parsed(1, "FromClaim", {"B": "claim"}, ("b",))],
            ("a", "b"),
            {"A": "class", "B": "claim"},
            id="device-serving-two-requests-gets-both",
        ),
    ],
)
def test_effective_config_precedence(
    configs: list[ParsedConfig], requests: tuple[str, ...], expected: dict[str, str]
) -> None:
    assert compute_device_config(configs, requests) == expected


def test_effective_config_is_pure() -> None:
    configs = [parsed(0, "FromClass", {"A": "1"}), parsed(1, "FromClaim", {"B": "2"})]
    first = compute_device_config(configs, ("gpu",))
    first["C"] = "mutated by the caller"
    assert compute_device_config(configs, ("gpu",)) == {"A": "1", "B": "2"}
    assert configs[0].config.env == {"A": "1"}
