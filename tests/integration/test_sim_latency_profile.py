"""A simulator latency profile made of a real GPU's recording (``sim.recorded_latency``,
``MIGDRA_SIM_LATENCY_PROFILE``).

Latency is observed through the simulated library's replaceable ``sleep`` hook: what it is asked to
sleep, never how long anything took.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

from dra_driver.errors import ConfigurationError
from dra_driver.nvml import sim
from dra_driver.nvml.backend import INIT_SYMBOLS, TIMED_CALL_SYMBOLS, Nvml
from dra_driver.nvml.session import open_nvml
from dra_driver.nvml.settings import build_nvml_settings

REPO = Path(__file__).resolve().parents[2]
RECORDINGS = sorted((REPO / "tests/golden/recordings").glob("*.json"))

# A recording's timing part with numbers chosen for the test (distinct, so a mix-up shows).
RECORDING: dict[str, Any] = {
    "latency_us_p50_p99_read_only_calls": {
        name: {"p50_us": 100.0 * (position + 1), "p99_us": 1000.0 * (position + 1)}
        for position, name in enumerate(TIMED_CALL_SYMBOLS)
    },
    "nvmlInit_ms": 9.5,
}


def _p50_us(name: str) -> float:
    value: float = RECORDING["latency_us_p50_p99_read_only_calls"][name]["p50_us"]
    return value


@pytest.fixture
def slept(tmp_path: Path) -> Iterator[list[float]]:
    """A simulated H100 whose library records what it is asked to sleep (the list), initialised."""
    library = sim.install(
        tmp_path / "state.json",
        gpus=["H100-SXM5-80GB"],
        mig_enabled=True,
        latency_profile=sim.recorded_latency(RECORDING),
    )
    asked: list[float] = []
    library.sleep = asked.append
    pynvml.nvmlInit()
    try:
        asked.clear()
        yield asked
    finally:
        pynvml.nvmlShutdown()
        sim.uninstall()


def test_every_timed_call_maps_to_exactly_the_c_calls_it_makes(tmp_path: Path) -> None:
    """The recorder's calls, counted at the C boundary: a call added to time_read_only_calls (a new
    name in future recordings) or a changed call pattern fails here."""
    library = sim.install(tmp_path / "state.json", gpus=["H100-SXM5-80GB"], mig_enabled=False)
    try:
        with Nvml() as nvml:
            gpu = nvml.list_gpus()[0]
            profile_id = nvml.gpu_instance_profiles(gpu.uuid)[0].profile_id
            symbols = [name for name in vars(library) if name.startswith("nvml")]
            before = {symbol: library.faults.calls(symbol) for symbol in symbols}
            timed = nvml.time_read_only_calls(gpu, profile_id, repeats=1)
            made = Counter(
                {s: library.faults.calls(s) - before[s] for s in symbols if library.faults.calls(s) > before[s]}
            )
    finally:
        sim.uninstall()
    assert set(timed) == set(TIMED_CALL_SYMBOLS)
    assert made == Counter(symbol for symbols in TIMED_CALL_SYMBOLS.values() for symbol in symbols)


def test_every_mapped_symbol_is_one_the_simulator_implements(tmp_path: Path) -> None:
    library = sim.install(tmp_path / "state.json", gpus=["H100-SXM5-80GB"])
    sim.uninstall()
    mapped = {symbol for symbols in TIMED_CALL_SYMBOLS.values() for symbol in symbols} | set(INIT_SYMBOLS)
    assert mapped <= {name for name in vars(library) if name.startswith("nvml")}


@pytest.mark.parametrize("recording", RECORDINGS, ids=lambda path: path.name)
def test_every_recording_of_real_hardware_is_a_latency_profile(recording: Path) -> None:
    """Every call name a recording holds is mapped: a recording with a new name fails here."""
    document = json.loads(recording.read_text(encoding="utf-8"))
    if "latency_us_p50_p99_read_only_calls" not in document:
        pytest.skip("recorded without --latency-samples")
    names = set(document["latency_us_p50_p99_read_only_calls"])
    assert names <= set(TIMED_CALL_SYMBOLS)
    latency = sim.recorded_latency(recording)
    assert set(latency) == {s for name in names for s in TIMED_CALL_SYMBOLS[name]} | (
        set(INIT_SYMBOLS) if "nvmlInit_ms" in document else set()
    )


def test_a_call_name_migdra_does_not_know_is_refused() -> None:
    timing = {"latency_us_p50_p99_read_only_calls": {"GetFancyNewThing": {"p50_us": 1.0, "p99_us": 2.0}}}
    with pytest.raises(sim.LatencyProfileError, match=r"unknown timed call.*GetFancyNewThing.*TIMED_CALL_SYMBOLS"):
        sim.recorded_latency(timing)


def test_seconds_per_symbol_for_either_percentile() -> None:
    p50, p99 = sim.recorded_latency(RECORDING), sim.recorded_latency(RECORDING, "p99")
    assert p50["nvmlDeviceGetMigMode"] == pytest.approx(_p50_us("GetMigMode") / 1e6)
    assert p99["nvmlDeviceGetMigMode"] == pytest.approx(10 * _p50_us("GetMigMode") / 1e6)
    # A placements sample was two C calls: each gets half, the pair the recorded time.
    assert p50["nvmlDeviceGetGpuInstancePossiblePlacements_v2"] == pytest.approx(
        _p50_us("GetGpuInstancePossiblePlacements") / 2 / 1e6
    )
    assert p50["nvmlInitWithFlags"] == p99["nvmlInitWithFlags"] == pytest.approx(9.5e-3)


def test_a_simulated_call_sleeps_the_recorded_time(slept: list[float]) -> None:
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert slept == [pytest.approx(_p50_us("GetHandleByIndex") / 1e6)]
    slept.clear()
    pynvml.nvmlDeviceGetMigMode(handle)
    assert slept == [pytest.approx(_p50_us("GetMigMode") / 1e6)]
    uuid = pynvml.nvmlDeviceGetUUID(handle)
    slept.clear()
    Nvml().possible_placements(uuid, 19)  # uncached: handle by UUID (not timed), MIG mode, two placement calls
    half = _p50_us("GetGpuInstancePossiblePlacements") / 2 / 1e6
    assert slept == [pytest.approx(_p50_us("GetMigMode") / 1e6), pytest.approx(half), pytest.approx(half)]


def test_a_call_the_recording_did_not_time_takes_no_latency(slept: list[float]) -> None:
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    slept.clear()
    placement = pynvml.c_nvmlGpuInstancePlacement_t(start=0, size=1)
    pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, 19, pynvml.byref(placement))
    pynvml.nvmlDeviceGetName(handle)
    assert slept == []


def test_explicit_latency_wins_over_the_profile(tmp_path: Path) -> None:
    profile = sim.recorded_latency(RECORDING)
    library = sim.install(
        tmp_path / "state.json",
        gpus=["H100-SXM5-80GB"],
        faults={"latency": {"nvmlDeviceGetMigMode": 0.25}},
        latency_profile=profile,
    )
    sim.uninstall()
    assert library.faults.latency("nvmlDeviceGetMigMode") == 0.25
    assert library.faults.latency("nvmlDeviceGetUUID") == profile["nvmlDeviceGetUUID"]
    everything = sim.install(
        tmp_path / "state.json", faults={"latency": {"*": 0.001}}, latency_profile=profile
    )  # "*" names every symbol: the profile is not used
    sim.uninstall()
    assert everything.faults.latency("nvmlDeviceGetUUID") == 0.001


def test_a_plugin_process_takes_the_profile_from_its_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recording = tmp_path / "h200.json"
    recording.write_text(json.dumps(RECORDING), encoding="utf-8")
    monkeypatch.setenv("MIGDRA_SIM_LATENCY_PROFILE", str(recording))
    monkeypatch.setenv("MIGDRA_SIM_FAULTS", '{"latency": {"nvmlDeviceGetUUID": 0.125}}')
    with open_nvml(build_nvml_settings(sim_gpus="H100-SXM5-80GB")):
        faults = pynvml.nvmlLib.faults
        assert faults.latency("nvmlDeviceGetMigMode") == pytest.approx(_p50_us("GetMigMode") / 1e6)
        assert faults.latency("nvmlDeviceGetUUID") == 0.125


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "does not exist"),
        ("{", "is not JSON (line 1"),
        ('{"nvml": {}}', "holds no latency_us_p50_p99_read_only_calls; record one with"),
        ('{"latency_us_p50_p99_read_only_calls": {"GetMigMode": {"p50_us": -1, "p99_us": 1}}}', "GetMigMode.p50_us"),
    ],
)
def test_a_bad_profile_is_one_line_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str | None, problem: str
) -> None:
    recording = tmp_path / "recording.json"
    if content is not None:
        recording.write_text(content, encoding="utf-8")
    monkeypatch.setenv("MIGDRA_SIM_LATENCY_PROFILE", str(recording))
    with pytest.raises(ConfigurationError) as info:
        build_nvml_settings(sim_gpus="H100-SXM5-80GB")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"invalid NVML settings: MIGDRA_SIM_LATENCY_PROFILE: latency recording {recording}")
    assert problem in message
