"""The controller's occupancy gauges, scraped from a fresh registry and parsed as Prometheus parses them:
per node and GPU the reserved and realized instances per profile, free and foreign memory slices, the
largest allocatable profile and the fragmentation index; series of what is gone are removed."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from dra_driver.clusterview import compute_cluster_occupancy
from dra_driver.controller.occupancy_metrics import OccupancyMetrics
from dra_driver.devicemodel import example_slices
from tests.sim_objects import claim_views

DRIVER = "gpu.migdra.io"
THREE_G_AT_4 = "gpu-0-mig-3g40gb-9-4"
ONE_G_AT_2 = "gpu-0-mig-1g10gb-19-2"


def claim(name: str, device: str, ready: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"driver": DRIVER, "pool": "n1", "device": device, "data": {"migUUID": f"MIG-{name}"}}
    entry["conditions"] = [{"type": "Ready", "status": str(ready), "reason": "Prepared", "message": ""}]
    result = {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": device}
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "status": {"allocation": {"devices": {"results": [result]}}, "devices": [entry]},
    }


def scrape(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    samples = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def series(name: str, gpu: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted({"node": "n1", "gpu": gpu, **labels}.items()))


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def test_gauges_per_node_and_gpu(registry: CollectorRegistry) -> None:
    metrics = OccupancyMetrics(registry)
    slices = example_slices(["H100", "H100"], node_name="n1")
    claims = [claim("a", THREE_G_AT_4, ready=True), claim("b", ONE_G_AT_2, ready=False)]
    metrics.update({"n1": compute_cluster_occupancy(slices, claim_views(claims), DRIVER)})
    samples = scrape(registry)
    assert samples[series("migdra_gpu_reserved_instances", "gpu-0", profile="3g.40gb")] == 1
    assert samples[series("migdra_gpu_reserved_instances", "gpu-0", profile="1g.10gb")] == 1
    assert samples[series("migdra_gpu_realized_instances", "gpu-0", profile="3g.40gb")] == 1
    assert samples[series("migdra_gpu_realized_instances", "gpu-0", profile="1g.10gb")] == 0  # reserved, not yet
    assert samples[series("migdra_gpu_free_memory_slices", "gpu-0")] == 3
    assert samples[series("migdra_gpu_free_memory_slices", "gpu-1")] == 8
    assert samples[series("migdra_gpu_foreign_memory_slices", "gpu-0")] == 0
    # free: 0, 1, 3 -> the largest that fits is 2g at 0 (two slices): fragmentation 1 - 2/3
    assert samples[series("migdra_gpu_largest_allocatable_memory_slices", "gpu-0")] == 2
    assert samples[series("migdra_gpu_largest_allocatable_profile", "gpu-0", profile="2g.20gb")] == 1
    assert samples[series("migdra_gpu_largest_allocatable_profile", "gpu-1", profile="7g.80gb")] == 1
    assert samples[series("migdra_gpu_fragmentation_ratio", "gpu-0")] == pytest.approx(1 - 2 / 3)
    assert samples[series("migdra_gpu_fragmentation_ratio", "gpu-1")] == 0
    (info,) = [labels for name, labels in samples if name == "migdra_gpu_info" and ("gpu", "gpu-0") in labels]
    assert dict(info)["gpu_uuid"].startswith("GPU-")
    assert not any(key[0] == "migdra_gpu_reserved_instances" and ("gpu", "gpu-1") in key[1] for key in samples)


@pytest.mark.parametrize(
    ("second_slices", "gone"),
    [
        pytest.param(
            example_slices(["H100"], node_name="n1"),
            [
                series("migdra_gpu_free_memory_slices", "gpu-1"),
                series("migdra_gpu_fragmentation_ratio", "gpu-1"),
                series("migdra_gpu_largest_allocatable_profile", "gpu-1", profile="7g.80gb"),
                series("migdra_gpu_reserved_instances", "gpu-0", profile="3g.40gb"),
                series("migdra_gpu_realized_instances", "gpu-0", profile="3g.40gb"),
                series("migdra_gpu_largest_allocatable_profile", "gpu-0", profile="4g.40gb"),
            ],
            id="gpu-and-claim-gone",
        ),
        pytest.param([], None, id="every-gpu-gone"),
    ],
)
def test_series_of_what_disappeared_are_removed(
    registry: CollectorRegistry,
    second_slices: list[dict[str, Any]],
    gone: list[tuple[str, tuple[tuple[str, str], ...]]] | None,
) -> None:
    metrics = OccupancyMetrics(registry)
    slices = example_slices(["H100", "H100"], node_name="n1")
    metrics.update(
        {"n1": compute_cluster_occupancy(slices, claim_views([claim("a", THREE_G_AT_4, ready=True)]), DRIVER)}
    )
    before = scrape(registry)
    metrics.update({"n1": compute_cluster_occupancy(second_slices, [], DRIVER)})
    after = scrape(registry)
    if gone is None:
        assert not [key for key in after if key[0].startswith("migdra_gpu_")]
        return
    assert all(key in before for key in gone)
    assert not [key for key in gone if key in after]
    assert after[series("migdra_gpu_largest_allocatable_profile", "gpu-0", profile="7g.80gb")] == 1
    assert after[series("migdra_gpu_free_memory_slices", "gpu-0")] == 8


def test_an_update_of_one_pool_leaves_the_other_pools_series(registry: CollectorRegistry) -> None:
    """The controller computes only the pools that changed: the others' series must stay."""
    metrics = OccupancyMetrics(registry)
    first, second = example_slices(["H100"], node_name="n1"), example_slices(["H100"], node_name="n2")
    metrics.update(
        {"n1": compute_cluster_occupancy(first, [], DRIVER), "n2": compute_cluster_occupancy(second, [], DRIVER)}
    )
    metrics.update(
        {"n1": compute_cluster_occupancy(first, claim_views([claim("a", THREE_G_AT_4, ready=True)]), DRIVER)}
    )
    samples = scrape(registry)
    assert samples[series("migdra_gpu_free_memory_slices", "gpu-0")] == 4
    other = ("migdra_gpu_free_memory_slices", (("gpu", "gpu-0"), ("node", "n2")))
    assert samples[other] == 8
    metrics.update({"n2": []})  # the node went
    assert other not in scrape(registry)
    assert scrape(registry)[series("migdra_gpu_free_memory_slices", "gpu-0")] == 4
