"""`migdra gpus` as a user runs it: the installed console script, in a subprocess, on the simulator."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dra_driver.mig import Placement, load_catalog
from tests.conftest import OpenSimulatedNode

MIGDRA = str(Path(sys.executable).with_name("migdra"))


def run_migdra(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MIGDRA, *args], env={**os.environ, **env}, capture_output=True, text=True, check=False)


def test_json_lists_every_profile_and_frees_what_an_instance_does_not_cover(
    tmp_path: Path, simulated_node: OpenSimulatedNode
) -> None:
    state = tmp_path / "nvml-sim.json"
    env = {"MIGDRA_NVML": "simulated", "MIGDRA_SIM_STATE": str(state), "MIGDRA_SIM_GPUS": "H100-SXM5-80GB:2"}
    first = run_migdra("gpus", "-o", "json", env=env)
    assert first.returncode == 0, first.stderr
    data = json.loads(first.stdout)
    h100 = load_catalog().model("H100-SXM5-80GB")
    assert [g["model"] for g in data["gpus"]] == ["H100-SXM5-80GB"] * 2
    profiles = {p["name"]: p for p in data["gpus"][0]["profiles"]}
    assert set(profiles) == {p.name for p in h100.gpu_instance_profiles}
    assert profiles["1g.20gb"]["multiprocessors"] == 26
    assert profiles["3g.40gb"]["freePlacements"] == [{"start": 0, "size": 4}, {"start": 4, "size": 4}]

    with simulated_node("H100-SXM5-80GB:2", state=state) as nvml:  # the same hardware, another process
        gpu0 = nvml.list_gpus()[0].uuid
        nvml.create_gpu_instance(gpu0, h100.profile_by_name("1g.10gb").profile_id, Placement(start=5, size=1))

    second = json.loads(run_migdra("gpus", "-o", "json", env=env).stdout)
    gpu0_profiles = {p["name"]: p for p in second["gpus"][0]["profiles"]}
    assert gpu0_profiles["3g.40gb"]["freePlacements"] == [{"start": 0, "size": 4}]
    assert [p["start"] for p in gpu0_profiles["1g.10gb"]["freePlacements"]] == [0, 1, 2, 3, 4, 6]
    assert second["gpus"][0]["gpuInstances"][0]["placement"] == {"start": 5, "size": 1}
    untouched = {p["name"]: p for p in second["gpus"][1]["profiles"]}
    assert len(untouched["1g.10gb"]["freePlacements"]) == 7


def test_table_output_shows_profiles_placements_and_uncertainty(tmp_path: Path) -> None:
    result = run_migdra(
        "gpus", "--nvml", "simulated", "--sim-state", str(tmp_path / "s.json"), "--sim-gpus", "B200,A30", env={}
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "GPU 0  NVIDIA B200  [B200]" in out
    assert "GPU 1  NVIDIA A30  [A30]" in out
    assert "3g.90gb†" in out  # estimated numbers are flagged
    assert "0:4* 4:4*" in out
    assert "MIG enabled" in out


def test_mig_disabled_gpu_has_no_free_placements(tmp_path: Path) -> None:
    result = run_migdra(
        "gpus",
        "--free-only",
        "--nvml",
        "simulated",
        "--sim-state",
        str(tmp_path / "s.json"),
        "--sim-gpus",
        "A100-SXM4-40GB",
        "--sim-mig-disabled",
        env={},
    )
    assert result.returncode == 0, result.stderr
    assert "MIG disabled" in result.stdout
    assert "*" not in result.stdout


def test_bad_model_is_one_clear_error_line(tmp_path: Path) -> None:
    result = run_migdra(
        "gpus", "--nvml", "simulated", "--sim-state", str(tmp_path / "s.json"), "--sim-gpus", "V100:2", env={}
    )
    assert result.returncode == 2  # a usage error: the flag's value cannot be used
    assert result.stderr.startswith("migdra: error: invalid NVML settings")
    assert "unknown GPU model 'V100'" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "s.json").exists()


def test_real_nvml_without_a_driver_fails_cleanly(tmp_path: Path) -> None:
    result = run_migdra("gpus", "--nvml", "real", env={})
    assert result.returncode == 1
    assert "migdra: error: nvmlInit" in result.stderr
    assert "Traceback" not in result.stderr


def test_slices_for_simulated_gpus_need_no_state_file_and_no_cluster(tmp_path: Path) -> None:
    result = subprocess.run(
        [MIGDRA, "slices", "--sim-gpus", "H100-SXM5-80GB:8", "--node-name", "n1", "-o", "json"],
        env={k: v for k, v in os.environ.items() if not k.startswith("MIGDRA_")},
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    items = json.loads(result.stdout)["items"]
    # per H100: 25 exclusive MIG devices (shared GPU-instance devices only with sharedDevices: true)
    assert sum(len(i["spec"].get("devices", [])) for i in items) == 8 * 25
    assert {i["spec"]["pool"]["name"] for i in items} == {"n1"}
    assert list(tmp_path.iterdir()) == []  # nothing left behind


def test_slices_with_shared_devices_in_the_config_add_seven_per_h100(tmp_path: Path) -> None:
    """``--config`` with ``sharedDevices: true``: the 7 shared devices of each H100 (2g x3, 3g x2, 4g, 7g)."""
    config = tmp_path / "config.yaml"
    config.write_text("sharedDevices: true\n")
    result = subprocess.run(
        [MIGDRA, "slices", "--sim-gpus", "H100-SXM5-80GB:8", "--config", str(config), "-o", "json"],
        env={k: v for k, v in os.environ.items() if not k.startswith("MIGDRA_")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    devices = [d for i in json.loads(result.stdout)["items"] for d in i["spec"].get("devices", [])]
    assert len(devices) == 8 * (25 + 7)
    assert sum(d.get("allowMultipleAllocations") is True for d in devices) == 8 * 7


def test_a_state_file_of_other_gpus_is_one_clear_error_line(tmp_path: Path) -> None:
    state = str(tmp_path / "s.json")
    assert run_migdra("gpus", "--sim-state", state, "--sim-gpus", "A30", env={}).returncode == 0
    before = Path(state).read_bytes()
    result = run_migdra("gpus", "--sim-state", state, "--sim-gpus", "H100", env={})
    assert result.returncode == 2  # the flags contradict the file the user named: a usage error
    assert result.stderr.startswith("migdra: error: --sim-gpus (MIGDRA_SIM_GPUS) asks for ['H100-SXM5-80GB']")
    assert f"{state} holds ['A30']" in result.stderr
    assert "Traceback" not in result.stderr
    assert Path(state).read_bytes() == before  # refused, never rewritten


def test_slices_builds_and_renders_with_the_cyclic_garbage_collector_paused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The collector's full collections made `migdra slices` worse than linear in GPUs (scale_bench)."""
    from click.testing import CliRunner

    from dra_driver.cli import slices_view
    from dra_driver.cli.main import cli

    seen: list[bool] = []
    real_render = slices_view.render

    def render(*args: Any, **kwargs: Any) -> str:
        seen.append(gc.isenabled())
        return real_render(*args, **kwargs)

    monkeypatch.setattr(slices_view, "render", render)
    for name in [n for n in os.environ if n.startswith("MIGDRA_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    assert gc.isenabled()
    result = CliRunner().invoke(cli, ["slices", "--sim-gpus", "H100-SXM5-80GB:2", "--node-name", "n1", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert seen == [False]
    assert gc.isenabled()  # restored
    assert len(json.loads(result.output)["items"]) >= 1
