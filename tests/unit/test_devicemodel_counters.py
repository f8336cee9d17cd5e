"""Counters the memory slices imply are left out of what a GPU publishes (dra_driver/devicemodel/counters.py):
exactly those, so the sets of devices kube-scheduler can allocate together stay what they were."""

from __future__ import annotations

import itertools

import pytest

from dra_driver.devicemodel import counters
from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.counters import implied_counters
from dra_driver.devicemodel.examples import example_inventory
from dra_driver.devicemodel.pool import _as_counters, _consumption, build_pool
from dra_driver.mig.catalog import resource_budget

MODELS = ["H100-SXM5-80GB", "A100-SXM4-40GB", "A30", "B200"]


def _full_consumption(model: str) -> tuple[list[tuple[frozenset[int], dict[str, int]]], dict[str, int]]:
    """Every placement of the model with every aggregate it consumes, and the whole GPU's budget."""
    gpu = example_inventory([model]).gpus[0]
    placements = [
        (frozenset(p.slices()), _consumption(profile)) for profile in gpu.profiles for p in profile.placements
    ]
    return placements, _as_counters(resource_budget(gpu.profiles))


def _fits(chosen: tuple[tuple[frozenset[int], dict[str, int]], ...], budget: dict[str, int], kept: set[str]) -> bool:
    slices = [s for placement, _ in chosen for s in placement]
    if len(slices) != len(set(slices)):
        return False
    return all(sum(used.get(c, 0) for _, used in chosen) <= budget[c] for c in kept)


@pytest.mark.parametrize("model", MODELS)
def test_leaving_the_implied_counters_out_changes_no_set_that_fits(model: str) -> None:
    """Every set of up to four placements fits the kept counters iff it fits all of them."""
    placements, budget = _full_consumption(model)
    dropped = implied_counters(placements, budget)
    kept = set(budget) - dropped
    everything = set(budget)
    for size in range(1, 5):
        for chosen in itertools.combinations(placements, size):
            assert _fits(chosen, budget, kept) == _fits(chosen, budget, everything), (model, chosen)


def test_on_an_h100_only_the_ofa_counter_is_needed() -> None:
    """Two +me instances each want the GPU's one OFA, on disjoint memory slices: only that counter keeps
    them apart; the SMs, memory and the other engines of disjoint placements never add up to more than
    the GPU has."""
    placements, budget = _full_consumption("H100-SXM5-80GB")
    assert set(budget) - implied_counters(placements, budget) == {"ofa-engines"}


def test_a_budget_reduced_by_a_foreign_instance_keeps_what_it_now_limits() -> None:
    """12 SMs left: two 1g (16 SMs each) on free slices would exceed it, so the counter stays."""
    placements = [(frozenset({0}), {"multiprocessors": 16}), (frozenset({1}), {"multiprocessors": 16})]
    assert implied_counters(placements, {"multiprocessors": 32}) == frozenset({"multiprocessors"})
    assert implied_counters(placements, {"multiprocessors": 31}) == frozenset()


def test_a_search_too_large_keeps_every_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(counters, "MAX_SETS_VISITED", 3)
    counters._implied.cache_clear()
    placements = [(frozenset({n}), {"multiprocessors": 1}) for n in range(6)]
    assert implied_counters(placements, {"multiprocessors": 100, "memory": 7}) == frozenset()


def test_published_devices_consume_only_kept_counters() -> None:
    pool = build_pool(example_inventory(["H100", "A30"]), DeviceModelConfig())
    for counter_set in pool.counter_sets:
        for device in (d for d in pool.devices if d.counter_set == counter_set.name):
            assert set(device.consumes) <= set(counter_set.counters)
