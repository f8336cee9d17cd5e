"""NVML settings: flags and MIGDRA_* variables, with errors that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.errors import ConfigurationError
from dra_driver.nvml.settings import build_nvml_settings, parse_sim_gpus
from kubeletplugin.settings import PluginSettings, PrepareSettings


def test_sim_gpus_expand_counts_and_normalise_aliases() -> None:
    assert parse_sim_gpus("H100:2, A30") == ("H100-SXM5-80GB", "H100-SXM5-80GB", "A30")
    assert parse_sim_gpus("") == ()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("V100:2", "unknown GPU model 'V100'"),
        ("H100:x", "must be an integer"),
        ("H100:0", "between 1 and 64"),
        ("H100-SXM5-80G", "did you mean H100-SXM5-80GB"),
        ("A100", "ambiguous GPU model 'A100': A100-SXM4-40GB or A100-SXM4-80GB"),
        ("H100,,A30", "entry 2 is empty"),
        ("H100:64,A30", "65 GPUs in all"),
    ],
)
def test_bad_sim_gpus_are_rejected_with_the_reason(spec: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as info:
        build_nvml_settings(nvml="simulated", sim_state=Path("/tmp/x.json"), sim_gpus=spec)
    assert "--sim-gpus (MIGDRA_SIM_GPUS)" in str(info.value)


def test_environment_selects_the_simulator(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MIGDRA_NVML", "simulated")
    monkeypatch.setenv("MIGDRA_SIM_STATE", str(tmp_path / "state.json"))
    monkeypatch.setenv("MIGDRA_SIM_GPUS", "A100-SXM4-40GB:2")
    monkeypatch.setenv("MIGDRA_SIM_MIG_ENABLED", "false")
    settings = build_nvml_settings()
    assert settings.nvml == "simulated"
    assert settings.sim_state == tmp_path / "state.json"
    assert settings.sim_gpus == ("A100-SXM4-40GB", "A100-SXM4-40GB")
    assert settings.sim_mig_enabled is False


def test_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MIGDRA_NVML", "simulated")
    monkeypatch.setenv("MIGDRA_SIM_STATE", str(tmp_path / "env.json"))
    settings = build_nvml_settings(sim_state=tmp_path / "flag.json", sim_gpus="B200")
    assert settings.sim_state == tmp_path / "flag.json"
    assert settings.sim_gpus == ("B200",)


def test_simulator_needs_gpus_or_a_state_file(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MIGDRA_SIM_STATE", "MIGDRA_SIM_GPUS", "MIGDRA_NVML"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigurationError, match=r"--sim-gpus .* or --sim-state"):
        build_nvml_settings(nvml="simulated")
    throw_away = build_nvml_settings(sim_gpus="H100:8")
    assert throw_away.nvml == "simulated"
    assert throw_away.sim_state is None
    assert build_nvml_settings(sim_state=Path("/tmp/node.json")).nvml == "simulated"


@pytest.mark.parametrize(
    ("given", "environment", "message"),
    [
        ({"nvml": "real", "sim_gpus": "H100"}, {}, r"--nvml real \(MIGDRA_NVML\) cannot be combined with --sim-gpus"),
        ({"sim_state": Path("/tmp/node.json")}, {"MIGDRA_NVML": "real"}, "cannot be combined with --sim-state"),
        (
            {"sim_mig_enabled": False},
            {},
            r"--sim-mig-disabled \(MIGDRA_SIM_MIG_ENABLED\) applies only to the simulator",
        ),
        ({}, {"MIGDRA_SIM_MIG_ENABLED": "true"}, "--sim-mig-enabled .* applies only to the simulator"),
    ],
    ids=["flag-and-flag", "variable-and-flag", "mig-mode-flag", "mig-mode-variable"],
)
def test_real_nvml_refuses_simulator_settings(
    given: dict[str, object], environment: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A simulator setting beside real NVML would be ignored without a word: it is a usage error."""
    for name in ("MIGDRA_SIM_STATE", "MIGDRA_SIM_GPUS", "MIGDRA_NVML", "MIGDRA_SIM_MIG_ENABLED"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError, match=message):
        build_nvml_settings(**given)


def test_a_bad_boolean_says_what_would_be_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIGDRA_SIM_MIG_ENABLED", "maybe")
    with pytest.raises(ConfigurationError, match=r"MIGDRA_SIM_MIG_ENABLED\): expected true or false .*'maybe'"):
        build_nvml_settings(sim_gpus="H100")


def test_real_nvml_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MIGDRA_NVML", raising=False)
    assert build_nvml_settings().nvml == "real"


def test_an_empty_variable_is_unset_and_an_empty_path_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MIGDRA_NVML", "MIGDRA_SIM_GPUS", "MIGDRA_SIM_MIG_ENABLED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MIGDRA_SIM_STATE", "")
    assert build_nvml_settings().sim_state is None  # not the current directory
    with pytest.raises(ConfigurationError, match=r"--sim-state \(MIGDRA_SIM_STATE\): is empty"):
        build_nvml_settings(sim_state="")


def test_the_api_timeout_is_the_whole_node_processs(monkeypatch: pytest.MonkeyPatch) -> None:
    """MIGDRA_API_TIMEOUT sets the one API client's timeout in both run modes (it is a setting of the
    node process, not of prepare alone: --publish-only honours it too)."""
    monkeypatch.setenv("MIGDRA_API_TIMEOUT", "2.5")
    assert PluginSettings(node_name="node-1").api_timeout == 2.5
    assert "api_timeout" not in PrepareSettings.model_fields
