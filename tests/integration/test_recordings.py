"""The simulator answers as real hardware did, and `migdra hw record` writes what `replay` reads back.

The golden test replays every recording committed in ``tests/golden/recordings/`` (what real hardware
answered, read-only) against the simulator configured as that GPU and mode, field by field: a new
recording is checked with no code change.
"""

from __future__ import annotations

import copy
import ctypes
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pynvml
import pytest

from dra_driver.mig.catalog import Placement, load_catalog
from dra_driver.nvml.recording import Recording, record_node
from dra_driver.nvml.sim.replay import compare_with_simulator
from tests.conftest import Boot, OpenSimulatedNode

REPO = Path(__file__).resolve().parents[2]
RECORDINGS = REPO / "tests" / "golden" / "recordings"
H200_DISABLED = RECORDINGS / "h200-sxm-580.159.04-mig-disabled.json"


def _recording_files() -> list[Path]:
    return sorted(RECORDINGS.glob("*.json"))


@pytest.mark.parametrize("path", _recording_files(), ids=lambda p: p.name)
def test_the_simulator_answers_every_recording_as_the_hardware_did(path: Path) -> None:
    recording = json.loads(path.read_text())
    assert compare_with_simulator(recording, path.name) == []


def test_the_committed_recordings_are_found() -> None:
    """Guard against the golden test silently parametrising over nothing."""
    assert H200_DISABLED in _recording_files()


@pytest.fixture
def h200_recording() -> dict[str, Any]:
    recording: dict[str, Any] = json.loads(H200_DISABLED.read_text())
    return recording


@pytest.mark.parametrize(
    ("field", "change", "reported"),
    [
        (("profiles", 0, "remaining"), 6, "nvml.gpus[0].profiles[0].remaining: recorded 6, simulator 7"),
        (("profiles", 2, "info", "memorySizeMB"), 71168, "profiles[2].info.memorySizeMB: recorded 71168"),
        (("profiles", 17, "info", "value"), 3, "profiles[17].info.value: recorded 3, simulator 2"),
        (("memory_total",), 1, "nvml.gpus[0].memory_total: recorded 1"),
        (("max_mig_devices",), 7, "nvml.gpus[0].max_mig_devices: recorded 7, simulator 0"),
        # asked since migdra hw record reads them: absent from the H200 recording, compared once present
        (("brand",), 2, "nvml.gpus[0].brand: recorded 2, simulator 14"),
        (("addressing_mode",), None, "nvml.gpus[0].addressing_mode: recorded None, simulator 0"),
    ],
)
def test_a_changed_recording_is_reported_field_by_field(
    h200_recording: dict[str, Any], field: tuple[Any, ...], change: Any, reported: str
) -> None:
    """The comparison can fail: each altered recorded value is named with its path."""
    altered = copy.deepcopy(h200_recording)
    target = altered["nvml"]["gpus"][0]
    for key in field[:-1]:
        target = target[key]
    target[field[-1]] = change
    problems = compare_with_simulator(altered, "altered")
    assert len(problems) == 1, problems
    assert reported in problems[0]


def test_the_nvidia_smi_tables_of_a_recording_are_checked(h200_recording: dict[str, Any]) -> None:
    altered = copy.deepcopy(h200_recording)
    altered["nvidia_smi_mig_lgip_memory_gib"]["3g.71gb"] = 69.5
    altered["nvidia_smi_mig_lgipp"]["9"] = "{0}:4"
    problems = compare_with_simulator(altered, "altered")
    assert problems == [
        "nvidia_smi_mig_lgip_memory_gib.3g.71gb: recorded 69.5, simulator 69.75",
        "nvidia_smi_mig_lgipp.9: recorded '{0}:4', simulator '{0,4}:4'",
    ]


def test_an_unknown_recording_field_is_reported_not_ignored(h200_recording: dict[str, Any]) -> None:
    altered = {**h200_recording, "nvidia_smi_mig_lcip": "..."}
    assert compare_with_simulator(altered, "altered") == [
        "nvidia_smi_mig_lcip: not compared (no rule for this field); add one to dra_driver.nvml.sim.replay"
    ]


# --- what the H200 recording taught the simulator, asked through pynvml itself ----------------------


def test_with_mig_disabled_capacity_and_instance_listing_answer_as_recorded(boot: Boot) -> None:
    handle = boot(["H200"], mig_enabled=False, driver_version="580.159.04")
    full_counts = {19: 7, 14: 3, 9: 2, 5: 1, 0: 1, 20: 1, 15: 4}
    for profile_id, full in full_counts.items():
        assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, profile_id) == full
        array = (pynvml.c_nvmlGpuInstance_t * 8)()
        count = ctypes.c_uint(99)
        pynvml.nvmlDeviceGetGpuInstances(handle, profile_id, array, ctypes.byref(count))
        assert count.value == 0
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(handle) == 0


def test_profile_indices_the_driver_does_not_know_are_invalid_arguments(boot: Boot) -> None:
    handle = boot(["H200"], mig_enabled=False, driver_version="580.159.04")
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE_GFX, 2)
    for unsupported in (5, 6, 8, 10, 16):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, unsupported, 2)


def test_a_newer_driver_knows_the_3_slice_gfx_index(boot: Boot) -> None:
    """Driver 615 (pynvml 13.615's header) knows index 17: the H200 lacks it, so NOT_SUPPORTED."""
    handle = boot(["H200"], mig_enabled=False, driver_version="615.10")
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE_GFX, 2)


def test_h200_memory_sizes_are_the_recorded_ones(boot: Boot) -> None:
    handle = boot(["H200"], mig_enabled=False, driver_version="580.159.04")
    sizes = {
        int(info.id): int(info.memorySizeMB)
        for index in (0, 1, 2, 3, 4, 7, 9)
        for info in [pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index, 2)]
    }
    assert sizes == {19: 16384, 20: 16384, 15: 33280, 14: 33280, 9: 71424, 5: 71424, 0: 143360}


# --- record -> replay round trip -------------------------------------------------------------------


@pytest.mark.parametrize("model", sorted(load_catalog().gpus))
@pytest.mark.parametrize("mig_enabled", [True, False], ids=["mig-on", "mig-off"])
def test_a_recording_of_the_simulator_replays_equal(
    simulated_node: OpenSimulatedNode, model: str, mig_enabled: bool
) -> None:
    with simulated_node(f"{model}:2", mig_enabled=mig_enabled) as nvml:
        if mig_enabled:  # instances present: the largest profile's neighbour-free placement on GPU 1
            gpu = nvml.list_gpus()[1]
            smallest = min(nvml.gpu_instance_profiles(gpu.uuid), key=lambda p: p.slice_count)
            for placement in smallest.placements[:2]:
                created = nvml.create_gpu_instance(gpu.uuid, smallest.profile_id, placement)
                nvml.create_compute_instance(gpu.uuid, created.gpu_instance_id, 0)
        document = record_node(nvml, latency_repeats=3)
    Recording.model_validate(document)
    assert set(document["latency_us_p50_p99_read_only_calls"]) >= {"GetMigMode", "GetGpuInstanceProfileInfo"}
    instances = document["nvml"]["gpus"][1]["gpu_instances"]
    assert len(instances) == (2 if mig_enabled else 0)
    assert compare_with_simulator(document, f"{model}.json") == []


def test_a_recorded_instance_the_simulator_would_place_differently_is_reported(
    simulated_node: OpenSimulatedNode,
) -> None:
    with simulated_node("H100-SXM5-80GB", mig_enabled=True) as nvml:
        gpu = nvml.list_gpus()[0]
        nvml.create_gpu_instance(gpu.uuid, 19, Placement(start=2, size=1))
        document = record_node(nvml)
    document["nvml"]["gpus"][0]["gpu_instances"][0]["id"] = 13  # a board with the halves swapped
    assert compare_with_simulator(document, "swapped") == ["nvml.gpus[0].gpu_instances[0].id: recorded 13, simulator 9"]


def _migdra(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dra_driver.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def test_hw_record_then_replay_from_the_command_line_changes_nothing(tmp_path: Path) -> None:
    state = tmp_path / "node.json"
    out = tmp_path / "recording.json"
    carve = _migdra("gpus", "--sim-state", str(state), "--sim-gpus", "A100-SXM4-40GB,H100-SXM5-80GB")
    assert carve.returncode == 0, carve.stderr
    before = state.read_bytes()
    recorded = _migdra("hw", "record", "--sim-state", str(state), "--latency-samples", "5", "-o", str(out))
    assert recorded.returncode == 0, recorded.stderr
    assert "recorded 2 GPU(s)" in recorded.stderr
    assert state.read_bytes() == before, "hw record changed the simulated machine"
    names = [gpu["name"] for gpu in json.loads(out.read_text())["nvml"]["gpus"]]
    assert names == ["NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"]
    replayed = _migdra("hw", "replay", str(out))
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == f"{out}: the simulator answers as recorded\n"


def test_hw_replay_exits_1_and_lists_the_disagreements(tmp_path: Path, h200_recording: dict[str, Any]) -> None:
    h200_recording["nvml"]["gpus"][0]["profiles"][1]["remaining"] = 2
    path = tmp_path / "altered.json"
    path.write_text(json.dumps(h200_recording))
    done = _migdra("hw", "replay", str(path))
    assert done.returncode == 1
    assert "nvml.gpus[0].profiles[1].remaining: recorded 2, simulator 3" in done.stdout
    assert done.stderr.strip() == f"migdra: error: the simulator disagrees with {path}"


def test_hw_record_help_says_it_is_read_only() -> None:
    done = _migdra("hw", "record", "--help")
    assert done.returncode == 0
    assert "READ-ONLY" in done.stdout
    assert "NEVER changes the MIG mode" in done.stdout
