"""Hold the simulator to a recording of real hardware: build the recorded node, record it, compare.

:func:`compare_with_simulator` configures a simulated machine as the recording describes it (GPU
models identified from PCI device ID or NVML name, MIG mode current and pending, driver and NVML
versions, the GPU and compute instances present), records it with the very code that recorded the
hardware (:func:`dra_driver.nvml.recording.record_node`), and lists every field on which the two
disagree.  An empty list means the simulator answers as the hardware did.

Compared: the whole ``nvml`` section, field by field, over the keys the recording has (a newer
recorder may write more than an older recording holds), and the nvidia-smi tables an older recording
carries (``nvidia_smi_mig_lgip_memory_gib``, ``nvidia_smi_mig_lgipp``), re-derived from the
simulator's answers the way nvidia-smi prints them.  Not compared: latencies and when/how it was
recorded — timing is a property of the machine, not of MIG.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dra_driver.mig.catalog import GpuModel, Placement, load_catalog
from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.recording import RecordedGpu, Recording, record_node
from dra_driver.nvml.sim import hardware
from dra_driver.nvml.sim.errors import SimNvmlError, StateFileError
from dra_driver.nvml.sim.state import SimState, StateStore

_TIMING_AND_PROVENANCE = frozenset(
    {"what", "recorded", "recorder", "latency_us_p50_p99_read_only_calls", "nvmlInit_ms"}
)


def compare_with_simulator(recording: Mapping[str, Any], source: str = "recording") -> list[str]:
    """Every disagreement between ``recording`` and the simulator configured like it (``[]``: none)."""
    parsed = Recording.model_validate(recording)
    simulated = simulate(parsed, source)
    problems = differences(recording["nvml"], simulated["nvml"], "nvml")
    problems += _nvidia_smi_differences(recording, simulated)
    unknown = sorted(
        key for key in recording if key not in _TIMING_AND_PROVENANCE and key != "nvml" and key not in _SMI_CHECKS
    )
    problems += [
        f"{key}: not compared (no rule for this field); add one to dra_driver.nvml.sim.replay" for key in unknown
    ]
    return problems


def simulate(recording: Recording, source: str = "recording") -> dict[str, Any]:
    """Record a simulated machine configured as ``recording`` describes its hardware."""
    from dra_driver.nvml import sim  # noqa: PLC0415 -- the package imports this module's siblings

    state = _machine_like(recording, source)
    with tempfile.TemporaryDirectory(prefix="migdra-replay-") as directory:
        path = Path(directory) / "state.json"
        StateStore(path).initialise(lambda: state)
        sim.install(path, faults={})
        try:
            with Nvml() as nvml:
                return record_node(nvml)
        finally:
            sim.uninstall()


def differences(expected: Any, actual: Any, path: str) -> list[str]:
    """Field-by-field differences, walking ``expected``'s keys (``actual`` may hold more)."""
    if isinstance(expected, Mapping):
        if not isinstance(actual, Mapping):
            return [f"{path}: recorded {_short(expected)}, simulator {_short(actual)}"]
        found: list[str] = []
        for key, value in expected.items():
            if key not in actual:
                found.append(f"{path}.{key}: recorded {_short(value)}, simulator has no such field")
            else:
                found += differences(value, actual[key], f"{path}.{key}")
        return found
    if isinstance(expected, list) and isinstance(actual, list):
        found = []
        if len(expected) != len(actual):
            found.append(f"{path}: recorded {len(expected)} entries, simulator {len(actual)}")
        for position, (want, got) in enumerate(zip(expected, actual, strict=False)):
            found += differences(want, got, f"{path}[{position}]")
        return found
    if expected != actual:
        return [f"{path}: recorded {_short(expected)}, simulator {_short(actual)}"]
    return []


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _model_of(gpu: RecordedGpu, position: int, source: str) -> GpuModel:
    catalog = load_catalog()
    model = catalog.identify(int(gpu.pci_device_id, 16), gpu.name) if gpu.pci_device_id else None
    model = model or catalog.by_nvml_name(gpu.name)
    if model is None:
        raise StateFileError(
            f"{source}: GPU {position} ({gpu.name!r}) is no model of the MIG catalog; add it to "
            "hack/data/mig-profiles.yaml and regenerate the catalog first (make catalog)"
        )
    return model


def _cuda_driver_version(nvml_version: str) -> int:
    """``13.580.159.04`` -> 13000: NVML's version leads with the CUDA major version."""
    major = nvml_version.split(".", 1)[0]
    return int(major) * 1000 if major.isdigit() else 0


def _machine_like(recording: Recording, source: str) -> SimState:
    recorded = recording.nvml
    models = [_model_of(gpu, position, source) for position, gpu in enumerate(recorded.gpus)]
    state = hardware.new_machine(
        f"replay:{source}",
        models,
        mig_enabled=False,
        driver_version=recorded.driver,
        cuda_driver_version=_cuda_driver_version(recorded.nvml_version),
    )
    for gpu, recorded_gpu in zip(state.gpus, recorded.gpus, strict=True):
        if isinstance(recorded_gpu.mig_mode, tuple):
            gpu.mig_mode_current, gpu.mig_mode_pending = (bool(mode) for mode in recorded_gpu.mig_mode)
        for gi in recorded_gpu.gpu_instances or []:
            try:
                created = hardware.create_gpu_instance(
                    gpu, gi.profileId, Placement(start=gi.placement[0], size=gi.placement[1])
                )
                for ci in gi.computeInstances:
                    hardware.create_compute_instance(
                        state, gpu, created, ci.profileId, Placement(start=ci.placement[0], size=ci.placement[1])
                    )
            except SimNvmlError as exc:
                raise StateFileError(
                    f"{source}: the simulator refuses GPU {gpu.index}'s recorded GPU instance {gi.id} "
                    f"(profile {gi.profileId} at {gi.placement[0]}:{gi.placement[1]}): {exc}"
                ) from exc
    return state


def _lgip_memory(simulated: dict[str, Any]) -> dict[str, float]:
    """``nvidia-smi mig -lgip``'s memory column: memorySizeMB / 1024, per profile name, first GPU."""
    profiles = simulated["nvml"]["gpus"][0]["profiles"]
    return {
        p["info"]["name"].removeprefix("MIG "): round(p["info"]["memorySizeMB"] / 1024, 2)
        for p in profiles
        if "id" in p["info"]
    }


def _lgipp(simulated: dict[str, Any]) -> dict[str, str]:
    """``nvidia-smi mig -lgipp``: ``{start,start,...}:size`` per profile ID, first GPU."""
    profiles = simulated["nvml"]["gpus"][0]["profiles"]
    table = {}
    for profile in profiles:
        if "id" in profile["info"] and profile["placements"]:
            starts = ",".join(str(start) for start, _ in profile["placements"])
            table[str(profile["info"]["id"])] = f"{{{starts}}}:{profile['placements'][0][1]}"
    return table


_SMI_CHECKS = {
    "nvidia_smi_mig_lgip_memory_gib": _lgip_memory,
    "nvidia_smi_mig_lgipp": _lgipp,
    # Free text about nvidia-smi's behaviour with MIG off: it reflects the MIG mode, compared above.
    "nvidia_smi_mig_lgi_with_mig_disabled": None,
}


def _nvidia_smi_differences(recording: Mapping[str, Any], simulated: dict[str, Any]) -> list[str]:
    found: list[str] = []
    for key, derive in _SMI_CHECKS.items():
        if key in recording and derive is not None:
            found += differences(recording[key], derive(simulated), key)
    return found
