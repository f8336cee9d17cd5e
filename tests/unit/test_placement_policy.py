"""Placement policies: each one's order on small cases checked by hand, and what kube-scheduler's
allocator (ported) then picks from the published slices.

H100-SXM5-80GB placements (hack/data/mig-profiles.yaml): 1g.10gb at 0..6, 1g.20gb and 2g.20gb at even
starts (1g.20gb also at 6), 3g.40gb at 0 and 4, 4g.40gb and 7g.80gb at 0.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dra_driver.deviceclasses import DEVICECLASS_DIR, deviceclass_documents
from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.examples import example_inventory
from dra_driver.devicemodel.fragmentation import (
    capability,
    fits,
    free_slices,
    gpu_profiles,
    most_instances,
    placement_loss,
)
from dra_driver.devicemodel.layout import plan_slices, render_slices
from dra_driver.devicemodel.policy import (
    MAX_DEVICES_PER_SLICE,
    PLACEMENT_POLICIES,
    DynamicPlacementPolicy,
    placement_policy,
)
from dra_driver.devicemodel.pool import Device, NodePool, build_pool
from dra_driver.mig.catalog import Placement
from dra_driver.tools.allocation import DEFAULT_FEATURES
from dra_driver.tools.allocation.features import Features
from dra_driver.tools.allocation.pools import gather_pools
from dra_driver.tools.packing.simulation import SimNode
from dra_driver.tools.packing.workloads import KINDS
from tests.sim_objects import claim_view

H100 = "H100-SXM5-80GB"
CLASSES = deviceclass_documents(DEVICECLASS_DIR, "gpu.migdra.io")


def pool_of(*models: str, shared_devices: bool = False) -> NodePool:
    return build_pool(example_inventory(list(models)), DeviceModelConfig(shared_devices=shared_devices))


# The default (exclusive devices only) and ``sharedDevices: true`` (each GPU's shared devices after them).
WITH_AND_WITHOUT_SHARED_DEVICES = pytest.mark.parametrize(
    "shared_devices", [False, True], ids=["default", "shared-devices"]
)


def first(policy: str, pool: NodePool, profile: str, allocated: frozenset[str] = frozenset()) -> Device:
    """The first device of ``profile`` in the published order: what first-fit over the slices tries first."""
    groups = placement_policy(policy).slice_groups(pool, allocated)
    by_name = {d.name: d for d in pool.devices}
    free_first = [
        d
        for group in groups
        for d in group
        if d.profile_name == profile and not d.shared and _free(d, [by_name[n] for n in allocated])
    ]
    return free_first[0]


def _free(device: Device, held: list[Device]) -> bool:
    return not any(
        h.gpu_minor == device.gpu_minor and h.placement and device.placement and h.placement.overlaps(device.placement)
        for h in held
    )


def name(minor: int, profile: str, start: int) -> str:
    ids = {"1g.10gb": 19, "1g.20gb": 15, "2g.20gb": 14, "3g.40gb": 9, "4g.40gb": 5, "7g.80gb": 0}
    return f"gpu-{minor}-mig-{profile.replace('.', '')}-{ids[profile]}-{start}"


# -- orders, by hand -------------------------------------------------------------------------------


def test_dynamic_puts_the_first_1g_of_an_empty_h100_where_it_keeps_the_4g_and_two_2g() -> None:
    device = first("dynamic", pool_of(H100), "1g.10gb")
    assert device.placement == Placement(start=6, size=1)
    # It blocks no 4g (0-3), keeps a 3g (0-3) and the 2g placements at 0 and 2: the least any 1g can cost.
    profiles = gpu_profiles(d for d in pool_of(H100).devices)
    losses = {
        start: placement_loss(profiles, frozenset(range(8)), Placement(start=start, size=1)) for start in range(7)
    }
    assert losses[6] == min(losses.values())
    assert all(losses[6] < loss for start, loss in losses.items() if start != 6)


def test_dynamic_is_best_fit_across_gpus() -> None:
    pool = pool_of(H100, H100)
    held = frozenset({name(1, "3g.40gb", 0)})  # GPU 1 already cannot host a 7g; GPU 0 is empty
    assert first("dynamic", pool, "1g.10gb", held).name == name(1, "1g.10gb", 6)
    assert first("dynamic", pool, "2g.20gb", held).name == name(1, "2g.20gb", 4)
    assert first("dynamic", pool, "7g.80gb", held).name == name(0, "7g.80gb", 0)


def test_dynamic_fills_the_hole_that_costs_nothing_larger() -> None:
    pool = pool_of(H100)
    held = frozenset({name(0, "1g.10gb", 6), name(0, "1g.10gb", 4)})
    # Free: 0-3, 5, 7.  A 1g at 5 costs no 2g/3g/4g placement that is still possible; anywhere in 0-3 would.
    assert first("dynamic", pool, "1g.10gb", held).name == name(0, "1g.10gb", 5)
    assert first("dynamic", pool, "2g.20gb", held).name in {name(0, "2g.20gb", 0), name(0, "2g.20gb", 2)}


def test_static_small_from_the_top_large_from_slice_zero_gpus_in_minor_order() -> None:
    pool = pool_of(H100, H100)
    assert first("static", pool, "1g.10gb").name == name(0, "1g.10gb", 6)
    assert first("static", pool, "3g.40gb").name == name(0, "3g.40gb", 0)
    # Blind to occupancy: the same slices whatever is allocated.
    held = frozenset({name(0, "7g.80gb", 0)})
    static = placement_policy("static")
    assert static.slice_groups(pool, held) == static.slice_groups(pool, frozenset())


@WITH_AND_WITHOUT_SHARED_DEVICES
def test_name_order_is_one_slice_per_gpu_devices_by_name(shared_devices: bool) -> None:
    pool = pool_of(H100, H100, H100, shared_devices=shared_devices)
    groups = placement_policy("name-order").slice_groups(pool, frozenset())
    # each GPU's exclusive devices, then (sharedDevices: true) each GPU's shared ones
    assert [any(d.shared for d in group) for group in groups] == [False] * 3 + [True] * (3 if shared_devices else 0)
    for group in groups:
        assert len({d.gpu_minor for d in group}) == 1
        assert [d.name for d in group] == sorted(d.name for d in group)
    assert first("name-order", pool, "1g.10gb").placement == Placement(start=0, size=1)  # the scatter


@WITH_AND_WITHOUT_SHARED_DEVICES
def test_hami_1g_and_3g_from_the_highest_start_others_from_the_lowest_fixed_gpu_order(shared_devices: bool) -> None:
    pool = pool_of(H100, H100, shared_devices=shared_devices)
    assert first("hami", pool, "1g.10gb").name == name(0, "1g.10gb", 6)
    assert first("hami", pool, "3g.40gb").name == name(0, "3g.40gb", 4)
    assert first("hami", pool, "2g.20gb").name == name(0, "2g.20gb", 0)
    assert first("hami", pool, "1g.20gb").name == name(0, "1g.20gb", 6)
    groups = placement_policy("hami").slice_groups(pool, frozenset())
    # exclusive slices, then (sharedDevices: true) shared ones
    assert [group[0].gpu_minor for group in groups] == ([0, 1, 0, 1] if shared_devices else [0, 1])
    assert [all(d.shared for d in group) for group in groups] == [False, False] + [True, True] * shared_devices


@WITH_AND_WITHOUT_SHARED_DEVICES
@pytest.mark.parametrize("policy", list(PLACEMENT_POLICIES))
def test_every_policy_lists_each_device_once_within_the_slice_limit(policy: str, shared_devices: bool) -> None:
    pool = pool_of(*[H100] * 8, shared_devices=shared_devices)
    for held in (frozenset(), frozenset({name(3, "3g.40gb", 4), name(5, "1g.10gb", 2)})):
        groups = placement_policy(policy).slice_groups(pool, held)
        listed = [d.name for group in groups for d in group]
        assert sorted(listed) == sorted(d.name for d in pool.devices)
        assert all(0 < len(group) <= MAX_DEVICES_PER_SLICE for group in groups)
        assert placement_policy(policy).slice_groups(pool, held) == groups  # deterministic


@WITH_AND_WITHOUT_SHARED_DEVICES
def test_dynamic_not_interleaved_keeps_each_profile_in_one_slice_so_the_1_35_shuffle_cannot_reorder_it(
    shared_devices: bool,
) -> None:
    """What the plugin publishes to a 1.35 control plane (slices visited in no fixed order)."""
    pool = pool_of(*[H100] * 8, shared_devices=shared_devices)
    groups = DynamicPlacementPolicy(interleave=False).slice_groups(pool, frozenset())
    for profile, shared in {(d.profile_name, d.shared) for d in pool.devices}:
        kind = (profile, shared)
        holding = {index for index, group in enumerate(groups) for d in group if (d.profile_name, d.shared) == kind}
        assert len(holding) == 1, (profile, shared)


def _walk(groups: list[tuple[Device, ...]]) -> list[Device]:
    return [device for group in groups for device in group]


@pytest.mark.parametrize(
    "held",
    [
        frozenset(),
        frozenset({name(0, "3g.40gb", 4), name(1, "4g.40gb", 0), name(5, "1g.10gb", 6), name(2, "7g.80gb", 0)}),
    ],
)
@WITH_AND_WITHOUT_SHARED_DEVICES
def test_interleaved_lists_each_profiles_best_first_and_changes_no_choice(
    held: frozenset[str], shared_devices: bool
) -> None:
    """Interleaved (1.36+), the best fitting device of every profile comes ahead of every second best:
    a claim for any profile finds its device within the first few of the node's list instead of after
    every smaller profile's devices, and it is the device the runs would give -- for one profile and
    for a selector several profiles satisfy (the first that fits in the walk)."""
    pool = pool_of(*[H100] * 8, shared_devices=shared_devices)
    interleaved = _walk(DynamicPlacementPolicy().slice_groups(pool, held))
    without = _walk(DynamicPlacementPolicy(interleave=False).slice_groups(pool, held))
    kinds = {(d.profile_name, d.shared) for d in pool.devices}
    free = free_slices(pool, held)

    def first_fit(walk: list[Device], wanted: Callable[[Device], bool]) -> tuple[int, str] | None:
        for index, device in enumerate(walk):
            if device.name not in held and wanted(device) and fits(device, free):
                return index, device.name
        return None

    for profile, shared in kinds:
        found = first_fit(interleaved, lambda d, p=profile, s=shared: (d.profile_name, d.shared) == (p, s))
        expected = first_fit(without, lambda d, p=profile, s=shared: (d.profile_name, d.shared) == (p, s))
        assert (found and found[1]) == (expected and expected[1]), (profile, shared)
        if found is not None:
            assert found[0] < len(kinds), (profile, shared, found)  # within the first rank
    for minimum in (1, 2, 4):  # "at least this many memory slices": several profiles satisfy it
        wanted = lambda d, m=minimum: not d.shared and d.placement is not None and d.placement.size >= m  # noqa: E731
        assert (first_fit(interleaved, wanted) or (0, ""))[1] == (first_fit(without, wanted) or (0, ""))[1]


@WITH_AND_WITHOUT_SHARED_DEVICES
def test_slice_names_sort_as_the_policy_lists_them_beyond_ten_slices(shared_devices: bool) -> None:
    pool = pool_of(*[H100] * 12, shared_devices=shared_devices)
    contents = plan_slices(pool, "node-a", placement_policy("name-order"))
    device_slices = [c.name for c in contents if c.devices]
    # one per GPU for its exclusive devices, then (sharedDevices: true) one per GPU for its shared ones
    count = 24 if shared_devices else 12
    assert len(device_slices) == count
    assert sorted(device_slices) == device_slices
    assert device_slices[0].endswith("-devices-000")
    assert device_slices[count - 1].endswith(f"-devices-{count - 1:03d}")


def test_unknown_policy_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown placement policy 'best'; known: static, dynamic, name-order, hami"):
        placement_policy("best")


# -- what the allocator then picks -----------------------------------------------------------------


def _claim(uid: str, kind: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": uid, "namespace": "t", "uid": uid},
        "spec": KINDS[kind].spec(),
    }


def place(policy: str, models: list[str], kinds: list[str]) -> list[str | None]:
    node = SimNode("node-1", models, placement_policy(policy), "gpu.migdra.io", lag=0)
    placed: list[str | None] = []
    for index, kind in enumerate(kinds):
        claim = claim_view(_claim(f"c{index}", kind))
        allocation = node.try_allocate(claim, CLASSES, None)
        if allocation is None:
            placed.append(None)
            continue
        node.add(f"c{index}", claim, allocation)
        node.publish(index + 1)
        placed.append(str(allocation["devices"]["results"][0]["device"]))
    return placed


def test_the_allocator_takes_what_the_dynamic_order_says_and_a_4g_still_fits_after_three_1g() -> None:
    placed = place("dynamic", [H100], ["1g", "1g", "1g", "4g"])
    assert placed == [name(0, "1g.10gb", 6), name(0, "1g.10gb", 5), name(0, "1g.10gb", 4), name(0, "4g.40gb", 0)]


def test_name_order_scatters_three_1g_over_the_4g_range() -> None:
    placed = place("name-order", [H100], ["1g", "1g", "1g", "4g"])
    assert placed == [name(0, "1g.10gb", 0), name(0, "1g.10gb", 1), name(0, "1g.10gb", 2), None]


def test_dynamic_sends_small_instances_to_the_gpu_that_lost_its_7g_already() -> None:
    placed = place("dynamic", [H100, H100], ["3g", "1g", "1g", "7g"])
    assert placed[0] is not None
    assert placed[0].startswith("gpu-0-")
    assert all(p is not None and p.startswith("gpu-0-") for p in placed[1:3])
    assert placed[3] == name(1, "7g.80gb", 0)


# -- fragmentation arithmetic against brute force --------------------------------------------------


def _brute_most(placements: list[Placement], free: frozenset[int]) -> int:
    fitting = [p for p in placements if set(p.slices()) <= free]
    for size in range(len(fitting), 0, -1):
        for chosen in itertools.combinations(fitting, size):
            if not any(a.overlaps(b) for a, b in itertools.combinations(chosen, 2)):
                return size
    return 0


@settings(max_examples=60, deadline=None)
@given(st.frozensets(st.integers(min_value=0, max_value=7)))
def test_most_instances_is_exact(free: frozenset[int]) -> None:
    profiles = gpu_profiles(pool_of(H100).devices)
    for profile in profiles:
        assert most_instances(profile, free) == _brute_most(list(profile.placements), free), profile.name
    assert len(capability(profiles, free)) == len(profiles)


def test_a_republish_is_one_generation_the_allocator_never_sees_two() -> None:
    """The re-published slices all carry the new generation and the same count, so the allocator takes
    the new complete set, never a mix of old and new with a device listed twice."""
    pool = pool_of(*[H100] * 4)
    held = frozenset({name(0, "3g.40gb", 0)})
    old = render_slices(pool, "node-1", 1, policy=DynamicPlacementPolicy())
    new = render_slices(pool, "node-1", 2, policy=DynamicPlacementPolicy(), allocated=held)
    assert {s["spec"]["pool"]["generation"] for s in new} == {2}
    gates = Features.from_names(DEFAULT_FEATURES)
    node = {"metadata": {"name": "node-1"}}
    # Every write order of the new slices: each intermediate state is old-complete or new-incomplete.
    for written in range(len(new) + 1):
        state = new[:written] + old[written:]
        (pool_seen,) = gather_pools(state, node, gates)
        assert not pool_seen.invalid
        assert pool_seen.incomplete == (0 < written < len(new))
