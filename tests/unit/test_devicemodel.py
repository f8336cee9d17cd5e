"""The pure device model: which devices a node publishes and how counters keep them honest."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any

import pynvml
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_driver.cli import slices_view
from dra_driver.devicemodel import example_inventory, example_slices
from dra_driver.devicemodel.config import DeviceModelConfig, ProfileFilter
from dra_driver.devicemodel.layout import render_slices
from dra_driver.devicemodel.naming import parse_mig_device_name
from dra_driver.devicemodel.pool import Device, NodePool, build_pool
from dra_driver.devicemodel.vocabulary import ATTRIBUTES, CAPACITIES, DeviceType, ValueType
from dra_driver.mig import Placement, load_catalog
from dra_driver.nvml import sim
from dra_driver.nvml.inventory import read_inventory
from dra_driver.nvml.types import GpuInstanceInfo
from dra_driver.tools.validation import validate
from tests.conftest import OpenSimulatedNode

CATALOG = load_catalog()
MODELS = sorted(CATALOG.gpus)
GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def pool_of(*models: str, config: DeviceModelConfig | None = None, mig_enabled: bool = True) -> NodePool:
    return build_pool(example_inventory(list(models), mig_enabled), config or DeviceModelConfig())


@pytest.mark.parametrize("model_key", MODELS)
def test_one_device_per_legal_profile_placement(model_key: str) -> None:
    model = CATALOG.model(model_key)
    pool = pool_of(model_key)
    exclusive = [d for d in pool.devices if not d.shared]
    expected = {(p.profile_id, pl.start) for p in model.gpu_instance_profiles for pl in p.placements}
    assert {(d.profile_id, d.placement.start) for d in exclusive if d.placement} == expected
    assert len(exclusive) == len(expected)
    assert all(d.type is DeviceType.MIG for d in pool.devices)
    for device in exclusive:
        assert parse_mig_device_name(device.name) == (0, device.profile_id, device.placement.start)  # type: ignore[union-attr]


def _fits(pool: NodePool, devices: list[Device]) -> bool:
    """kube-scheduler's counter rule: no counter of any set may go negative."""
    available = {cs.name: dict(cs.counters) for cs in pool.counter_sets}
    for device in devices:
        assert device.counter_set is not None
        for counter, amount in device.consumes.items():
            available[device.counter_set][counter] -= amount
    return all(value >= 0 for counters in available.values() for value in counters.values())


def _nvml_accepts(model_key: str, devices: list[Device]) -> bool:
    with tempfile.TemporaryDirectory(prefix="counters-") as directory:
        sim.install(Path(directory) / "state.json", gpus=[model_key], mig_enabled=True, faults=sim.FaultPlan())
        try:
            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            for device in devices:
                assert device.placement is not None
                placement = pynvml.c_nvmlGpuInstancePlacement_t()
                placement.start, placement.size = device.placement.start, device.placement.size
                try:
                    pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, device.profile_id, pynvml.byref(placement))
                except pynvml.NVMLError_InsufficientResources:
                    return False
            return True
        finally:
            pynvml.nvmlShutdown()
            sim.uninstall()


@pytest.mark.parametrize("model_key", MODELS)
def test_counters_admit_exactly_the_sets_nvml_can_create(model_key: str) -> None:
    """For random sets of placements: co-allocatable by counters iff the simulated NVML creates them all."""
    pool = pool_of(model_key)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(picks=st.lists(st.integers(0, len(pool.devices) - 1), min_size=1, max_size=7, unique=True))
    def check(picks: list[int]) -> None:
        chosen = [pool.devices[i] for i in picks]
        assert _fits(pool, chosen) == _nvml_accepts(model_key, chosen), [d.name for d in chosen]

    os.environ.pop(sim.FAULTS_ENV, None)
    check()


@pytest.mark.parametrize("model_key", ["H100-SXM5-80GB", "A30", "RTX-PRO-6000-Blackwell-Server-Edition"])
def test_every_full_packing_of_one_profile_fits_the_counters(model_key: str) -> None:
    """All placements of a non-media profile together fit (e.g. 7x 1g); a second +me never does."""
    pool = pool_of(model_key)
    by_profile: dict[int, list[Device]] = {}
    for device in (d for d in pool.devices if not d.shared):
        by_profile.setdefault(device.profile_id or 0, []).append(device)
    model = CATALOG.model(model_key)
    for profile_id, devices in by_profile.items():
        profile = model.profile_by_id(profile_id)
        disjoint = [d for d in devices if d.placement and d.placement.start % d.placement.size == 0]
        take = disjoint[: profile.instance_count]
        assert _fits(pool, take), profile.name
        if profile.instance_count == 1 and len(devices) > 1:
            first = devices[0]
            assert first.placement is not None
            apart = [d for d in devices[1:] if d.placement and not d.placement.overlaps(first.placement)]
            assert not _fits(pool, [first, apart[0]]), f"two {profile.name} instances must not fit"


def test_mig_disabled_gpu_publishes_one_whole_gpu_device() -> None:
    pool = pool_of("H100-SXM5-80GB", "A100-SXM4-40GB", mig_enabled=False)
    assert [d.name for d in pool.devices] == ["gpu-0", "gpu-1"]
    assert pool.counter_sets == ()
    h100 = pool.devices[0]
    assert h100.type is DeviceType.GPU
    assert h100.attributes["uuid"][1].startswith("GPU-")  # type: ignore[union-attr]
    assert h100.capacity["memory"] == CATALOG.model("H100").total_memory_mib * 2**20
    assert h100.capacity["multiprocessors"] == 132
    assert h100.counter_set is None


def test_mixed_node_publishes_no_whole_gpu_for_a_mig_gpu() -> None:
    inventory = example_inventory(["H100-SXM5-80GB", "H100-SXM5-80GB"])
    first, second = inventory.gpus
    disabled = dataclasses.replace(
        second,
        gpu=dataclasses.replace(second.gpu, mig_mode=dataclasses.replace(second.gpu.mig_mode, current=0)),  # type: ignore[arg-type]
    )
    pool = build_pool(dataclasses.replace(inventory, gpus=(first, disabled)), DeviceModelConfig())
    assert [d.name for d in pool.devices if d.type is DeviceType.GPU] == ["gpu-1"]
    assert {d.gpu_minor for d in pool.devices if d.type is DeviceType.MIG} == {0}
    assert [cs.name for cs in pool.counter_sets] == ["gpu-0-counter-set"]


def test_profile_filters_per_model_and_default() -> None:
    config = DeviceModelConfig(
        profiles={"*": ProfileFilter(deny=("*+me",)), "A100-SXM4-40GB": ProfileFilter(allow=("1g.*", "7g.*"))}
    )
    pool = pool_of("H100-SXM5-80GB", "A100-SXM4-40GB", config=config)
    h100 = {d.profile_name for d in pool.devices if d.gpu_minor == 0}
    a100 = {d.profile_name for d in pool.devices if d.gpu_minor == 1}
    assert "1g.10gb+me" not in h100
    assert "1g.10gb" in h100
    assert a100 == {"1g.5gb", "1g.5gb+me", "1g.10gb", "7g.40gb"}  # the model's own entry replaces '*'
    # filters hide devices; they never change the memory slices.  An aggregate counter only the hidden
    # devices could exceed is implied by the rest and left out (without +me nothing needs the OFA counter).
    unfiltered = pool_of("H100-SXM5-80GB", "A100-SXM4-40GB")
    for filtered_set, full_set in zip(pool.counter_sets, unfiltered.counter_sets, strict=True):
        slices = {k: v for k, v in full_set.counters.items() if k.startswith("memory-slice-")}
        assert {k: v for k, v in filtered_set.counters.items() if k.startswith("memory-slice-")} == slices
        assert set(filtered_set.counters) <= set(full_set.counters)
    assert "ofa-engines" in unfiltered.counter_sets[0].counters
    assert "ofa-engines" not in pool.counter_sets[0].counters


def test_excluded_gpus_by_uuid_and_pci_bus_id() -> None:
    inventory = example_inventory(["H100", "H100", "H100"])
    uuid1, bus2 = inventory.gpus[1].gpu.uuid, inventory.gpus[2].gpu.pci_bus_id
    config = DeviceModelConfig(exclude_gpus=(uuid1.lower(), "0000:" + bus2.split(":", 1)[1].lower()))
    pool = build_pool(inventory, config)
    assert {d.gpu_minor for d in pool.devices} == {0}
    assert pool.excluded_gpus == (uuid1, inventory.gpus[2].gpu.uuid)


def test_attributes_and_capacities_follow_the_vocabulary() -> None:
    pool = pool_of("H100-SXM5-80GB")
    device = next(d for d in pool.devices if d.profile_name == "1g.20gb" and d.placement.start == 6)  # type: ignore[union-attr]
    names = {a.name for a in ATTRIBUTES if DeviceType.MIG in a.on}
    assert set(device.attributes) <= names
    assert {a.name for a in ATTRIBUTES if DeviceType.MIG in a.on and a.always} <= set(device.attributes)
    assert set(device.capacity) == {c.name for c in CAPACITIES}
    assert device.attributes["profile"][1] == "1g.20gb"
    assert device.attributes["placementStart"][1] == 6
    assert device.attributes["placementSize"][1] == 2
    assert device.attributes["computeSlices"][1] == 1
    assert device.attributes["architecture"][1] == "Hopper"
    assert device.attributes["cudaComputeCapability"][1] == "9.0.0"
    assert device.attributes["driverVersion"][1] == "580.65.6"
    assert device.attributes["resource.kubernetes.io/pciBusID"][1] == "0000:1b:00.0"
    assert device.capacity["multiprocessors"] == 26
    assert device.capacity["memory"] == 20096 * 2**20
    # its SMs, engines and memory are implied by its memory slices on an H100 (devicemodel/counters.py)
    assert device.consumes == {
        "memory-slice-6": 1,
        "memory-slice-7": 1,
    }


def test_static_policy_lists_small_profiles_from_the_top_and_large_from_the_bottom() -> None:
    devices = render_slices(pool_of("H100-SXM5-80GB"), "node-a", generation=1)[1]["spec"]["devices"]
    starts = {}
    for device in (d for d in devices if "shared" not in d["attributes"]):
        starts.setdefault(device["attributes"]["profile"]["string"], []).append(
            device["attributes"]["placementStart"]["int"]
        )
    assert starts["1g.10gb"] == [6, 5, 4, 3, 2, 1, 0]
    assert starts["2g.20gb"] == [4, 2, 0]
    assert starts["3g.40gb"] == [0, 4]
    profiles_in_order = list(dict.fromkeys(d["attributes"]["profile"]["string"] for d in devices))
    assert profiles_in_order.index("1g.10gb") < profiles_in_order.index("3g.40gb") < profiles_in_order.index("7g.80gb")


@pytest.mark.parametrize("shared_devices", [False, True], ids=["default", "shared-devices"])
@pytest.mark.parametrize("model_key", MODELS)
def test_eight_gpus_of_each_model_stay_within_the_api_limits(model_key: str, shared_devices: bool) -> None:
    """As the default publishes them, and with ``sharedDevices: true`` (the most devices a node publishes)."""
    pool = pool_of(*[model_key] * 8, config=DeviceModelConfig(shared_devices=shared_devices))
    slices = render_slices(pool, "big-node", generation=1)
    names: set[str] = set()
    for item in slices:
        assert validate("resource.k8s.io", "v1", "ResourceSlice", item, None, None) == []
        spec = item["spec"]
        assert spec["pool"]["resourceSliceCount"] == len(slices)
        assert ("devices" in spec) != ("sharedCounters" in spec)
        for device in spec.get("devices", []):
            assert device["name"] not in names
            names.add(device["name"])
    counter_slices = [s for s in slices if "sharedCounters" in s["spec"]]
    assert sum(len(s["spec"]["sharedCounters"]) for s in counter_slices) == 8


def test_several_gpus_share_a_device_slice() -> None:
    slices = example_slices(["H100"] * 3)
    device_slices = [s for s in slices if "devices" in s["spec"]]
    # 25 exclusive devices per H100 (no shared ones by default), whole GPUs together; 64 per slice at most
    assert [len(s["spec"]["devices"]) for s in device_slices] == [2 * 25, 25]


@pytest.mark.parametrize("model_key", MODELS)
def test_example_inventory_equals_what_the_simulated_nvml_reports(
    simulated_node: OpenSimulatedNode, model_key: str
) -> None:
    with simulated_node(model_key) as nvml:
        read = read_inventory(nvml)
    example = example_inventory([model_key], driver_version=read.driver_version)
    assert read.cuda_driver_version == example.cuda_driver_version
    (got,), (want,) = read.gpus, example.gpus
    assert got.profiles == want.profiles
    assert got.gpu_instances == want.gpu_instances
    ignore = {"uuid": "", "pci_bus_id": "", "numa_node": None}
    assert dataclasses.replace(got.gpu, **ignore) == dataclasses.replace(want.gpu, **ignore)  # type: ignore[arg-type]


@pytest.mark.parametrize("libyaml", [True, False], ids=["libyaml", "pure-python-yaml"])
@pytest.mark.parametrize(
    ("model_key", "shared_devices"),
    [("H100-SXM5-80GB", False), ("A100-SXM4-40GB", False), ("H100-SXM5-80GB", True)],
    ids=["H100-SXM5-80GB", "A100-SXM4-40GB", "H100-SXM5-80GB-shared-devices"],
)
def test_golden_slices(model_key: str, shared_devices: bool, libyaml: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reviewed by hand against hack/data/mig-profiles.yaml; regenerate with UPDATE_GOLDEN=1, review the diff.

    Rendered as ``migdra slices -o yaml`` prints them, which must not depend on PyYAML having libyaml.
    The default configuration (no shared devices) and, for the H100, ``sharedDevices: true``.
    """
    if not libyaml:
        monkeypatch.delattr(yaml, "CSafeDumper", raising=False)
    path = GOLDEN / f"slices-1x{model_key}{'-shared-devices' if shared_devices else ''}.yaml"
    pool = pool_of(model_key, config=DeviceModelConfig(shared_devices=shared_devices))
    rendered = slices_view.render(render_slices(pool, "node-a", generation=1), pool, "yaml")
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(rendered)
    assert rendered == path.read_text()


def _slice_devices(slices: list[dict[str, Any]]) -> dict[str, Any]:
    return {d["name"]: d for s in slices for d in s["spec"].get("devices", [])}


def test_foreign_instance_withholds_its_overlapping_placements_and_nothing_else(
    simulated_node: OpenSimulatedNode,
) -> None:
    h100 = CATALOG.model("H100-SXM5-80GB")
    three_g = h100.profile_by_name("3g.40gb")
    with simulated_node("H100-SXM5-80GB:2") as nvml:
        before_inventory = read_inventory(nvml)
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)  # an admin, not migdra, carves GPU 0
        placement = pynvml.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = 4, 4
        pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, three_g.profile_id, pynvml.byref(placement))
        after_inventory = read_inventory(nvml)
    config = DeviceModelConfig()
    before, after = build_pool(before_inventory, config), build_pool(after_inventory, config)
    before_slices = _slice_devices(render_slices(before, "n", 1))
    after_slices = _slice_devices(render_slices(after, "n", 1))

    withheld = set(before_slices) - set(after_slices)
    assert withheld == {d.name for d in before.devices if d.gpu_minor == 0 and d.placement and d.placement.end > 4}
    assert "gpu-0-mig-3g40gb-9-4" in withheld
    assert "gpu-0-mig-7g80gb-0-0" in withheld
    assert "gpu-0-mig-3g40gb-9-0" in after_slices
    assert set(after_slices) <= set(before_slices)
    assert all(after_slices[name] == before_slices[name] for name in after_slices)  # untouched devices
    assert [(f.gpu_minor, f.gpu_instance_id, f.profile_name, str(f.placement)) for f in after.foreign_instances] == [
        (0, 2, "3g.40gb", "4:4")
    ]

    counters_before = {cs.name: dict(cs.counters) for cs in before.counter_sets}
    counters_after = {cs.name: dict(cs.counters) for cs in after.counter_sets}
    assert counters_after["gpu-1-counter-set"] == counters_before["gpu-1-counter-set"]
    gpu0 = counters_after["gpu-0-counter-set"]
    assert [gpu0[f"memory-slice-{i}"] for i in range(8)] == [1, 1, 1, 1, 0, 0, 0, 0]
    # the foreign 3g.40gb holds no OFA: the +me placements left (slices 0-3) still need the counter; the
    # SMs and memory left are implied by the free memory slices (devicemodel/counters.py)
    assert gpu0["ofa-engines"] == 1
    assert "multiprocessors" not in gpu0
    assert "memory" not in gpu0

    # once migdra owns that instance (it is in the checkpoint), everything is published again
    owned = build_pool(after_inventory, config, owned_instances={(after_inventory.gpus[0].gpu.uuid, 2)})
    assert _slice_devices(render_slices(owned, "n", 1)) == before_slices
    assert owned.foreign_instances == ()


def test_pcie_root_and_numa_node_are_published_only_when_known() -> None:
    inventory = example_inventory(["A30"])
    entry = inventory.gpus[0]
    known = dataclasses.replace(entry, gpu=dataclasses.replace(entry.gpu, pcie_root="pci0000:17", numa_node=1))
    unknown = dataclasses.replace(entry, gpu=dataclasses.replace(entry.gpu, pcie_root=None, numa_node=None))
    with_root = build_pool(dataclasses.replace(inventory, gpus=(known,)), DeviceModelConfig()).devices[0]
    without = build_pool(dataclasses.replace(inventory, gpus=(unknown,)), DeviceModelConfig()).devices[0]
    assert with_root.attributes["resource.kubernetes.io/pcieRoot"][1] == "pci0000:17"
    assert with_root.attributes["resource.kubernetes.io/numaNode"][1] == 1
    assert "resource.kubernetes.io/pcieRoot" not in without.attributes
    assert "resource.kubernetes.io/numaNode" not in without.attributes


def test_brand_and_addressing_mode_are_published_as_nvidia_spells_them_and_only_when_nvml_answers() -> None:
    """Selectors written for NVIDIA's driver compare ``brand == 'Nvidia'`` and ``addressingMode == 'ATS'``:
    the same strings, on whole GPUs and on every MIG device (inherited from the parent)."""
    for model_key, mig_enabled, addressing in (("GH200-96GB", True, "ATS"), ("H100", False, "None")):
        devices = pool_of(model_key, mig_enabled=mig_enabled).devices
        assert {d.attributes["brand"] for d in devices} == {(ValueType.STRING, "Nvidia")}
        assert {d.attributes["addressingMode"] for d in devices} == {(ValueType.STRING, addressing)}
    inventory = example_inventory(["A30"])
    entry = inventory.gpus[0]
    for brand, addressing, published in ((None, None, {}), (19, 7, {"brand": "nvml-19", "addressingMode": "nvml-7"})):
        gpu = dataclasses.replace(entry.gpu, nvml_brand=brand, nvml_addressing_mode=addressing)
        node = dataclasses.replace(inventory, gpus=(dataclasses.replace(entry, gpu=gpu),))
        device = build_pool(node, DeviceModelConfig()).devices[0]
        got = {name: device.attributes[name][1] for name in ("brand", "addressingMode") if name in device.attributes}
        assert got == published


def test_the_attribute_table_of_the_docs_is_the_vocabulary() -> None:
    """docs/device-model.md lists every attribute migdra publishes, as the vocabulary says, and no other."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "device-model.md").read_text()
    rows = {line.split("|")[1].strip().strip("`") for line in text.splitlines() if line.startswith("| `")}
    for spec in ATTRIBUTES:
        on = ", ".join(t.value for t in sorted(spec.on, key=lambda t: t.value != "gpu"))
        row = f"| `{spec.name}` | {spec.value_type.value} | {on} | {'yes' if spec.always else 'when known'} |"
        assert row in text, row
    capacities = {c.name for c in CAPACITIES}
    assert rows - capacities == {spec.name for spec in ATTRIBUTES}


def test_an_instance_being_created_at_a_recorded_placement_is_not_foreign() -> None:
    inventory = example_inventory(["H100"])
    entry = inventory.gpus[0]
    placement = Placement(start=4, size=4)
    creating = GpuInstanceInfo(entry.gpu.uuid, 2, 9, placement)  # 3g.40gb, ID not recorded yet
    node = dataclasses.replace(inventory, gpus=(dataclasses.replace(entry, gpu_instances=(creating,)),))
    ours = build_pool(node, DeviceModelConfig(), owned_placements={(entry.gpu.uuid, 9, placement)})
    assert ours.foreign_instances == ()
    assert len(ours.devices) == 25  # every exclusive device of the H100, none withheld
    elsewhere = {(entry.gpu.uuid, 5, Placement(start=0, size=4))}  # another profile, another placement
    other_profile = build_pool(node, DeviceModelConfig(), owned_placements=elsewhere)
    assert [f.gpu_instance_id for f in other_profile.foreign_instances] == [2]
