"""The simulated GPUs follow NVML's MIG rules, seen only through the real pynvml wrappers.

Placement legality, overlap, instance counts and default placement order (against an independent
model written here), the recorded ``-cgi 19,19,14,9`` trap, the documented error codes, MIG device
handles, and MIG-mode changes per architecture.
"""

from __future__ import annotations

import itertools
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pynvml
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_driver.mig.catalog import GpuInstanceProfile, GpuModel, Placement, load_catalog
from dra_driver.nvml import sim
from tests.conftest import Boot

CATALOG = load_catalog()
MIG_UUID = re.compile(r"^MIG-[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$")
GPU_UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

pytestmark = pytest.mark.usefixtures("boot")


def place(device: Any, profile_id: int, start: int, size: int) -> Any:
    placement = pynvml.c_nvmlGpuInstancePlacement_t(start, size)
    return pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(device, profile_id, pynvml.byref(placement))


def place_ci(gi: Any, profile_id: int, start: int, size: int) -> Any:
    placement = pynvml.c_nvmlComputeInstancePlacement_t(start, size)
    return pynvml.nvmlGpuInstanceCreateComputeInstanceWithPlacement(gi, profile_id, pynvml.byref(placement))


def gi_layout(device: Any, model: GpuModel) -> set[tuple[int, int, int, int]]:
    """Every GI on the GPU as (GI ID, profile ID, start, size), read through nvmlDeviceGetGpuInstances."""
    layout = set()
    for profile in model.gpu_instance_profiles:
        array = (pynvml.c_nvmlGpuInstance_t * profile.instance_count)()
        count = pynvml.c_uint()
        pynvml.nvmlDeviceGetGpuInstances(device, profile.profile_id, array, pynvml.byref(count))
        for gi in array[: count.value]:
            info = pynvml.nvmlGpuInstanceGetInfo(gi)
            assert info.profileId == profile.profile_id
            layout.add((info.id, info.profileId, info.placement.start, info.placement.size))
    return layout


# --- an independent model of GPU-instance placement -----------------------------------------------


def _index_names(suffix: str) -> set[int]:
    return {v for k, v in vars(pynvml).items() if k.startswith("NVML_GPU_INSTANCE_PROFILE_") and k.endswith(suffix)}


ALL_ME, NO_ME = _index_names("_ALL_ME"), _index_names("_NO_ME")
ENGINE_AMOUNTS: tuple[Callable[[GpuInstanceProfile], int], ...] = (
    lambda p: p.multiprocessor_count,
    lambda p: p.copy_engine_count,
    lambda p: p.decoder_count,
    lambda p: p.encoder_count,
    lambda p: p.jpeg_count,
    lambda p: p.ofa_count,
    lambda p: p.memory_size_mb,
)


@dataclass
class OverlapModel:
    """What NVML documents: legal placement ∧ no overlap ∧ instanceCount ∧ max GIs (∧ compute slices,
    ∧ the _ALL_ME exclusivity of nvml.h, ∧ the GPU's engines: together the GIs hold no more SMs,
    engines or memory than the largest profile), and the catalog's default start order without a placement."""

    gpu: GpuModel
    gis: list[tuple[GpuInstanceProfile, int, int]] = field(default_factory=list)

    def verdict(self, profile: GpuInstanceProfile, start: int, size: int) -> str:
        if (start, size) not in {(p.start, p.size) for p in profile.placements}:
            return "invalid"
        if any(s < start + size and start < s + z for _, s, z in self.gis):
            return "insufficient"
        if sum(p.profile_id == profile.profile_id for p, _, _ in self.gis) >= profile.instance_count:
            return "insufficient"
        if len(self.gis) >= self.gpu.max_gpu_instances:
            return "insufficient"
        if sum(p.slice_count for p, _, _ in self.gis) + profile.slice_count > self.gpu.compute_slices:
            return "insufficient"
        for amount in ENGINE_AMOUNTS:
            gpu_has = max(amount(p) for p in self.gpu.gpu_instance_profiles)
            if sum(amount(p) for p, _, _ in self.gis) + amount(profile) > gpu_has:
                return "insufficient"
        for other, _, _ in self.gis:
            if profile.nvml_profile_index in ALL_ME and other.nvml_profile_index not in NO_ME:
                return "insufficient"
            if other.nvml_profile_index in ALL_ME and profile.nvml_profile_index not in NO_ME:
                return "insufficient"
        return "ok"

    def default_start(self, profile: GpuInstanceProfile) -> int | None:
        legal = [p.start for p in profile.placements]
        order = [s for s in self.gpu.default_placement_order.get(profile.placement_size, ()) if s in legal]
        order += sorted(s for s in legal if s not in order)
        return next((s for s in order if self.verdict(profile, s, profile.placement_size) == "ok"), None)

    def layout(self) -> set[tuple[int, int, int, int]]:
        return {(self.gpu.gpu_instance_id(Placement(start=s, size=z)), p.profile_id, s, z) for p, s, z in self.gis}


OPERATIONS = st.lists(
    st.tuples(st.sampled_from(["place", "auto", "destroy"]), st.integers(0, 1000), st.integers(0, 1000)),
    max_size=14,
)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model_key=st.sampled_from(sorted(CATALOG.gpus)), operations=OPERATIONS)
def test_creations_match_an_independent_overlap_model(model_key: str, operations: list[tuple[str, int, int]]) -> None:
    gpu = CATALOG.gpus[model_key]
    model = OverlapModel(gpu)
    directory = tempfile.mkdtemp(prefix="sim-prop-")
    sim.install(Path(directory) / "state.json", gpus=[model_key], mig_enabled=True, faults=sim.FaultPlan())
    try:
        pynvml.nvmlInit()
        device = pynvml.nvmlDeviceGetHandleByIndex(0)
        for kind, a, b in operations:
            profile = gpu.gpu_instance_profiles[a % len(gpu.gpu_instance_profiles)]
            if kind == "destroy":
                if not model.gis:
                    continue
                victim = model.gis.pop(b % len(model.gis))
                gi_id = gpu.gpu_instance_id(Placement(start=victim[1], size=victim[2]))
                pynvml.nvmlGpuInstanceDestroy(pynvml.nvmlDeviceGetGpuInstanceById(device, gi_id))
            elif kind == "auto":
                start = model.default_start(profile)
                if start is None:
                    with pytest.raises(pynvml.NVMLError_InsufficientResources):
                        pynvml.nvmlDeviceCreateGpuInstance(device, profile.profile_id)
                else:
                    info = pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceCreateGpuInstance(device, profile.profile_id))
                    assert (info.placement.start, info.placement.size) == (start, profile.placement_size)
                    model.gis.append((profile, start, profile.placement_size))
            else:
                # Mostly legal starts, sometimes an illegal start or a wrong size.
                start = b % (gpu.memory_slices + 1)
                size = profile.placement_size if b % 5 else max(1, profile.placement_size // 2)
                expected = model.verdict(profile, start, size)
                if expected == "invalid":
                    with pytest.raises(pynvml.NVMLError_InvalidArgument):
                        place(device, profile.profile_id, start, size)
                elif expected == "insufficient":
                    with pytest.raises(pynvml.NVMLError_InsufficientResources):
                        place(device, profile.profile_id, start, size)
                else:
                    place(device, profile.profile_id, start, size)
                    model.gis.append((profile, start, size))
            layout = gi_layout(device, gpu)
            assert layout == model.layout()
            spans = sorted((s, s + z) for _, _, s, z in layout)
            assert all(end <= next_start for (_, end), (next_start, _) in itertools.pairwise(spans))
        pynvml.nvmlShutdown()
    finally:
        sim.uninstall()
        shutil.rmtree(directory, ignore_errors=True)


# --- the recorded ordering trap and capacity ------------------------------------------------------


def test_1g_1g_2g_then_3g_without_placement_fails(boot: Boot) -> None:
    device = boot(["H100-SXM5-80GB"])
    starts = [
        pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceCreateGpuInstance(device, p)).placement.start
        for p in (19, 19, 14)
    ]
    assert starts == [6, 4, 0]  # spread over both halves, so no 4-slice half is left
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        pynvml.nvmlDeviceCreateGpuInstance(device, 9)


def test_3g_first_then_1g_2g_1g_succeeds(boot: Boot) -> None:
    device = boot(["H100-SXM5-80GB"])
    infos = [pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceCreateGpuInstance(device, p)) for p in (9, 19, 14, 19)]
    assert [(i.profileId, i.placement.start) for i in infos] == [(9, 4), (19, 0), (14, 2), (19, 1)]


def test_remaining_capacity_counts_free_placements(boot: Boot) -> None:
    device = boot(["H100-SXM5-80GB"])
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(device, 19) == 7
    place(device, 9, 0, 4)
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(device, 19) == 3  # starts 4, 5, 6
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(device, 9) == 1
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(device, 0) == 0
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(device, 20) == 1  # +me: one per GPU
    place(device, 20, 4, 1)
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(device, 20) == 0
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        place(device, 20, 5, 1)  # a second +me


def test_possible_placements_count_query_and_short_array(boot: Boot) -> None:
    device = boot(["H100-SXM5-80GB"])
    count = pynvml.c_uint()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(device, 19, None, pynvml.byref(count))
    assert count.value == 7
    short = (pynvml.c_nvmlGpuInstancePlacement_t * 3)()
    count = pynvml.c_uint()
    with pytest.raises(pynvml.NVMLError_InsufficientSize):
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(device, 19, short, pynvml.byref(count))
    assert count.value == 7


# --- documented error codes -----------------------------------------------------------------------


def test_illegal_placement_is_an_invalid_argument(boot: Boot) -> None:
    device = boot(["H100-SXM5-80GB"])
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        place(device, 19, 7, 1)  # slice 7 is no 1g start
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        place(device, 9, 2, 4)  # 3g only at 0 or 4
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        place(device, 14, 0, 1)  # wrong size
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceCreateGpuInstance(device, 47)  # an RTX PRO ID, not an H100 one


def test_overlapping_placement_is_insufficient_resources(boot: Boot) -> None:
    device = boot(["A100-SXM4-40GB"])
    place(device, 14, 2, 2)
    with pytest.raises(pynvml.NVMLError_InsufficientResources) as raised:
        place(device, 19, 3, 1)
    assert str(raised.value) == "Insufficient Resources"


def test_mig_disabled_refuses_instances_but_answers_profile_queries(boot: Boot) -> None:
    device = boot(["H100-SXM5-80GB"], mig_enabled=False)
    assert pynvml.nvmlDeviceGetMigMode(device) == [0, 0]
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(device) == 0
    assert pynvml.nvmlDeviceGetGpuInstanceProfileInfo(device, 0).id == 19
    count = pynvml.c_uint()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(device, 19, None, pynvml.byref(count))
    assert count.value == 7
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceCreateGpuInstance(device, 19)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        place(device, 19, 0, 1)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuInstanceById(device, 7)
    # Recorded on H200 / driver 580.159.04: capacity and listing answer with MIG off.
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(device, 19) == 7
    pynvml.nvmlDeviceGetGpuInstances(device, 19, (pynvml.c_nvmlGpuInstance_t * 7)(), pynvml.byref(count))
    assert count.value == 0


def test_gpu_instance_with_compute_instances_cannot_be_destroyed(boot: Boot) -> None:
    device = boot(["H100-SXM5-80GB"])
    gi = pynvml.nvmlDeviceCreateGpuInstance(device, 14)
    ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 1)
    with pytest.raises(pynvml.NVMLError_InUse) as raised:
        pynvml.nvmlGpuInstanceDestroy(gi)
    assert str(raised.value) == "In use by another client"
    pynvml.nvmlComputeInstanceDestroy(ci)
    pynvml.nvmlGpuInstanceDestroy(gi)
    assert gi_layout(device, CATALOG.model("H100-SXM5-80GB")) == set()


def test_busy_mig_device_cannot_be_destroyed(boot: Boot, state_path: Path) -> None:
    device = boot(["H100-SXM5-80GB"])
    gi = pynvml.nvmlDeviceCreateGpuInstance(device, 19)
    ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)
    mig_uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlComputeInstanceGetInfo(ci).device)
    sim.set_busy(state_path, mig_uuid, True)
    with pytest.raises(pynvml.NVMLError_InUse):
        pynvml.nvmlComputeInstanceDestroy(ci)
    sim.set_busy(state_path, mig_uuid, False)
    pynvml.nvmlComputeInstanceDestroy(ci)


def test_busy_gpu_blocks_every_destroy(boot: Boot, state_path: Path) -> None:
    device = boot(["H100-SXM5-80GB"])
    gi = pynvml.nvmlDeviceCreateGpuInstance(device, 19)
    empty_gi = pynvml.nvmlDeviceCreateGpuInstance(device, 19)
    ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)
    sim.set_busy(state_path, pynvml.nvmlDeviceGetUUID(device), True)
    with pytest.raises(pynvml.NVMLError_InUse):
        pynvml.nvmlComputeInstanceDestroy(ci)
    with pytest.raises(pynvml.NVMLError_InUse):
        pynvml.nvmlGpuInstanceDestroy(empty_gi)
    with pytest.raises(sim.HardwareRefusedError):
        sim.set_busy(state_path, "MIG-00000000-0000-5000-0000-000000000000", True)


def test_wrong_structure_version_is_a_version_mismatch(boot: Boot) -> None:
    device = boot(["H100-SXM5-80GB"])
    assert pynvml.nvmlDeviceGetMemoryInfo(device, version=pynvml.nvmlMemory_v2).total > 0
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        pynvml.nvmlDeviceGetMemoryInfo(device, version=0x01000028)
    # The GI profile struct's version is pre-set by pynvml; hand the symbol a stale one.
    info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
    info.version = 0x01000098
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetGpuInstanceProfileInfoV")
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        pynvml._nvmlCheckReturn(fn(device, 0, pynvml.byref(info)))


def test_calls_before_init_and_after_final_shutdown_are_uninitialized(state_path: Path) -> None:
    sim.install(state_path, gpus=["A30"])
    try:
        with pytest.raises(pynvml.NVMLError_Uninitialized):
            pynvml.nvmlDeviceGetCount()
        pynvml.nvmlInit()
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        assert pynvml.nvmlDeviceGetCount() == 1  # one init still open
        pynvml.nvmlShutdown()
        with pytest.raises(pynvml.NVMLError_Uninitialized):
            pynvml.nvmlDeviceGetCount()
        with pytest.raises(pynvml.NVMLError_Uninitialized):
            pynvml.nvmlShutdown()
    finally:
        sim.uninstall()


def test_unimplemented_symbols_are_function_not_found(boot: Boot) -> None:
    device = boot(["A30"])
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetTemperature(device, pynvml.NVML_TEMPERATURE_GPU)


def test_stale_handles_are_invalid_arguments(boot: Boot) -> None:
    device = boot(["H100-SXM5-80GB"])
    gi = pynvml.nvmlDeviceCreateGpuInstance(device, 19)
    ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)
    mig = pynvml.nvmlComputeInstanceGetInfo(ci).device
    pynvml.nvmlComputeInstanceDestroy(ci)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetUUID(mig)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlComputeInstanceGetInfo(ci)
    pynvml.nvmlGpuInstanceDestroy(gi)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpuInstanceGetInfo(gi)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetGpuInstanceById(device, 13)


# --- compute instances -----------------------------------------------------------------------------


def test_compute_instance_rules(boot: Boot) -> None:
    device = boot(["A100-SXM4-40GB"])
    gi = place(device, 9, 0, 4)  # 3g: three compute slices
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 4)  # no 7c inside a 3g
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        place_ci(gi, 0, 3, 1)
    two = place_ci(gi, 1, 0, 2)
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        place_ci(gi, 0, 1, 1)  # overlaps the 2c
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 2)  # 3c needs every slice
    assert pynvml.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, 0) == 1
    one = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)
    assert pynvml.nvmlComputeInstanceGetInfo(one).placement.start == 2
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)
    assert [pynvml.nvmlComputeInstanceGetInfo(c).id for c in (two, one)] == [0, 1]
    pynvml.nvmlComputeInstanceDestroy(two)
    ids = [pynvml.nvmlComputeInstanceGetInfo(pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)).id for _ in range(2)]
    assert ids == [0, 2]  # lowest free ID first
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, 5)
    assert pynvml.nvmlComputeInstanceGetInfo(pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, 2)).placement.start == 1


def test_1g_20gb_holds_one_compute_instance_of_either_profile(boot: Boot) -> None:
    device = boot(["H100-SXM5-80GB"])
    gi = pynvml.nvmlDeviceCreateGpuInstance(device, 15)
    pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 7)
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)


def test_compute_instances_listing(boot: Boot) -> None:
    device = boot(["H100-SXM5-80GB"])
    gi = pynvml.nvmlDeviceCreateGpuInstance(device, 0)
    for _ in range(3):
        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)
    pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 1)
    array = (pynvml.c_nvmlComputeInstance_t * 7)()
    count = pynvml.c_uint()
    pynvml.nvmlGpuInstanceGetComputeInstances(gi, 0, array, pynvml.byref(count))
    assert [pynvml.nvmlComputeInstanceGetInfo(c).id for c in array[: count.value]] == [0, 1, 2]
    pynvml.nvmlGpuInstanceGetComputeInstances(gi, 1, array, pynvml.byref(count))
    assert count.value == 1


# --- MIG device handles ----------------------------------------------------------------------------


def test_mig_device_handles(boot: Boot) -> None:
    device = boot(["H100-SXM5-80GB", "H100-SXM5-80GB"])
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(device) == CATALOG.model("H100").max_compute_instances
    gpu_uuid = pynvml.nvmlDeviceGetUUID(device)
    assert GPU_UUID.match(gpu_uuid)
    assert gpu_uuid != pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(1))

    second = place(device, 14, 2, 2)  # GI 4
    first = place(device, 9, 4, 4)  # GI 2
    devices = []
    for gi in (second, first, second):
        ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)
        info = pynvml.nvmlComputeInstanceGetInfo(ci)
        mig = info.device
        assert pynvml.nvmlGpuInstanceGetInfo(info.gpuInstance).id == pynvml.nvmlGpuInstanceGetInfo(gi).id
        assert bool(pynvml.nvmlDeviceIsMigDeviceHandle(mig)) is True
        assert isinstance(pynvml.nvmlDeviceIsMigDeviceHandle(mig), pynvml.c_uint)
        assert MIG_UUID.match(pynvml.nvmlDeviceGetUUID(mig))
        same = pynvml.nvmlDeviceGetHandleByUUID(pynvml.nvmlDeviceGetUUID(mig))
        assert pynvml.nvmlDeviceGetComputeInstanceId(same) == info.id
        parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
        assert pynvml.nvmlDeviceGetUUID(parent) == gpu_uuid
        devices.append((pynvml.nvmlDeviceGetGpuInstanceId(mig), pynvml.nvmlDeviceGetComputeInstanceId(mig)))
        devices[-1] += (pynvml.nvmlDeviceGetUUID(mig),)
    assert bool(pynvml.nvmlDeviceIsMigDeviceHandle(device)) is False
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuInstanceId(device)
    assert len({uuid for _, _, uuid in devices}) == 3
    # Index order: ascending GI ID, then CI ID; free slots up to the maximum are NOT_FOUND.
    by_index = [pynvml.nvmlDeviceGetMigDeviceHandleByIndex(device, i) for i in range(3)]
    assert [pynvml.nvmlDeviceGetUUID(h) for h in by_index] == [u for _, _, u in sorted(devices)]
    assert [(g, c) for g, c, _ in sorted(devices)] == [(2, 0), (4, 0), (4, 1)]
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(device, 3)


def test_mig_device_reports_its_instance_resources(boot: Boot) -> None:
    device = boot(["A100-SXM4-40GB"])
    profile = CATALOG.model("A100-SXM4-40GB").profile_by_id(9)
    gi = place(device, 9, 0, 4)
    ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)  # 1c.3g
    mig = pynvml.nvmlComputeInstanceGetInfo(ci).device
    attributes = pynvml.nvmlDeviceGetAttributes(mig)
    assert attributes.multiprocessorCount == profile.compute_instance_profile(0).multiprocessor_count
    assert attributes.gpuInstanceSliceCount == 3
    assert attributes.computeInstanceSliceCount == 1
    assert attributes.sharedCopyEngineCount == profile.copy_engine_count
    assert attributes.sharedDecoderCount == profile.decoder_count
    assert attributes.memorySizeMB == profile.memory_size_mb
    assert pynvml.nvmlDeviceGetMemoryInfo(mig).total == profile.memory_size_mb * 1024 * 1024
    assert pynvml.nvmlDeviceGetName(mig) == "NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb"
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetAttributes(device)


def test_mig_uuid_is_new_for_a_recreated_instance(boot: Boot) -> None:
    device = boot(["H100-SXM5-80GB"])
    gi = place(device, 19, 0, 1)
    ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)
    first = pynvml.nvmlDeviceGetUUID(pynvml.nvmlComputeInstanceGetInfo(ci).device)
    assert pynvml.nvmlDeviceGetUUID(pynvml.nvmlComputeInstanceGetInfo(ci).device) == first  # stable
    pynvml.nvmlComputeInstanceDestroy(ci)
    ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)
    assert pynvml.nvmlDeviceGetUUID(pynvml.nvmlComputeInstanceGetInfo(ci).device) != first


def test_gpu_identity(boot: Boot) -> None:
    device = boot(["H100-SXM5-80GB", "A30"])
    second = pynvml.nvmlDeviceGetHandleByIndex(1)
    assert pynvml.nvmlDeviceGetName(second) == "NVIDIA A30"
    assert pynvml.nvmlDeviceGetIndex(second) == pynvml.nvmlDeviceGetMinorNumber(second) == 1
    assert pynvml.nvmlDeviceGetArchitecture(device) == pynvml.NVML_DEVICE_ARCH_HOPPER
    assert pynvml.nvmlDeviceGetCudaComputeCapability(device) == (9, 0)
    pci = pynvml.nvmlDeviceGetPciInfo(device)
    assert pci.pciDeviceId == 0x233010DE
    assert pci.busId == "00000000:1B:00.0"
    assert pci.busIdLegacy == "0000:1B:00.0"
    by_bus = pynvml.nvmlDeviceGetHandleByPciBusId(pynvml.nvmlDeviceGetPciInfo(second).busId)
    assert pynvml.nvmlDeviceGetUUID(by_bus) == pynvml.nvmlDeviceGetUUID(second)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
    assert pynvml.nvmlDeviceGetMemoryInfo(device).total == CATALOG.model("H100").total_memory_mib * 1024 * 1024
    assert pynvml.nvmlSystemGetDriverVersion() == sim.DEFAULT_DRIVER_VERSION
    assert pynvml.nvmlSystemGetCudaDriverVersion() == pynvml.nvmlSystemGetCudaDriverVersion_v2() == 13000
    assert pynvml.nvmlDeviceGetNumaNodeId(second) == 1


# --- MIG mode --------------------------------------------------------------------------------------


def test_ampere_mig_mode_changes_at_reset(boot: Boot, state_path: Path) -> None:
    device = boot(["A100-SXM4-80GB"], mig_enabled=False)
    assert pynvml.nvmlDeviceSetMigMode(device, pynvml.NVML_DEVICE_MIG_ENABLE) == pynvml.NVML_SUCCESS
    assert pynvml.nvmlDeviceGetMigMode(device) == [0, 1]
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceCreateGpuInstance(device, 19)
    sim.reset_gpu(state_path, 0)
    assert pynvml.nvmlDeviceGetMigMode(device) == [1, 1]
    gi = pynvml.nvmlDeviceCreateGpuInstance(device, 19)
    with pytest.raises(pynvml.NVMLError_InUse):
        pynvml.nvmlDeviceSetMigMode(device, pynvml.NVML_DEVICE_MIG_DISABLE)
    with pytest.raises(sim.HardwareRefusedError):
        sim.reset_gpu(state_path, 0)
    pynvml.nvmlGpuInstanceDestroy(gi)
    pynvml.nvmlDeviceSetMigMode(device, pynvml.NVML_DEVICE_MIG_DISABLE)
    assert pynvml.nvmlDeviceGetMigMode(device) == [1, 0]
    sim.reset_gpu(state_path, 0)
    assert pynvml.nvmlDeviceGetMigMode(device) == [0, 0]


def test_hopper_mig_mode_changes_at_once(boot: Boot) -> None:
    device = boot(["H100-SXM5-80GB"], mig_enabled=False)
    assert pynvml.nvmlDeviceSetMigMode(device, pynvml.NVML_DEVICE_MIG_ENABLE) == pynvml.NVML_SUCCESS
    assert pynvml.nvmlDeviceGetMigMode(device) == [1, 1]
    gi = pynvml.nvmlDeviceCreateGpuInstance(device, 19)
    with pytest.raises(pynvml.NVMLError_InUse):
        pynvml.nvmlDeviceSetMigMode(device, pynvml.NVML_DEVICE_MIG_DISABLE)
    assert pynvml.nvmlDeviceGetMigMode(device) == [1, 1]
    pynvml.nvmlGpuInstanceDestroy(gi)
    pynvml.nvmlDeviceSetMigMode(device, pynvml.NVML_DEVICE_MIG_DISABLE)
    assert pynvml.nvmlDeviceGetMigMode(device) == [0, 0]
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceSetMigMode(device, 2)


def test_busy_gpu_reports_in_use_activation_and_keeps_its_mode(boot: Boot, state_path: Path) -> None:
    device = boot(["H100-SXM5-80GB"], mig_enabled=False)
    sim.set_busy(state_path, pynvml.nvmlDeviceGetUUID(device), True)
    assert pynvml.nvmlDeviceSetMigMode(device, pynvml.NVML_DEVICE_MIG_ENABLE) == pynvml.NVML_ERROR_IN_USE
    assert pynvml.nvmlDeviceGetMigMode(device) == [0, 0]
    with pytest.raises(sim.HardwareRefusedError):
        sim.reset_gpu(state_path, 0)
    sim.set_busy(state_path, pynvml.nvmlDeviceGetUUID(device), False)
    assert pynvml.nvmlDeviceSetMigMode(device, pynvml.NVML_DEVICE_MIG_ENABLE) == pynvml.NVML_SUCCESS
    assert pynvml.nvmlDeviceGetMigMode(device) == [1, 1]


def test_install_with_mig_enabled_sets_current_and_pending(boot: Boot) -> None:
    device = boot(["A30"], mig_enabled=True)
    assert pynvml.nvmlDeviceGetMigMode(device) == [1, 1]


def test_all_media_engine_profile_admits_only_no_media_engine_neighbours(boot: Boot) -> None:
    device = boot(["RTX-PRO-6000"])
    profiles = CATALOG.model("RTX-PRO-6000").profile_by_name
    all_me, no_me, plain = (profiles(n).profile_id for n in ("1g.24gb+me.all", "1g.24gb-me", "1g.24gb"))
    everything = pynvml.nvmlDeviceCreateGpuInstance(device, all_me)
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        pynvml.nvmlDeviceCreateGpuInstance(device, plain)
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(device, plain) == 0
    pynvml.nvmlDeviceCreateGpuInstance(device, no_me)
    pynvml.nvmlGpuInstanceDestroy(everything)
    pynvml.nvmlDeviceCreateGpuInstance(device, plain)
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        pynvml.nvmlDeviceCreateGpuInstance(device, all_me)


def test_the_gpu_has_one_set_of_media_engines_to_share(boot: Boot) -> None:
    """A30 has one JPEG and one OFA: a 1g+me and a 2g+me cannot coexist, though each allows one instance."""
    device = boot(["A30"])
    a30 = CATALOG.model("A30")
    place(device, a30.profile_by_name("1g.6gb+me").profile_id, 0, 1)
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        place(device, a30.profile_by_name("2g.12gb+me").profile_id, 2, 2)
    place(device, a30.profile_by_name("2g.12gb").profile_id, 2, 2)
