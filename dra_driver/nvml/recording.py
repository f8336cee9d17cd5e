"""Recordings of what NVML answers about MIG, read-only, in the format of ``tests/golden/recordings``.

A recording is the ground truth the simulator is held to: every GPU's identity and MIG mode, then for
*every* ``NVML_GPU_INSTANCE_PROFILE_*`` index pynvml knows the profile info (or the error NVML gave),
its possible placements, remaining capacity and listed instances, plus the instances present and the
latency of the read-only calls.  :func:`record_node` builds one from an open :class:`Nvml` session, so
the same code records a real GPU (``migdra hw record``) and the simulator (``migdra hw replay``, the
golden test), and the two documents can be compared field by field.

This module must never change anything on a GPU: it calls only the backend's read-only queries.
Identities that would tie a recording to one machine (GPU and MIG UUIDs, PCI bus IDs, serials) are
left out on purpose, so anyone can publish theirs.
"""

from __future__ import annotations

import datetime
import statistics
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dra_driver.mig.catalog import Placement
from dra_driver.nvml.backend import TIMED_CALL_SYMBOLS, Nvml
from dra_driver.nvml.errors import NvmlError
from dra_driver.nvml.types import GpuInfo, GpuInstanceInfo, GpuInstanceProfileInfo

RECORDING_DESCRIPTION = (
    "Read-only NVML answers recorded with migdra hw record through nvidia-ml-py's pynvml. Every GPU-instance "
    "profile index 0..NVML_GPU_INSTANCE_PROFILE_COUNT-1 (as pynvml knows it) was queried with "
    "nvmlDeviceGetGpuInstanceProfileInfoV (v2 struct), then PossiblePlacements_v2, RemainingCapacity and "
    "GetGpuInstances for its profile ID. Errors are recorded as the pynvml exception class and NVML return code. "
    "Latencies are timed around the pynvml calls alone. No MIG mode or instance was changed."
)


class RecordedError(BaseModel):
    """An NVML call that failed, as pynvml reported it."""

    model_config = ConfigDict(extra="forbid")

    error: str = Field(description="pynvml exception class, e.g. NVMLError_NotSupported")
    value: int = Field(description="NVML return code")
    str_: str = Field(alias="str", description="str() of the pynvml exception")


class RecordedProfileInfo(BaseModel):
    """``nvmlGpuInstanceProfileInfo_v2_t`` with NVML's own field names."""

    model_config = ConfigDict(extra="forbid")

    id: int
    isP2pSupported: int
    sliceCount: int
    instanceCount: int
    multiprocessorCount: int
    copyEngineCount: int
    decoderCount: int
    encoderCount: int
    jpegCount: int
    ofaCount: int
    memorySizeMB: int
    name: str


class RecordedProfile(BaseModel):
    """One profile index: its info or error; placements, remaining capacity and instance count if known."""

    model_config = ConfigDict(extra="forbid")

    index: int
    info: RecordedProfileInfo | RecordedError
    placements: list[tuple[int, int]] | None = None
    remaining: int | RecordedError | None = None
    existing: int | RecordedError | None = None


class RecordedComputeInstance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: int
    profileId: int
    placement: tuple[int, int]


class RecordedGpuInstance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: int
    profileId: int
    placement: tuple[int, int]
    computeInstances: list[RecordedComputeInstance] = Field(default_factory=list)


class RecordedGpu(BaseModel):
    """One GPU; ``gpu_instances``, ``pci_device_id``, ``brand`` and ``addressing_mode`` are absent from the
    oldest recordings (absent: not asked; ``None``: NVML did not answer)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    minor: int
    arch: int
    memory_total: int
    mig_mode: tuple[int, int] | RecordedError | None = Field(description="None: the GPU has no MIG")
    max_mig_devices: int | RecordedError
    pci_device_id: str | None = None
    brand: int | None = Field(default=None, description="nvmlDeviceGetBrand: an NVML_BRAND_* value")
    addressing_mode: int | None = Field(
        default=None, description="nvmlDeviceGetAddressingMode: an NVML_DEVICE_ADDRESSING_MODE_* value"
    )
    profiles: list[RecordedProfile]
    gpu_instances: list[RecordedGpuInstance] | None = None


class RecordedNvml(BaseModel):
    model_config = ConfigDict(extra="forbid")

    driver: str
    nvml_version: str
    count: int
    gpus: list[RecordedGpu]


class Recording(BaseModel):
    """A whole recording file.  Unknown top-level keys (e.g. nvidia-smi tables) are kept as they are."""

    model_config = ConfigDict(extra="allow")

    what: str
    recorded: str
    nvml: RecordedNvml


class RecordedLatency(BaseModel):
    """One timed call's latency, in microseconds, over ``--latency-samples`` samples."""

    model_config = ConfigDict(extra="forbid")

    p50_us: float = Field(ge=0)
    p99_us: float = Field(ge=0)


LATENCY_KEY = "latency_us_p50_p99_read_only_calls"


class RecordedTiming(BaseModel):
    """The timing part of a recording (``migdra hw record --latency-samples N``); other keys are ignored.

    A call name migdra does not know is refused, not skipped: the simulator could not say which NVML
    symbol took that long, and a latency profile silently missing a call would look faster than the GPU.
    """

    model_config = ConfigDict(extra="ignore")

    latency_us_p50_p99_read_only_calls: dict[str, RecordedLatency]
    nvmlInit_ms: float | None = Field(default=None, ge=0)

    @field_validator(LATENCY_KEY)
    @classmethod
    def _known_calls(cls, value: dict[str, RecordedLatency]) -> dict[str, RecordedLatency]:
        unknown = sorted(set(value) - set(TIMED_CALL_SYMBOLS))
        if unknown:
            raise ValueError(
                f"unknown timed call(s) {', '.join(unknown)}; migdra knows {', '.join(TIMED_CALL_SYMBOLS)} "
                "(a new one needs its NVML symbols in dra_driver.nvml.backend.TIMED_CALL_SYMBOLS)"
            )
        return value


def record_node(nvml: Nvml, *, latency_repeats: int = 0, init_ms: float | None = None) -> dict[str, Any]:
    """Everything NVML answers about the node's MIG, read-only, as a recording document (JSON-ready).

    ``latency_repeats`` > 0 also times each read-only query that many times on the first GPU.
    """
    gpus = nvml.list_gpus()
    document: dict[str, Any] = {
        "what": RECORDING_DESCRIPTION,
        "recorded": datetime.date.today().isoformat(),
    }
    if latency_repeats > 0 and gpus:
        document[LATENCY_KEY] = _latencies(nvml, gpus[0], latency_repeats)
    if init_ms is not None:
        document["nvmlInit_ms"] = round(init_ms, 2)
    document["nvml"] = {
        "driver": nvml.driver_version(),
        "nvml_version": nvml.nvml_version(),
        "count": len(gpus),
        "gpus": [_record_gpu(nvml, gpu) for gpu in gpus],
    }
    Recording.model_validate(document)  # what we write is what we can read back
    return document


def _error(exc: NvmlError) -> dict[str, Any]:
    return {"error": exc.nvml_error_name or type(exc).__name__, "value": exc.code, "str": exc.nvml_message}


def _record_gpu(nvml: Nvml, gpu: GpuInfo) -> dict[str, Any]:
    mig_mode: Any
    try:
        state = nvml.mig_mode(gpu.uuid)
        mig_mode = [int(state.current), int(state.pending)] if state is not None else None
    except NvmlError as exc:
        mig_mode = _error(exc)
    try:
        max_mig_devices: Any = nvml.max_mig_device_count(gpu.uuid)
    except NvmlError as exc:
        max_mig_devices = _error(exc)
    profiles = [_record_profile(nvml, gpu, index) for index in range(nvml.gpu_instance_profile_index_count)]
    enabled = isinstance(mig_mode, list) and mig_mode[0] == 1
    return {
        "name": gpu.name,
        "minor": gpu.minor_number,
        "arch": gpu.nvml_architecture,
        "memory_total": gpu.memory_total_bytes,
        "mig_mode": mig_mode,
        "max_mig_devices": max_mig_devices,
        "pci_device_id": f"0x{gpu.pci_device_id:08X}",
        "brand": gpu.nvml_brand,
        "addressing_mode": gpu.nvml_addressing_mode,
        "profiles": profiles,
        "gpu_instances": [_record_gpu_instance(gi) for gi in nvml.gpu_instances(gpu.uuid)] if enabled else [],
    }


def _record_profile(nvml: Nvml, gpu: GpuInfo, index: int) -> dict[str, Any]:
    try:
        profile = nvml.gpu_instance_profile(gpu.uuid, index)
    except NvmlError as exc:
        return {"index": index, "info": _error(exc)}
    entry: dict[str, Any] = {
        "index": index,
        "info": _profile_info(profile),
        "placements": [_pair(p) for p in profile.placements],
    }
    try:
        entry["remaining"] = nvml.remaining_capacity(gpu.uuid, profile.profile_id)
    except NvmlError as exc:
        entry["remaining"] = _error(exc)
    try:
        entry["existing"] = nvml.gpu_instance_count(gpu.uuid, profile.profile_id, profile.instance_count)
    except NvmlError as exc:
        entry["existing"] = _error(exc)
    return entry


def _profile_info(profile: GpuInstanceProfileInfo) -> dict[str, Any]:
    return {
        "id": profile.profile_id,
        "isP2pSupported": int(profile.is_p2p_supported),
        "sliceCount": profile.slice_count,
        "instanceCount": profile.instance_count,
        "multiprocessorCount": profile.multiprocessor_count,
        "copyEngineCount": profile.copy_engine_count,
        "decoderCount": profile.decoder_count,
        "encoderCount": profile.encoder_count,
        "jpegCount": profile.jpeg_count,
        "ofaCount": profile.ofa_count,
        "memorySizeMB": profile.memory_size_mb,
        "name": profile.name,
    }


def _record_gpu_instance(gi: GpuInstanceInfo) -> dict[str, Any]:
    return {
        "id": gi.gpu_instance_id,
        "profileId": gi.profile_id,
        "placement": _pair(gi.placement),
        "computeInstances": [
            {"id": ci.compute_instance_id, "profileId": ci.profile_id, "placement": _pair(ci.placement)}
            for ci in gi.compute_instances
        ],
    }


def _pair(placement: Placement) -> list[int]:
    return [placement.start, placement.size]


def _latencies(nvml: Nvml, gpu: GpuInfo, repeats: int) -> dict[str, dict[str, float]]:
    first_profile = next(iter(nvml.gpu_instance_profiles(gpu.uuid)), None)
    if first_profile is None:
        return {}
    timings = nvml.time_read_only_calls(gpu, first_profile.profile_id, repeats)
    summary = {}
    for name, samples in timings.items():
        percentiles = statistics.quantiles(samples, n=100, method="inclusive") if len(samples) > 1 else samples * 99
        summary[name] = {"p50_us": round(statistics.median(samples), 1), "p99_us": round(percentiles[98], 1)}
    return summary
