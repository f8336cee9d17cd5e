"""The simulated NVML reports every catalog profile exactly, through the real pynvml wrappers.

Table checks walk every GPU model of the catalog; spot checks pin facts recorded on real hardware
(docs/nvml-mig.md: profile indices and IDs, placements, GPU-instance IDs, compute instances), so a
catalog or simulator change that contradicts them fails here.
"""

from __future__ import annotations

from typing import Any

import pynvml
import pytest

from dra_driver.mig.catalog import GpuInstanceProfile, GpuModel, Placement, load_catalog
from dra_driver.nvml import sim
from tests.conftest import Boot

CATALOG = load_catalog()
MODELS = sorted(CATALOG.gpus)

pytestmark = pytest.mark.usefixtures("boot")


def gpu_placements(device: Any, profile_id: int) -> list[tuple[int, int]]:
    count = pynvml.c_uint()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(device, profile_id, None, pynvml.byref(count))
    array = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(device, profile_id, array, pynvml.byref(count))
    return [(p.start, p.size) for p in array[: count.value]]


def ci_placements(gi: Any, profile_id: int) -> list[tuple[int, int]]:
    count = pynvml.c_uint()
    pynvml.nvmlGpuInstanceGetComputeInstancePossiblePlacements(gi, profile_id, None, pynvml.byref(count))
    array = (pynvml.c_nvmlComputeInstancePlacement_t * count.value)()
    pynvml.nvmlGpuInstanceGetComputeInstancePossiblePlacements(gi, profile_id, array, pynvml.byref(count))
    return [(p.start, p.size) for p in array[: count.value]]


def as_pairs(placements: tuple[Placement, ...]) -> list[tuple[int, int]]:
    return [(p.start, p.size) for p in placements]


def expected_gi_fields(profile: GpuInstanceProfile) -> dict[str, int]:
    return {
        "id": profile.profile_id,
        "isP2pSupported": profile.is_p2p_supported,
        "sliceCount": profile.slice_count,
        "instanceCount": profile.instance_count,
        "multiprocessorCount": profile.multiprocessor_count,
        "copyEngineCount": profile.copy_engine_count,
        "decoderCount": profile.decoder_count,
        "encoderCount": profile.encoder_count,
        "jpegCount": profile.jpeg_count,
        "ofaCount": profile.ofa_count,
        "memorySizeMB": profile.memory_size_mb,
    }


def fields(info: Any, names: list[str]) -> dict[str, int]:
    return {name: getattr(info, name) for name in names}


@pytest.mark.parametrize("mig_enabled", [True, False], ids=["mig-on", "mig-off"])
@pytest.mark.parametrize("model_key", MODELS)
def test_gpu_instance_profiles_match_catalog(boot: Boot, model_key: str, mig_enabled: bool) -> None:
    model = CATALOG.gpus[model_key]
    device = boot([model_key], mig_enabled=mig_enabled)
    for profile in model.gpu_instance_profiles:
        want = expected_gi_fields(profile)
        v1 = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(device, profile.nvml_profile_index, version=1)
        v2 = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(device, profile.nvml_profile_index)
        by_id = pynvml.nvmlDeviceGetGpuInstanceProfileInfoById(device, profile.profile_id)
        assert fields(v1, list(want)) == want, profile.name
        assert fields(v2, list(want)) == want, profile.name
        assert fields(by_id, list(want)) == want, profile.name
        # pynvml's printable structures decode char arrays to str on access.
        assert v2.name == by_id.name == f"MIG {profile.name}"
        assert gpu_placements(device, profile.profile_id) == as_pairs(profile.placements), profile.name


@pytest.mark.parametrize("model_key", MODELS)
def test_profile_indices_outside_the_model(boot: Boot, model_key: str) -> None:
    model = CATALOG.gpus[model_key]
    device = boot([model_key])
    present = {p.nvml_profile_index for p in model.gpu_instance_profiles}
    # The simulated driver (R580 by default) knows fewer indices than pynvml 13.615 (recorded on H200).
    driver_count = CATALOG.gpu_instance_profile_index_count(sim.DEFAULT_DRIVER_VERSION)
    assert driver_count <= pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT
    for index in range(driver_count):
        if index not in present:
            with pytest.raises(pynvml.NVMLError_NotSupported):
                pynvml.nvmlDeviceGetGpuInstanceProfileInfo(device, index)
    # "enumerate from 0 until INVALID_ARGUMENT" must terminate at the driver's own count.
    for index in range(driver_count, pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT + 1):
        for version in (1, 2):
            with pytest.raises(pynvml.NVMLError_InvalidArgument):
                pynvml.nvmlDeviceGetGpuInstanceProfileInfo(device, index, version)


@pytest.mark.parametrize("model_key", MODELS)
def test_compute_instance_profiles_match_catalog(boot: Boot, model_key: str) -> None:
    model: GpuModel = CATALOG.gpus[model_key]
    device = boot([model_key])
    for profile in model.gpu_instance_profiles:
        gi = pynvml.nvmlDeviceCreateGpuInstance(device, profile.profile_id)
        present = {ci.ci_profile_index for ci in profile.compute_instance_profiles}
        for ci in profile.compute_instance_profiles:
            want = {
                "id": ci.profile_id,
                "sliceCount": ci.slice_count,
                "instanceCount": ci.instance_count,
                "multiprocessorCount": ci.multiprocessor_count,
                "sharedCopyEngineCount": profile.copy_engine_count,
                "sharedDecoderCount": profile.decoder_count,
                "sharedEncoderCount": profile.encoder_count,
                "sharedJpegCount": profile.jpeg_count,
                "sharedOfaCount": profile.ofa_count,
            }
            shared = pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
            v1 = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, ci.ci_profile_index, shared, version=1)
            v2 = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, ci.ci_profile_index, shared)
            assert fields(v1, list(want)) == want, (profile.name, ci.name)
            assert fields(v2, list(want)) == want, (profile.name, ci.name)
            assert v2.name == ci.name
            assert ci_placements(gi, ci.profile_id) == as_pairs(ci.placements), (profile.name, ci.name)
        for index in set(range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT)) - present:
            with pytest.raises(pynvml.NVMLError_NotSupported):
                pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, index, 0)
        pynvml.nvmlGpuInstanceDestroy(gi)


# --- spot checks against recorded hardware ---------------------------------------------------------


def test_h100_1g_20gb_is_id_15_with_26_sms_on_even_starts(boot: Boot) -> None:
    device = boot(["H100-SXM5-80GB"])
    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(device, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2)
    assert (info.id, info.multiprocessorCount, info.name) == (15, 26, "MIG 1g.20gb")
    assert gpu_placements(device, 15) == [(0, 2), (2, 2), (4, 2), (6, 2)]


def test_a100_40gb_3g_uses_four_memory_slices_at_0_and_4(boot: Boot) -> None:
    device = boot(["A100-SXM4-40GB"])
    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(device, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE)
    assert (info.id, info.sliceCount) == (9, 3)
    assert gpu_placements(device, 9) == [(0, 4), (4, 4)]


def test_a30_has_four_slices(boot: Boot) -> None:
    device = boot(["A30"])
    full = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(device, pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE)
    assert (full.id, full.sliceCount) == (0, 4)
    assert gpu_placements(device, 0) == [(0, 4)]
    assert gpu_placements(device, 14) == [(0, 1), (1, 1), (2, 1), (3, 1)]
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(device) == 4


def test_h100_seven_1g_without_placement_get_recorded_ids_and_starts(boot: Boot) -> None:
    device = boot(["H100-SXM5-80GB"])
    created = []
    for _ in range(7):
        info = pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceCreateGpuInstance(device, 19))
        created.append((info.id, info.placement.start, info.placement.size))
    assert created == [(13, 6, 1), (11, 4, 1), (12, 5, 1), (7, 0, 1), (8, 1, 1), (9, 2, 1), (10, 3, 1)]


def test_gh200_three_1g_24gb_without_placement_get_ids_5_3_4(boot: Boot) -> None:
    device = boot(["GH200-96GB"])
    ids = [pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceCreateGpuInstance(device, 15)).id for _ in range(3)]
    assert ids == [5, 3, 4]


def test_h100_1g_20gb_default_ci_is_profile_7_with_26_sms(boot: Boot) -> None:
    device = boot(["H100-SXM5-80GB"])
    gi = pynvml.nvmlDeviceCreateGpuInstance(device, 15)
    rev1 = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1, 0)
    plain = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, 0)
    assert (rev1.id, rev1.multiprocessorCount) == (7, 26)
    assert (plain.id, plain.multiprocessorCount) == (0, 16)
    assert CATALOG.model("H100-SXM5-80GB").profile_by_id(15).default_ci_profile_index == 7
    # The MIG device of that CI reports the 26 SMs.
    ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 7)
    mig = pynvml.nvmlComputeInstanceGetInfo(ci).device
    assert pynvml.nvmlDeviceGetAttributes(mig).multiprocessorCount == 26
