"""The NVML boundary (``dra_driver.nvml.backend.Nvml``) over the real pynvml, with the simulated library.

These tests exercise the production code path: the backend makes the same pynvml calls it would make
on a real GPU node.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pynvml
import pytest

from dra_driver.mig import Placement, load_catalog
from dra_driver.nvml import errors
from tests.conftest import OpenSimulatedNode

MIG_UUID = re.compile(r"^MIG-[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$")
ALL_MODELS = sorted(load_catalog().gpus)


def test_gpus_are_enumerated_with_identity_and_mig_mode(simulated_node: OpenSimulatedNode) -> None:
    catalog = load_catalog()
    with simulated_node("H100-SXM5-80GB:2,A100-SXM4-40GB") as nvml:
        gpus = nvml.list_gpus()
        assert [g.index for g in gpus] == [0, 1, 2]
        assert [g.minor_number for g in gpus] == [0, 1, 2]
        assert len({g.uuid for g in gpus}) == 3
        assert all(g.uuid.startswith("GPU-") for g in gpus)
        assert all(re.fullmatch(r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-9]", g.pci_bus_id) for g in gpus)
        h100, a100 = catalog.model("H100-SXM5-80GB"), catalog.model("A100-SXM4-40GB")
        assert [g.name for g in gpus] == [h100.nvml_name, h100.nvml_name, a100.nvml_name]
        assert [catalog.by_pci_device_id(g.pci_device_id) for g in gpus] == [h100, h100, a100]
        assert gpus[0].cuda_compute_capability == (9, 0)
        assert gpus[2].cuda_compute_capability == (8, 0)
        assert gpus[0].memory_total_bytes == h100.total_memory_mib * 2**20
        assert all(g.mig_enabled for g in gpus)
        assert nvml.gpu(gpus[1].uuid) == gpus[1]
        assert re.fullmatch(r"\d+\.\d+(\.\d+)?", nvml.driver_version())
        assert re.fullmatch(r"\d+\.\d+", nvml.cuda_driver_version())


@pytest.mark.parametrize("model_key", ALL_MODELS)
def test_profiles_read_through_the_backend_equal_the_catalog(simulated_node: OpenSimulatedNode, model_key: str) -> None:
    model = load_catalog().model(model_key)
    with simulated_node(model_key, mig_enabled=False) as nvml:  # profile queries work with MIG off too
        uuid = nvml.list_gpus()[0].uuid
        read = {p.profile_id: p for p in nvml.gpu_instance_profiles(uuid)}
    assert sorted(read) == sorted(p.profile_id for p in model.gpu_instance_profiles)
    for expected in model.gpu_instance_profiles:
        got = read[expected.profile_id]
        assert (got.nvml_profile_index, got.slice_count, got.instance_count) == (
            expected.nvml_profile_index,
            expected.slice_count,
            expected.instance_count,
        )
        assert (got.multiprocessor_count, got.memory_size_mb) == (
            expected.multiprocessor_count,
            expected.memory_size_mb,
        )
        assert (got.copy_engine_count, got.decoder_count, got.encoder_count, got.jpeg_count, got.ofa_count) == (
            expected.copy_engine_count,
            expected.decoder_count,
            expected.encoder_count,
            expected.jpeg_count,
            expected.ofa_count,
        )
        assert got.placements == expected.placements
        assert got.is_p2p_supported is False


@pytest.mark.parametrize("model_key", ["H100-SXM5-80GB", "A100-SXM4-40GB"])
def test_every_profile_is_created_at_exactly_the_requested_placement(
    simulated_node: OpenSimulatedNode, model_key: str
) -> None:
    model = load_catalog().model(model_key)
    with simulated_node(model_key) as nvml:
        uuid = nvml.list_gpus()[0].uuid
        for profile in model.gpu_instance_profiles:
            for placement in profile.placements:
                gi = nvml.create_gpu_instance(uuid, profile.profile_id, placement)
                assert (gi.placement, gi.profile_id) == (placement, profile.profile_id)
                assert gi.gpu_instance_id == model.gpu_instance_id(placement)
                ci = nvml.create_compute_instance(uuid, gi.gpu_instance_id, profile.default_ci_profile_index)
                assert ci.multiprocessor_count == profile.multiprocessor_count, f"{profile.name} at {placement}"
                assert MIG_UUID.match(ci.mig_uuid)
                assert nvml.mig_device_uuid(uuid, gi.gpu_instance_id, ci.compute_instance_id) == ci.mig_uuid
                listed = nvml.gpu_instances(uuid)
                assert [(g.gpu_instance_id, g.placement) for g in listed] == [(gi.gpu_instance_id, placement)]
                assert listed[0].compute_instances == (ci,)
                nvml.destroy_compute_instance(uuid, gi.gpu_instance_id, ci.compute_instance_id)
                nvml.destroy_gpu_instance(uuid, gi.gpu_instance_id)
        assert nvml.gpu_instances(uuid) == []


def test_occupied_placement_fails_without_falling_back(simulated_node: OpenSimulatedNode) -> None:
    h100 = load_catalog().model("H100-SXM5-80GB")
    one_g, three_g = h100.profile_by_name("1g.10gb"), h100.profile_by_name("3g.40gb")
    with simulated_node("H100-SXM5-80GB") as nvml:
        uuid = nvml.list_gpus()[0].uuid
        existing = nvml.create_gpu_instance(uuid, one_g.profile_id, Placement(start=5, size=1))
        with pytest.raises(errors.NvmlInsufficientResources) as info:
            nvml.create_gpu_instance(uuid, three_g.profile_id, Placement(start=4, size=4))
        assert info.value.code == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
        assert "placement 4:4" in str(info.value)
        assert [gi.gpu_instance_id for gi in nvml.gpu_instances(uuid)] == [existing.gpu_instance_id]
        assert nvml.remaining_capacity(uuid, three_g.profile_id) == 1


def test_illegal_placement_is_an_invalid_argument(simulated_node: OpenSimulatedNode) -> None:
    three_g = load_catalog().model("H100-SXM5-80GB").profile_by_name("3g.40gb")
    with simulated_node("H100-SXM5-80GB") as nvml:
        uuid = nvml.list_gpus()[0].uuid
        with pytest.raises(errors.NvmlInvalidArgument):
            nvml.create_gpu_instance(uuid, three_g.profile_id, Placement(start=2, size=4))
        assert nvml.gpu_instances(uuid) == []


def test_mig_disabled_gpu_cannot_create_instances(simulated_node: OpenSimulatedNode) -> None:
    one_g = load_catalog().model("H100-SXM5-80GB").profile_by_name("1g.10gb")
    with simulated_node("H100-SXM5-80GB", mig_enabled=False) as nvml:
        gpu = nvml.list_gpus()[0]
        assert gpu.mig_capable
        assert not gpu.mig_enabled
        assert nvml.gpu_instances(gpu.uuid) == []
        with pytest.raises(errors.NvmlNotSupported):
            nvml.create_gpu_instance(gpu.uuid, one_g.profile_id, Placement(start=0, size=1))


def test_gpu_instance_with_compute_instances_is_in_use(simulated_node: OpenSimulatedNode) -> None:
    two_g = load_catalog().model("H100-SXM5-80GB").profile_by_name("2g.20gb")
    with simulated_node("H100-SXM5-80GB") as nvml:
        uuid = nvml.list_gpus()[0].uuid
        gi = nvml.create_gpu_instance(uuid, two_g.profile_id, Placement(start=2, size=2))
        ci = nvml.create_compute_instance(uuid, gi.gpu_instance_id, two_g.default_ci_profile_index)
        with pytest.raises(errors.NvmlInUse) as info:
            nvml.destroy_gpu_instance(uuid, gi.gpu_instance_id)
        assert info.value.retryable
        nvml.destroy_compute_instance(uuid, gi.gpu_instance_id, ci.compute_instance_id)
        nvml.destroy_gpu_instance(uuid, gi.gpu_instance_id)
        with pytest.raises(errors.NvmlNotFound):
            nvml.gpu_instance(uuid, gi.gpu_instance_id)


def test_compute_instance_profiles_of_a_hopper_2g_instance(simulated_node: OpenSimulatedNode) -> None:
    two_g = load_catalog().model("H100-SXM5-80GB").profile_by_name("2g.20gb")
    with simulated_node("H100-SXM5-80GB") as nvml:
        uuid = nvml.list_gpus()[0].uuid
        gi = nvml.create_gpu_instance(uuid, two_g.profile_id, Placement(start=0, size=2))
        profiles = {p.ci_profile_index: p for p in nvml.compute_instance_profiles(uuid, gi.gpu_instance_id)}
    # recorded: CI 0 = 16 SMs x2, CI 7 = 26 SMs x1, CI 1 = 32 SMs x1 (go-nvml#146)
    assert {i: (p.multiprocessor_count, p.instance_count) for i, p in profiles.items()} == {
        0: (16, 2),
        1: (32, 1),
        7: (26, 1),
    }


def test_mig_mode_change_is_pending_on_ampere_and_immediate_on_hopper(simulated_node: OpenSimulatedNode) -> None:
    with simulated_node("A100-SXM4-40GB,H100-SXM5-80GB", mig_enabled=False) as nvml:
        a100, h100 = nvml.list_gpus()
        ampere = nvml.set_mig_mode(a100.uuid, enabled=True)
        assert not ampere.enabled
        assert ampere.reset_pending
        hopper = nvml.set_mig_mode(h100.uuid, enabled=True)
        assert hopper.enabled
        assert not hopper.reset_pending


def test_instances_made_by_someone_else_are_visible(simulated_node: OpenSimulatedNode) -> None:
    """An admin's nvidia-smi (here: raw pynvml) and migdra see the same hardware."""
    with simulated_node("H100-SXM5-80GB") as nvml:
        uuid = nvml.list_gpus()[0].uuid
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        foreign = pynvml.nvmlDeviceCreateGpuInstance(handle, 19)  # no placement: NVML picks start 6
        pynvml.nvmlGpuInstanceCreateComputeInstance(foreign, 0)
        listed = nvml.gpu_instances(uuid)
    assert [(gi.gpu_instance_id, str(gi.placement)) for gi in listed] == [(13, "6:1")]
    assert len(listed[0].compute_instances) == 1


def test_every_nvml_call_is_told_to_the_observer_with_its_function_and_result(tmp_path: Path) -> None:
    """What the plugin's per-function NVML latency metric hangs on: one observation per call."""
    from dra_driver.nvml import sim
    from dra_driver.nvml.backend import Nvml

    seen: list[tuple[str, float, str]] = []
    sim.install(tmp_path / "state.json", gpus=["H100-SXM5-80GB"], mig_enabled=True, faults={})
    try:
        with Nvml(observe_call=lambda function, seconds, result: seen.append((function, seconds, result))) as nvml:
            uuid = nvml.list_gpus()[0].uuid
            seen.clear()
            nvml.create_gpu_instance(uuid, 19, Placement(start=0, size=1))
            with pytest.raises(errors.NvmlInsufficientResources):
                nvml.create_gpu_instance(uuid, 19, Placement(start=0, size=1))
    finally:
        sim.uninstall()
    calls = [(function, result) for function, _, result in seen]
    assert calls.count(("nvmlDeviceCreateGpuInstanceWithPlacement", "success")) == 1
    assert calls.count(("nvmlDeviceCreateGpuInstanceWithPlacement", "NvmlInsufficientResources")) == 1
    assert all(seconds >= 0 for _, seconds, _ in seen)


def test_a_compute_instance_the_backend_cannot_hand_back_is_destroyed_again(
    simulated_node: OpenSimulatedNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Created, but misplaced or not readable back: the caller gets an error, not the CI's ID, so the backend
    destroys it (its handle is known here alone); else the GI could never be destroyed again."""
    four_g = load_catalog().model("H100-SXM5-80GB").profile_by_name("4g.40gb")
    create_at = pynvml.nvmlGpuInstanceCreateComputeInstanceWithPlacement
    get_info = pynvml.nvmlComputeInstanceGetInfo
    failing: list[str] = []

    def misplaced(gi_handle: Any, profile_id: int, placement: Any) -> Any:
        placement._obj.start = 3  # the c_nvmlComputeInstancePlacement_t behind byref(): NVML puts it elsewhere
        return create_at(gi_handle, profile_id, placement)

    def unreadable(ci_handle: Any) -> Any:
        if "read-back" in failing:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
        return get_info(ci_handle)

    def undestroyable(ci_handle: Any) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_IN_USE)

    with simulated_node("H100-SXM5-80GB") as nvml:
        uuid = nvml.list_gpus()[0].uuid
        gi = nvml.create_gpu_instance(uuid, four_g.profile_id, Placement(start=0, size=4)).gpu_instance_id
        monkeypatch.setattr(pynvml, "nvmlGpuInstanceCreateComputeInstanceWithPlacement", misplaced)
        with pytest.raises(errors.NvmlUnexpectedError, match=r"NVML created CI 0 of GI \d+ at 3:1; it was destroyed"):
            nvml.create_compute_instance_at(uuid, gi, 0, Placement(start=0, size=1))
        assert nvml.compute_instances(uuid, gi) == []

        monkeypatch.setattr(pynvml, "nvmlComputeInstanceGetInfo", unreadable)  # armed by ``failing``
        failing.append("read-back")
        for create in (
            lambda: nvml.create_compute_instance(uuid, gi, four_g.default_ci_profile_index),
            lambda: nvml.create_compute_instance_at(uuid, gi, 0, Placement(start=0, size=1)),
        ):
            with pytest.raises(errors.NvmlUnexpectedError, match=r"back failed \(.*\); it was destroyed again"):
                create()
            failing.remove("read-back")
            assert nvml.compute_instances(uuid, gi) == []
            failing.append("read-back")
        failing.clear()

        with monkeypatch.context() as patched:
            patched.setattr(pynvml, "nvmlComputeInstanceDestroy", undestroyable)
            with pytest.raises(errors.NvmlUnexpectedError, match="destroying it again failed, it is left in the GI"):
                nvml.create_compute_instance_at(uuid, gi, 0, Placement(start=0, size=1))
        assert [ci.placement for ci in nvml.compute_instances(uuid, gi)] == [Placement(start=3, size=1)]


@pytest.mark.parametrize(
    ("fault", "brand", "addressing_mode"),
    [
        pytest.param(None, 14, 2, id="answered"),
        pytest.param("NotSupported", None, None, id="not-supported"),
        pytest.param("FunctionNotFound", None, None, id="a-driver-without-the-call"),
    ],
)
def test_brand_and_addressing_mode_are_read_where_nvml_answers_them(
    tmp_path: Path, fault: str | None, brand: int | None, addressing_mode: int | None
) -> None:
    """NVIDIA's ``brand`` and ``addressingMode`` come from NVML when it answers; NOT_SUPPORTED (a vGPU
    guest, a host without HMM support) and a driver without the call leave them unknown, not an error."""
    from dra_driver.nvml import sim
    from dra_driver.nvml.backend import Nvml

    symbols = ("nvmlDeviceGetBrand", "nvmlDeviceGetAddressingMode")
    rules = [{"symbol": symbol, "count": 99, "error": fault} for symbol in symbols] if fault else []
    sim.install(tmp_path / "state.json", gpus=["GH200-96GB"], mig_enabled=True, faults={"rules": rules})
    try:
        with Nvml() as nvml:
            (gpu,) = nvml.list_gpus()
    finally:
        sim.uninstall()
    assert (gpu.nvml_brand, gpu.nvml_addressing_mode) == (brand, addressing_mode)


def test_a_failing_brand_read_other_than_not_answered_fails_the_listing(tmp_path: Path) -> None:
    """A lost GPU must not be published with its attributes silently thinned."""
    from dra_driver.nvml import sim
    from dra_driver.nvml.backend import Nvml

    rules = [{"symbol": "nvmlDeviceGetBrand", "error": "GpuIsLost"}]
    sim.install(tmp_path / "state.json", gpus=["H100-SXM5-80GB"], mig_enabled=True, faults={"rules": rules})
    try:
        with Nvml() as nvml, pytest.raises(errors.NvmlUnexpectedError, match="nvmlDeviceGetBrand"):
            nvml.list_gpus()
    finally:
        sim.uninstall()


def test_the_addressing_mode_struct_must_carry_its_version(boot: Any) -> None:
    """The simulator refuses a caller that forgets ``version``, as NVML does for versioned structs."""
    import ctypes

    handle = boot(["H100-SXM5-80GB"])
    assert pynvml.nvmlDeviceGetAddressingMode(handle) == pynvml.NVML_DEVICE_ADDRESSING_MODE_NONE
    unversioned = pynvml.c_nvmlDeviceAddressingMode_t()
    unversioned.version = 0
    call = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetAddressingMode")
    assert call(handle, ctypes.byref(unversioned)) == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
