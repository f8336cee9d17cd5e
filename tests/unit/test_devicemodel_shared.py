"""Shared GPU-instance devices in the device model: one beside each exclusive MIG device whose profile can
hold several compute instances, the same placement, counters and attributes plus ``shared``, capacities
with the request policies that let several claims in; withheld and kept exactly as their exclusive twin;
after the exclusive devices in every placement policy; counted once by the occupancy code; published only
with ``sharedDevices: true`` (off by default); marked in ``migdra slices`` and ``migdra allocate`` output.

Every pool here is built with shared devices switched on (``SHARED``) unless the test is about the switch."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from dra_driver.cli import slices_view
from dra_driver.cli.allocate_command import _allocation_text, _named
from dra_driver.device_config import load_device_model_config
from dra_driver.devicemodel import example_inventory
from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.layout import render_slices
from dra_driver.devicemodel.naming import parse_shared_device_name, shared_device_name
from dra_driver.devicemodel.occupancy import occupancy
from dra_driver.devicemodel.policy import PLACEMENT_POLICIES, DynamicPlacementPolicy, placement_policy
from dra_driver.devicemodel.pool import Device, NodePool, build_pool
from dra_driver.devicemodel.vocabulary import (
    ATTRIBUTES,
    CAPACITIES,
    SHARE_CAPACITIES,
    DeviceType,
    ValueType,
    published_attribute_ids,
    published_capacity_ids,
)
from dra_driver.mig import Placement, load_catalog
from dra_driver.nvml.inventory import read_inventory
from dra_driver.nvml.types import GpuInstanceInfo
from dra_driver.resourceclaim import ResourceClaimView, parse_claims
from kubeletplugin.occupancy import compute_allocated_devices
from tests.sim_objects import claim_views

CATALOG = load_catalog()
DRIVER = "gpu.migdra.io"
H100 = "H100-SXM5-80GB"
SHARED = DeviceModelConfig(shared_devices=True)
"""The device model with shared devices switched on (``sharedDevices: true``): off by default."""


def pool_of(*models: str, config: DeviceModelConfig = SHARED) -> NodePool:
    return build_pool(example_inventory(list(models)), config)


def twins(pool: NodePool) -> list[tuple[Device, Device]]:
    """(exclusive, shared) pairs of the same placement."""
    exclusive = {(d.gpu_minor, d.profile_id, d.placement): d for d in pool.devices if not d.shared}
    return [(exclusive[(d.gpu_minor, d.profile_id, d.placement)], d) for d in pool.devices if d.shared]


@pytest.mark.parametrize("model_key", sorted(CATALOG.gpus))
def test_a_shared_device_for_every_placement_of_a_profile_with_share_sizes(model_key: str) -> None:
    model = CATALOG.model(model_key)
    pool = pool_of(model_key)
    expected = {(p.profile_id, pl.start) for p in model.gpu_instance_profiles if p.share_sizes for pl in p.placements}
    shared = [d for d in pool.devices if d.shared]
    assert {(d.profile_id, d.placement.start) for d in shared if d.placement} == expected
    assert len(shared) == len(expected)
    for device in shared:
        assert device.placement is not None
        assert parse_shared_device_name(device.name) == (0, device.profile_id, device.placement.start)


def test_a_shared_device_is_its_exclusive_twin_plus_sharing() -> None:
    pairs = twins(pool_of(H100))
    assert len(pairs) == 7
    for exclusive, shared in pairs:
        assert exclusive.placement is not None
        assert shared.name == shared_device_name(
            0, exclusive.profile_name or "", exclusive.profile_id or 0, exclusive.placement.start
        )
        assert dict(shared.attributes) == {
            **exclusive.attributes,
            "shared": (ValueType.BOOL, True),
        }
        assert shared.consumes == exclusive.consumes  # overlapping exclusive and shared exclude each other
        assert shared.counter_set == exclusive.counter_set
        assert dict(shared.capacity) == {**exclusive.capacity, "computeSlices": exclusive.compute_slices}
        assert "shared" not in exclusive.attributes
        assert "computeSlices" not in exclusive.capacity


def test_to_api_renders_allow_multiple_allocations_and_request_policies_as_strings() -> None:
    pool = pool_of(H100)
    device = next(d for d in pool.devices if d.name == "gpu-0-shared-3g40gb-9-4").to_api()
    assert device["allowMultipleAllocations"] is True
    capacity: dict[str, Any] = device["capacity"]  # type: ignore[assignment]
    assert capacity["computeSlices"] == {
        "value": "3",
        "requestPolicy": {"default": "1", "validValues": ["1", "2", "3"]},
    }
    for name in ("memory", "multiprocessors", "copyEngines", "decoders", "encoders", "jpegEngines", "ofaEngines"):
        assert capacity[name]["requestPolicy"] == {"default": "0", "validValues": ["0"]}, name
    assert capacity["memory"]["value"] == str(40448 * 2**20)  # the GPU instance's, whole
    assert device["attributes"]["shared"] == {"bool": True}  # type: ignore[index]
    exclusive = next(d for d in pool.devices if d.name == "gpu-0-mig-3g40gb-9-4").to_api()
    assert "allowMultipleAllocations" not in exclusive
    assert all("requestPolicy" not in c for c in exclusive["capacity"].values())  # type: ignore[attr-defined]


def test_share_sizes_come_from_the_catalog_profile() -> None:
    pool = pool_of(H100)
    model = CATALOG.model(H100)
    for device in (d for d in pool.devices if d.shared):
        sizes = model.profile_by_id(device.profile_id or 0).share_sizes
        policy = device.request_policies["computeSlices"]
        assert policy.valid_values == sizes
        assert policy.default == sizes[0]
        assert max(sizes) == device.capacity["computeSlices"]


def test_a_shared_device_admits_only_the_sizes_still_placeable_beside_its_shares() -> None:
    """CIs at 1:1 and 3:1 in the 4g GI at 0 (two 1-slice shares left of four): two slices are free but no
    2-slice placement, so that device admits 1 only; the same profile elsewhere, and its exclusive twin,
    stay as they are."""
    inventory = example_inventory([H100])
    gpu_uuid = inventory.gpus[0].gpu.uuid
    gi = Placement(start=0, size=4)
    shares = {(gpu_uuid, 5, gi): (Placement(start=1, size=1), Placement(start=3, size=1))}
    pool = build_pool(inventory, SHARED, share_compute_instances=shares)
    plain = pool_of(H100)
    changed = [(before, after) for before, after in zip(plain.devices, pool.devices, strict=True) if before != after]
    ((before, after),) = changed
    assert after.name == "gpu-0-shared-4g40gb-5-0"
    assert before.request_policies["computeSlices"].valid_values == (1, 2, 4)
    assert after.request_policies["computeSlices"].valid_values == (1,)
    assert after.request_policies["computeSlices"].default == 1
    one_share = build_pool(
        inventory, SHARED, share_compute_instances={(gpu_uuid, 5, gi): (Placement(start=0, size=1),)}
    )
    (device,) = [d for d in one_share.devices if d.name == "gpu-0-shared-4g40gb-5-0"]
    assert device.request_policies["computeSlices"].valid_values == (1, 2)  # 2:2 free; 4 is not


def test_profiles_without_share_sizes_and_unknown_models_get_no_shared_device() -> None:
    assert not any(d.shared for d in pool_of("RTX-PRO-6000-Blackwell-Server-Edition").devices)
    pool = pool_of(H100)
    assert {d.profile_name for d in pool.devices if d.shared} == {"2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}
    inventory = example_inventory([H100])
    entry = inventory.gpus[0]
    unknown = dataclasses.replace(entry, gpu=dataclasses.replace(entry.gpu, pci_device_id=0x1, name="NVIDIA Mystery"))
    mystery = build_pool(dataclasses.replace(inventory, gpus=(unknown,)), SHARED)
    assert mystery.devices
    assert not any(d.shared for d in mystery.devices)


def test_shared_devices_are_off_by_default() -> None:
    """Off unless an administrator sets ``sharedDevices: true``: kube-scheduler pays for every published
    device of every node it filters, for every pod, and at 64 nodes the 7 shared devices per H100 were a
    third of its DRA CPU per pod (docs/device-model.md, "Devices"; issue #36)."""
    assert DeviceModelConfig().shared_devices is False
    default = build_pool(example_inventory([H100]), DeviceModelConfig())
    assert not any(d.shared for d in default.devices)
    assert not any("-shared-" in d.name for d in default.devices)
    assert len(default.devices) == 25  # the H100's exclusive devices only


def test_shared_devices_setting_turns_them_on_and_off(tmp_path: Path) -> None:
    """The default publishes none; ``sharedDevices: true`` publishes the 7 of an H100 beside its 25
    exclusive devices (2g x3, 3g x2, 4g, 7g); ``sharedDevices: false`` none, the exclusive ones unchanged."""
    path = tmp_path / "config.yaml"
    configs: dict[str, DeviceModelConfig] = {}
    for name, text in (("default", "# nothing\n"), ("on", "sharedDevices: true\n"), ("off", "sharedDevices: false\n")):
        path.write_text(text)
        configs[name] = load_device_model_config(path)
    assert [configs[name].shared_devices for name in ("default", "on", "off")] == [False, True, False]
    pools = {name: pool_of(H100, config=config) for name, config in configs.items()}
    on = pools["on"]
    exclusive_names = [d.name for d in on.devices if not d.shared]
    assert len(exclusive_names) == 25
    shared_profiles = ["2g.20gb"] * 3 + ["3g.40gb"] * 2 + ["4g.40gb", "7g.80gb"]
    assert [d.profile_name for d in on.devices if d.shared] == shared_profiles
    for name in ("default", "off"):
        assert not any(d.shared for d in pools[name].devices), name
        assert [d.name for d in pools[name].devices] == exclusive_names, name
    assert pools["default"] == pools["off"]


def test_profile_filters_hide_the_shared_device_with_the_exclusive_one() -> None:
    from dra_driver.devicemodel.config import ProfileFilter

    pool = pool_of(H100, config=DeviceModelConfig(shared_devices=True, profiles={"*": ProfileFilter(deny=("3g.*",))}))
    assert not any(d.profile_name == "3g.40gb" for d in pool.devices)
    assert any(d.shared and d.profile_name == "4g.40gb" for d in pool.devices)


def test_a_foreign_instance_withholds_the_shared_device_as_the_exclusive_one_and_owned_ones_keep_both() -> None:
    inventory = example_inventory([H100])
    entry = inventory.gpus[0]
    gi = GpuInstanceInfo(entry.gpu.uuid, 2, 9, Placement(start=4, size=4))  # a 3g.40gb at 4
    carved = dataclasses.replace(inventory, gpus=(dataclasses.replace(entry, gpu_instances=(gi,)),))
    full = {d.name for d in build_pool(inventory, SHARED).devices}
    foreign = build_pool(carved, SHARED)
    withheld = full - {d.name for d in foreign.devices}
    assert "gpu-0-shared-3g40gb-9-4" in withheld
    assert "gpu-0-mig-3g40gb-9-4" in withheld
    assert "gpu-0-shared-7g80gb-0-0" in withheld
    assert "gpu-0-shared-2g20gb-14-4" in withheld
    assert {n.replace("-shared-", "-mig-") for n in withheld if "-shared-" in n} <= withheld
    assert "gpu-0-shared-3g40gb-9-0" not in withheld
    # migdra created that GPU instance (e.g. for shares): it is owned, and everything is published again
    owned = build_pool(carved, SHARED, owned_instances={(entry.gpu.uuid, 2)})
    assert {d.name for d in owned.devices} == full


def test_every_device_follows_the_vocabulary_shared_only_names_only_on_shared_devices() -> None:
    for device in pool_of(H100, "A30").devices:
        allowed = {a.name for a in ATTRIBUTES if device.type in a.on}
        assert set(device.attributes) <= allowed
        share = {c.name for c in SHARE_CAPACITIES} if device.shared else set()
        assert set(device.capacity) == {c.name for c in CAPACITIES} | share
        assert ("shared" in device.attributes) == device.shared
        assert len(device.attributes) + len(device.capacity) <= 32
    assert "shared" in published_attribute_ids(DRIVER)[DRIVER]
    assert "computeSlices" in published_capacity_ids(DRIVER)[DRIVER]
    assert DeviceType.MIG in next(a for a in ATTRIBUTES if a.name == "shared").on


def _run_of(device: Device) -> tuple[object, ...]:
    return (device.placement.size if device.placement else 0, device.compute_slices, device.profile_name, device.shared)


@pytest.mark.parametrize("policy", sorted(PLACEMENT_POLICIES))
def test_every_policy_lists_shared_devices_after_every_exclusive_one(policy: str) -> None:
    """Each kind in runs of its own (the dynamic policy as it publishes to 1.35: not interleaved)."""
    pool = pool_of(H100, "A100-SXM4-40GB", H100)
    chosen = DynamicPlacementPolicy(interleave=False) if policy == "dynamic" else placement_policy(policy)
    for held in (frozenset(), frozenset({"gpu-1-shared-3g20gb-9-0", "gpu-0-mig-1g10gb-19-6"})):
        listed = [d for group in chosen.slice_groups(pool, held) for d in group]
        kinds = [d.shared for d in listed]
        assert kinds == sorted(kinds), policy  # False (exclusive) first, then True (shared)
        assert sum(kinds) == 21


def test_interleaved_dynamic_lists_shared_devices_after_the_exclusive_ones_of_each_rank() -> None:
    """Interleaved (1.36+), the devices that fit come rank by rank -- each profile's best, then each
    profile's second best -- and inside each rank the exclusive profiles before the shared ones."""
    pool = pool_of(H100, "A100-SXM4-40GB", H100)
    for held in (frozenset(), frozenset({"gpu-1-shared-3g20gb-9-0", "gpu-0-mig-1g10gb-19-6"})):
        listed = [d for group in placement_policy("dynamic").slice_groups(pool, held) for d in group]
        ranks: list[list[Device]] = [[]]
        for device in listed:
            if _run_of(device) in {_run_of(d) for d in ranks[-1]}:
                ranks.append([])
            ranks[-1].append(device)
        assert len(ranks[0]) >= 14  # every exclusive and shared profile of both models has a best
        for rank in ranks:
            kinds = [d.shared for d in rank]
            assert kinds == sorted(kinds)
        assert sum(d.shared for d in listed) == 21


def test_static_orders_shared_devices_as_it_orders_exclusive_ones() -> None:
    pool = pool_of(H100)
    groups = placement_policy("static").slice_groups(pool, frozenset())
    listed = [d for group in groups for d in group]
    exclusive = [d.placement for d in listed if not d.shared and d.profile_name in {"2g.20gb", "3g.40gb"}]
    shared = [d.placement for d in listed if d.shared and d.profile_name in {"2g.20gb", "3g.40gb"}]
    assert shared == exclusive  # 2g from the top (4, 2, 0), 3g from slice 0


def test_dynamic_puts_a_shared_device_that_already_serves_claims_first() -> None:
    pool = pool_of(H100)
    policy = placement_policy("dynamic")
    empty = [
        d.name for g in policy.slice_groups(pool, frozenset()) for d in g if d.shared and d.profile_name == "2g.20gb"
    ]
    assert empty[0] == "gpu-0-shared-2g20gb-14-4"  # an empty GPU: the 2g that costs the least, as for exclusive ones
    held = frozenset({"gpu-0-shared-2g20gb-14-0"})
    busy = [d.name for g in policy.slice_groups(pool, held) for d in g if d.shared and d.profile_name == "2g.20gb"]
    assert busy[0] == "gpu-0-shared-2g20gb-14-0"  # adding a share there costs the GPU nothing more


def test_dynamic_treats_a_shared_device_with_allocations_as_holding_its_memory_slices() -> None:
    pool = pool_of(H100)
    policy = placement_policy("dynamic")
    held = frozenset({"gpu-0-shared-3g40gb-9-0"})  # slices 0-3
    listed = [d for g in policy.slice_groups(pool, held) for d in g if not d.shared and d.profile_name == "2g.20gb"]
    starts = [d.placement.start for d in listed if d.placement]
    assert starts[0] == 4  # 4 fits; 0 and 2 overlap the shared 3g, so they come last
    assert sorted(starts[1:]) == [0, 2]
    first_1g = next(d for g in policy.slice_groups(pool, held) for d in g if d.profile_name == "1g.10gb")
    assert first_1g.placement is not None
    assert first_1g.placement.start >= 4


def test_the_plugins_occupancy_counts_a_share_by_its_shared_device() -> None:
    claims = [
        {
            "metadata": {"namespace": "default", "name": name, "uid": f"uid-{name}"},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "gpu",
                                "driver": DRIVER,
                                "pool": "node-a",
                                "device": "gpu-0-shared-4g40gb-5-0",
                                "shareID": share,
                                "consumedCapacity": {"computeSlices": "2"},
                            }
                        ]
                    }
                }
            },
        }
        for name, share in (
            ("a", "0b7c4a52-5b1c-4c41-9c55-3e1f2d4b6a70"),
            ("b", "5b0f6b1e-3c1a-4d47-9a57-0c7e2a1d9f11"),
        )
    ]
    assert compute_allocated_devices(parse_claims(claims), DRIVER, "node-a") == {"gpu-0-shared-4g40gb-5-0"}


def test_the_cluster_occupancy_counts_two_shares_as_two_instances_of_one_placement_paid_once() -> None:
    slices = render_slices(pool_of(H100), "n1", generation=1)
    results = [
        ("c1", "gpu-0-shared-4g40gb-5-0", {"shareID": "0b7c4a52-5b1c-4c41-9c55-3e1f2d4b6a70"}),
        ("c2", "gpu-0-shared-4g40gb-5-0", {"shareID": "5b0f6b1e-3c1a-4d47-9a57-0c7e2a1d9f11"}),
    ]
    claims = [
        {
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [{"request": "r", "driver": DRIVER, "pool": "n1", "device": device, **extra}]
                    }
                }
            },
        }
        for name, device, extra in results
    ]
    (gpu,) = occupancy(slices, claim_views(claims), DRIVER)
    assert [(i.claim, i.placement_start, i.placement_size) for i in gpu.instances] == [("ns/c1", 0, 4), ("ns/c2", 0, 4)]
    assert gpu.free_slices == 4
    allocatable = {a.device for a in gpu.allocatable}
    assert "gpu-0-mig-3g40gb-9-4" in allocatable  # SMs left: 132 - 64 (paid once, not twice) >= 60
    assert not any("-shared-" in name for name in allocatable)  # shared devices are not listed beside their twins
    assert not any(a.placement_start < 4 for a in gpu.allocatable)


def test_slices_table_marks_shared_devices_and_leaves_exclusive_rows_alone() -> None:
    pool = pool_of(H100)
    table = slices_view.render(render_slices(pool, "node-a", generation=1), pool, "table")
    rows = {line.split()[0]: line for line in table.splitlines() if line.startswith("  gpu-")}
    assert rows["gpu-0-shared-4g40gb-5-0"].endswith("shared: computeSlices 4 (shares of 1,2,4)")
    assert rows["gpu-0-mig-4g40gb-5-0"].endswith("40448 MiB")
    without = build_pool(example_inventory([H100]), DeviceModelConfig(shared_devices=False))
    exclusive_table = slices_view.render(render_slices(without, "node-a", generation=1), without, "table")
    exclusive_rows = [line for line in exclusive_table.splitlines() if line.startswith("  gpu-")]
    assert all(line in table.splitlines() for line in exclusive_rows)


def test_allocate_text_names_the_share() -> None:
    claim = ResourceClaimView.model_validate({"metadata": {"namespace": "ns", "name": "c"}})
    result = {
        "devices": {
            "results": [
                {
                    "request": "r0",
                    "driver": DRIVER,
                    "pool": "n1",
                    "device": "gpu-0-shared-4g40gb-5-0",
                    "shareID": "0b7c4a52-5b1c-4c41-9c55-3e1f2d4b6a70",
                    "consumedCapacity": {"computeSlices": "2"},
                },
                {"request": "r1", "driver": DRIVER, "pool": "n1", "device": "gpu-0-mig-1g10gb-19-6"},
            ]
        }
    }
    out = _allocation_text({"node": "n1", "claims": _named([claim], [result])})
    assert (
        "r0: gpu.migdra.io/n1/gpu-0-shared-4g40gb-5-0 (share 0b7c4a52-5b1c-4c41-9c55-3e1f2d4b6a70: computeSlices 2)"
        in out
    )
    assert "r1: gpu.migdra.io/n1/gpu-0-mig-1g10gb-19-6\n" in out + "\n"


@pytest.mark.parametrize("model_key", sorted(load_catalog().gpus))
def test_the_request_policy_admits_exactly_the_compute_instance_sizes_nvml_offers_in_the_gpu_instance(
    model_key: str, simulated_node: Any
) -> None:
    """For every GPU model and every shared device it publishes, ``computeSlices``' valid values are the
    compute-instance sizes the (simulated) NVML reports inside a GPU instance of that profile, and its
    value the GPU instance's compute slices: what the scheduler may allocate, prepare can create."""
    with simulated_node(f"{model_key}:1") as nvml:
        gpu = nvml.list_gpus()[0]
        pool = build_pool(read_inventory(nvml), SHARED)
        shared = [device for device in pool.devices if device.gpu_uuid == gpu.uuid and "-shared-" in device.name]
        for device in shared:
            assert device.profile_id is not None
            assert device.placement is not None
            gi = nvml.create_gpu_instance(gpu.uuid, device.profile_id, device.placement).gpu_instance_id
            offered = {ci.slice_count for ci in nvml.compute_instance_profiles(gpu.uuid, gi)}
            policy = device.to_api()["capacity"]["computeSlices"]  # type: ignore[index]
            assert [int(v) for v in policy["requestPolicy"]["validValues"]] == sorted(offered), device.name
            assert int(policy["value"]) == max(offered), device.name
            nvml.destroy_gpu_instance(gpu.uuid, gi)
    models = load_catalog().gpus[model_key]
    expected = sum(len(profile.placements) for profile in models.gpu_instance_profiles if profile.share_sizes)
    assert len(shared) == expected
