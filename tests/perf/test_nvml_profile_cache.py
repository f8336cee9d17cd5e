"""The backend's per-GPU cache of GI profiles and placements (``Nvml.gpu_instance_profiles``).

Every NVML call is counted through ``Nvml(observe_call=...)``, which is told of each C-level call the
backend makes; MIG-mode changes are made behind the backend's back, through raw pynvml (as an
admin's nvidia-smi would) and the simulator's operator API.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pynvml
import pytest

from dra_driver.mig import Placement, load_catalog
from dra_driver.nvml import errors, sim
from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.types import GpuInstanceProfileInfo

PROFILE_READS = ("nvmlDeviceGetGpuInstanceProfileInfo", "nvmlDeviceGetGpuInstancePossiblePlacements")


class Calls:
    """The NVML calls a backend made, by function name; thread-safe."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, function: str, seconds: float, result: str) -> None:
        with self.lock:
            self.seen[function] += 1

    def take(self) -> Counter[str]:
        with self.lock:
            seen, self.seen = self.seen, Counter()
        return seen

    def profile_reads(self) -> int:
        return sum(self.take()[name] for name in PROFILE_READS)


@contextmanager
def observed(state: Path, gpus: list[str], mig_enabled: bool = True) -> Iterator[tuple[Nvml, Calls, list[str]]]:
    """An open backend over a fresh simulated node, its call counter, and its GPU UUIDs."""
    calls = Calls()
    sim.install(state, gpus=gpus, mig_enabled=mig_enabled, faults={})
    try:
        with Nvml(observe_call=calls) as nvml:
            uuids = [gpu.uuid for gpu in nvml.list_gpus()]
            calls.take()
            yield nvml, calls, uuids
    finally:
        sim.uninstall()


def uncached_profiles(nvml: Nvml, uuid: str) -> list[GpuInstanceProfileInfo]:
    """Every profile asked of NVML index by index (``gpu_instance_profile`` never uses the cache)."""
    found = []
    for index in range(nvml.gpu_instance_profile_index_count):
        try:
            found.append(nvml.gpu_instance_profile(uuid, index))
        except (errors.NvmlNotSupported, errors.NvmlInvalidArgument):
            continue
    return found


def test_a_second_read_asks_nvml_only_for_the_mig_mode(tmp_path: Path) -> None:
    with observed(tmp_path / "state.json", ["H100-SXM5-80GB"]) as (nvml, calls, (uuid,)):
        first = nvml.gpu_instance_profiles(uuid)
        assert calls.profile_reads() > 0
        assert nvml.gpu_instance_profiles(uuid) == first
        assert calls.take() == Counter({"nvmlDeviceGetMigMode": 1})
        # gpu_instances lists each profile's instances with the same cached table, and reads the mode once.
        nvml.gpu_instances(uuid)
        seen = calls.take()
        assert not any(seen[name] for name in PROFILE_READS)
        assert seen["nvmlDeviceGetMigMode"] == 1
        assert nvml.possible_placements(uuid, first[0].profile_id) == first[0].placements
        assert calls.take() == Counter({"nvmlDeviceGetMigMode": 1})


def test_mode_and_profiles_together_ask_for_the_mode_once(tmp_path: Path) -> None:
    with observed(tmp_path / "state.json", ["A100-SXM4-40GB"], mig_enabled=False) as (nvml, calls, (uuid,)):
        profiles = nvml.gpu_instance_profiles(uuid)
        calls.take()
        mode, together = nvml.mig_mode_and_profiles(uuid)
        assert calls.take() == Counter({"nvmlDeviceGetMigMode": 1})
        assert (mode, together) == (nvml.mig_mode(uuid), profiles)
        assert mode is not None
        assert not mode.enabled


@pytest.mark.parametrize("model_key", sorted(load_catalog().gpus))
def test_cached_profiles_equal_an_uncached_read(tmp_path: Path, model_key: str) -> None:
    with observed(tmp_path / "state.json", [model_key], mig_enabled=False) as (nvml, _, (uuid,)):
        cold = nvml.gpu_instance_profiles(uuid)
        warm = nvml.gpu_instance_profiles(uuid)
        assert cold == warm == uncached_profiles(nvml, uuid)
        assert all(nvml.possible_placements(uuid, p.profile_id) == p.placements for p in warm)


def test_a_mig_mode_change_by_someone_else_is_seen(tmp_path: Path) -> None:
    """Another client (raw pynvml, as nvidia-smi) switches MIG off, another session on again: both re-read."""
    with observed(tmp_path / "state.json", ["H100-SXM5-80GB"]) as (nvml, calls, (uuid,)):
        nvml.gpu_instance_profiles(uuid)
        calls.take()
        pynvml.nvmlDeviceSetMigMode(pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.NVML_DEVICE_MIG_DISABLE)
        after_off = nvml.gpu_instance_profiles(uuid)
        assert calls.profile_reads() > 0
        nvml.gpu_instance_profiles(uuid)
        assert calls.profile_reads() == 0  # cached again, under the new mode
        assert after_off == uncached_profiles(nvml, uuid)
        with Nvml() as other:  # a second session (another process would be the same)
            other.set_mig_mode(uuid, enabled=True)
        calls.take()
        assert nvml.gpu_instances(uuid) == []
        assert calls.profile_reads() > 0


def test_a_pending_mode_and_an_operator_reset_each_invalidate(tmp_path: Path) -> None:
    """Ampere: SetMigMode changes only the pending mode, a GPU reset (operator API) the current one."""
    state = tmp_path / "state.json"
    with observed(state, ["A100-SXM4-40GB"], mig_enabled=False) as (nvml, calls, (uuid,)):
        nvml.gpu_instance_profiles(uuid)
        calls.take()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        pynvml.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_ENABLE)
        nvml.gpu_instance_profiles(uuid)
        assert calls.profile_reads() > 0
        sim.reset_gpu(state, 0)
        assert nvml.gpu_instances(uuid) == []  # MIG is on now: the listing goes through the table
        assert calls.profile_reads() > 0


def test_init_and_shutdown_drop_the_cache(tmp_path: Path) -> None:
    with observed(tmp_path / "state.json", ["H100-SXM5-80GB"]) as (nvml, calls, (uuid,)):
        nvml.gpu_instance_profiles(uuid)
        nvml.shutdown()
        nvml.init()  # a new session: the driver may have been reloaded meanwhile
        calls.take()
        nvml.gpu_instance_profiles(uuid)
        assert calls.profile_reads() > 0
        nvml.init()  # initialised again without a shutdown (NVML counts inits): a new session too
        calls.take()
        nvml.gpu_instance_profiles(uuid)
        assert calls.profile_reads() > 0
        nvml.shutdown()  # the extra init's


def test_a_table_read_while_the_mode_changed_is_not_kept(tmp_path: Path) -> None:
    """The mode flips during the read and back afterwards: what was read belongs to no mode."""
    state = tmp_path / "state.json"
    flipped = False

    def flip_once(function: str, seconds: float, result: str) -> None:
        nonlocal flipped
        calls(function, seconds, result)
        if function == "nvmlDeviceGetGpuInstanceProfileInfo" and not flipped:
            flipped = True
            pynvml.nvmlDeviceSetMigMode(pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.NVML_DEVICE_MIG_DISABLE)

    calls = Calls()
    sim.install(state, gpus=["H100-SXM5-80GB"], mig_enabled=True, faults={})
    try:
        with Nvml(observe_call=flip_once) as nvml:
            uuid = nvml.list_gpus()[0].uuid
            nvml.gpu_instance_profiles(uuid)
            assert flipped
            pynvml.nvmlDeviceSetMigMode(pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.NVML_DEVICE_MIG_ENABLE)
            calls.take()
            nvml.gpu_instance_profiles(uuid)  # the mode is the one before the read again
            assert calls.profile_reads() > 0
    finally:
        sim.uninstall()


def test_threads_missing_at_once_read_the_table_once(tmp_path: Path) -> None:
    """Eight threads miss together; the first reader stalls in its first NVML call, so all the others
    miss too while it reads: they must wait for its table, not read their own."""
    calls = Calls()
    first_reader: list[int] = []
    another_reader = threading.Event()

    def observe(function: str, seconds: float, result: str) -> None:
        calls(function, seconds, result)
        if function != "nvmlDeviceGetGpuInstanceProfileInfo":
            return
        with calls.lock:
            me = threading.get_ident()
            first = not first_reader
            if first:
                first_reader.append(me)
        if first:
            # Bounded: with the fill lock the others never read, and this waits out the second.
            another_reader.wait(timeout=1.0)
        elif me != first_reader[0]:
            another_reader.set()

    sim.install(tmp_path / "state.json", gpus=["H100-SXM5-80GB"], mig_enabled=True, faults={})
    try:
        with Nvml(observe_call=observe) as nvml:
            uuid = nvml.list_gpus()[0].uuid
            expected = uncached_profiles(Nvml(), uuid)  # a backend without this observer
            calls.take()
            start = threading.Barrier(8)
            results: list[list[GpuInstanceProfileInfo]] = []

            def read() -> None:
                start.wait()
                results.append(nvml.gpu_instance_profiles(uuid))

            threads = [threading.Thread(target=read) for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    finally:
        sim.uninstall()
    assert results == [expected] * 8
    assert not another_reader.is_set()
    assert calls.take()["nvmlDeviceGetGpuInstanceProfileInfo"] == nvml.gpu_instance_profile_index_count


# -- compute-instance profiles, cached per (GPU, GI profile) ---------------------------------------

CI_PROFILE_READ = "nvmlGpuInstanceGetComputeInstanceProfileInfo"
CI_LIST = "nvmlGpuInstanceGetComputeInstances"


def create_with_ci(nvml: Nvml, uuid: str, model_key: str, profile_name: str, start: int) -> int:
    """A GI of ``profile_name`` at ``start`` with its full CI; its GI ID."""
    profile = load_catalog().model(model_key).profile_by_name(profile_name)
    placement = profile.placement_at(start)
    assert placement is not None
    gi = nvml.create_gpu_instance(uuid, profile.profile_id, placement)
    nvml.create_compute_instance(uuid, gi.gpu_instance_id, profile.default_ci_profile_index)
    return gi.gpu_instance_id


def test_a_second_listing_reads_no_compute_instance_profiles(tmp_path: Path) -> None:
    with observed(tmp_path / "state.json", ["H100-SXM5-80GB"]) as (nvml, calls, (uuid,)):
        one_g = create_with_ci(nvml, uuid, "H100-SXM5-80GB", "1g.10gb", 0)
        create_with_ci(nvml, uuid, "H100-SXM5-80GB", "2g.20gb", 2)
        calls.take()
        first = nvml.gpu_instances(uuid)
        assert calls.take()[CI_PROFILE_READ] > 0  # nothing listed them yet
        second = nvml.gpu_instances(uuid)
        seen = calls.take()
        assert second == first
        assert seen[CI_PROFILE_READ] == 0
        assert seen["nvmlDeviceGetMigMode"] == 1  # one mode check for the whole listing
        # The table belongs to the GI profile, not the GI: a new 1g.10gb GI is listed without reads too.
        create_with_ci(nvml, uuid, "H100-SXM5-80GB", "1g.10gb", 1)
        calls.take()
        assert len(nvml.gpu_instances(uuid)) == 3
        assert calls.take()[CI_PROFILE_READ] == 0
        # The single-GI calls use the same tables.
        nvml.gpu_instance(uuid, one_g)
        nvml.compute_instances(uuid, one_g)
        profiles = nvml.compute_instance_profiles(uuid, one_g)
        assert calls.take()[CI_PROFILE_READ] == 0
        assert profiles == Nvml().compute_instance_profiles(uuid, one_g)  # a backend with nothing cached


def test_creating_a_gpu_instance_lists_no_compute_instances(tmp_path: Path) -> None:
    """A GI is created empty: asking NVML for its CIs (and so its CI profiles) would only find none."""
    with observed(tmp_path / "state.json", ["H100-SXM5-80GB"]) as (nvml, calls, (uuid,)):
        profile = load_catalog().model("H100-SXM5-80GB").profile_by_name("3g.40gb")
        created = nvml.create_gpu_instance(uuid, profile.profile_id, profile.placements[0])
        seen = calls.take()
        assert created.compute_instances == ()
        assert seen[CI_LIST] == 0
        assert seen[CI_PROFILE_READ] == 0
        assert Nvml().gpu_instance(uuid, created.gpu_instance_id) == created  # what NVML lists for it


@pytest.mark.parametrize("model_key", sorted(load_catalog().gpus))
def test_cached_compute_instance_profiles_equal_an_uncached_read(tmp_path: Path, model_key: str) -> None:
    """Every GI profile of every model: the cached table (read twice) is what a cold backend reads."""
    with observed(tmp_path / "state.json", [model_key]) as (nvml, _, (uuid,)):
        for profile in load_catalog().model(model_key).gpu_instance_profiles:
            gi = nvml.create_gpu_instance(uuid, profile.profile_id, profile.placements[0])
            cold = Nvml().compute_instance_profiles(uuid, gi.gpu_instance_id)
            assert nvml.compute_instance_profiles(uuid, gi.gpu_instance_id) == cold
            assert nvml.compute_instance_profiles(uuid, gi.gpu_instance_id) == cold
            nvml.create_compute_instance(uuid, gi.gpu_instance_id, profile.default_ci_profile_index)
            assert nvml.gpu_instances(uuid) == nvml.gpu_instances(uuid) == Nvml().gpu_instances(uuid)
            ci = nvml.compute_instances(uuid, gi.gpu_instance_id)[0]
            nvml.destroy_compute_instance(uuid, gi.gpu_instance_id, ci.compute_instance_id)
            nvml.destroy_gpu_instance(uuid, gi.gpu_instance_id)


def test_a_failed_compute_instance_profile_read_is_translated_and_not_kept(tmp_path: Path) -> None:
    """NVML refusing a CI profile read (here the 1st V read: NO_PERMISSION) fails the call as before,
    and what was read up to then is not cached: the next call reads the whole table."""
    plan = sim.FaultPlan.model_validate(
        {"rules": [{"symbol": "nvmlGpuInstanceGetComputeInstanceProfileInfoV", "nth": 1, "error": "NoPermission"}]}
    )
    calls = Calls()
    sim.install(tmp_path / "state.json", gpus=["H100-SXM5-80GB"], mig_enabled=True, faults=plan)
    try:
        with Nvml(observe_call=calls) as nvml:
            uuid = nvml.list_gpus()[0].uuid
            gi = nvml.create_gpu_instance(uuid, 19, Placement(start=0, size=1))
            with pytest.raises(errors.NvmlNoPermission) as refused:
                nvml.compute_instance_profiles(uuid, gi.gpu_instance_id)
            assert refused.value.operation == CI_PROFILE_READ
            calls.take()
            profiles = nvml.compute_instance_profiles(uuid, gi.gpu_instance_id)
            assert calls.take()[CI_PROFILE_READ] == pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT
            assert [p.ci_profile_index for p in profiles] == [0]
    finally:
        sim.uninstall()


def listed_again(nvml: Nvml, calls: Calls, uuid: str, model_key: str) -> int:
    """Create a 1g GI with its CI, list the GPU's instances; the CI profile reads that took."""
    gi = create_with_ci(nvml, uuid, model_key, load_catalog().model(model_key).gpu_instance_profiles[0].name, 0)
    calls.take()
    nvml.gpu_instances(uuid)
    reads = calls.take()[CI_PROFILE_READ]
    ci = nvml.compute_instances(uuid, gi)[0]
    nvml.destroy_compute_instance(uuid, gi, ci.compute_instance_id)
    nvml.destroy_gpu_instance(uuid, gi)
    return reads


def test_a_mig_mode_change_drops_cached_compute_instance_profiles(tmp_path: Path) -> None:
    """MIG switched off and on again behind the backend's back -- by raw pynvml (an admin's nvidia-smi),
    then by a second session -- and seen in between: the CI tables are read afresh each time."""
    with observed(tmp_path / "state.json", ["H100-SXM5-80GB"]) as (nvml, calls, (uuid,)):
        assert listed_again(nvml, calls, uuid, "H100-SXM5-80GB") > 0
        assert listed_again(nvml, calls, uuid, "H100-SXM5-80GB") == 0  # cached
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        pynvml.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_DISABLE)
        assert nvml.gpu_instances(uuid) == []  # sees MIG off (a listing that stops early)
        pynvml.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_ENABLE)
        assert listed_again(nvml, calls, uuid, "H100-SXM5-80GB") > 0
        with Nvml() as other:
            other.set_mig_mode(uuid, enabled=False)
            assert nvml.mig_mode(uuid) == other.mig_mode(uuid)  # seen
            other.set_mig_mode(uuid, enabled=True)
        assert listed_again(nvml, calls, uuid, "H100-SXM5-80GB") > 0


def test_a_pending_mode_and_an_operator_reset_drop_cached_compute_instance_profiles(tmp_path: Path) -> None:
    """Ampere: a pending mode alone (the GPU keeps MIG on) keys a new table; an operator reset (the
    simulator's admin API) to MIG off and back, seen in between, drops the GPU's tables."""
    state = tmp_path / "state.json"
    with observed(state, ["A100-SXM4-40GB"]) as (nvml, calls, (uuid,)):
        assert listed_again(nvml, calls, uuid, "A100-SXM4-40GB") > 0
        assert listed_again(nvml, calls, uuid, "A100-SXM4-40GB") == 0
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        pynvml.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_DISABLE)  # pending only: GIs still possible
        assert listed_again(nvml, calls, uuid, "A100-SXM4-40GB") > 0
        sim.reset_gpu(state, 0)
        assert nvml.gpu_instances(uuid) == []  # sees MIG off
        pynvml.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_ENABLE)
        sim.reset_gpu(state, 0)
        assert listed_again(nvml, calls, uuid, "A100-SXM4-40GB") > 0


def test_init_and_shutdown_drop_cached_compute_instance_profiles(tmp_path: Path) -> None:
    with observed(tmp_path / "state.json", ["H100-SXM5-80GB"]) as (nvml, calls, (uuid,)):
        assert listed_again(nvml, calls, uuid, "H100-SXM5-80GB") > 0
        nvml.shutdown()
        nvml.init()
        assert listed_again(nvml, calls, uuid, "H100-SXM5-80GB") > 0
