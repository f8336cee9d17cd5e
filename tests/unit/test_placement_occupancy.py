"""The dynamic placement's occupancy source: which allocation results count, the debounce and rate limit
(a fake clock, explicit calls: nothing sleeps), and the plugin's placement settings."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from dra_driver.devicemodel import example_inventory
from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.policy import DEFAULT_POLICY, PLACEMENT_POLICIES
from dra_driver.devicemodel.pool import build_pool
from dra_driver.kube.client import CLAIMS, Client
from dra_driver.kube.informer import Changes, Informer
from dra_driver.resourceclaim import parse_claims
from kubeletplugin.metrics import PublishMetrics
from kubeletplugin.occupancy import ClaimOccupancy, RepublishGate, compute_allocated_devices
from kubeletplugin.publisher import PublishResult
from kubeletplugin.publishing import Publishing
from kubeletplugin.settings import PluginSettings

DRIVER = "gpu.migdra.io"
NODE = "node-a"


def claim(*results: dict[str, Any], name: str = "c") -> dict[str, Any]:
    return {
        "metadata": {"namespace": "default", "name": name, "uid": f"uid-{name}"},
        "status": {"allocation": {"devices": {"results": list(results)}}},
    }


def result(device: str, driver: str = DRIVER, pool: str = NODE, **extra: Any) -> dict[str, Any]:
    return {"request": "gpu", "driver": driver, "pool": pool, "device": device, **extra}


# -- which results count ---------------------------------------------------------------------------


def test_the_devices_of_this_driver_in_this_nodes_pool_count() -> None:
    claims = [
        claim(result("gpu-0-mig-1g10gb-19-6"), result("gpu-1-mig-3g40gb-9-0"), name="a"),
        claim(result("gpu-0-mig-1g10gb-19-5"), name="b"),
    ]
    assert compute_allocated_devices(parse_claims(claims), DRIVER, NODE) == {
        "gpu-0-mig-1g10gb-19-6",
        "gpu-1-mig-3g40gb-9-0",
        "gpu-0-mig-1g10gb-19-5",
    }


def test_other_drivers_other_pools_and_admin_access_hold_nothing_here() -> None:
    claims = [
        claim(result("gpu-0-mig-1g10gb-19-6", driver="gpu.nvidia.com"), name="other-driver"),
        claim(result("gpu-0-mig-1g10gb-19-5", pool="node-b"), name="other-node"),
        claim(result("gpu-0-mig-1g10gb-19-4", adminAccess=True), name="monitoring"),
        claim(result("gpu-0-mig-1g10gb-19-3", adminAccess=False), name="explicitly-not-admin"),
    ]
    assert compute_allocated_devices(parse_claims(claims), DRIVER, NODE) == {"gpu-0-mig-1g10gb-19-3"}


def test_claims_without_an_allocation_or_with_malformed_results_are_skipped() -> None:
    claims: list[Any] = [
        {"metadata": {"name": "pending"}},
        {"metadata": {"name": "deallocated"}, "status": {}},
        {"metadata": {"name": "no-devices"}, "status": {"allocation": {}}},
        {"metadata": {"name": "null-results"}, "status": {"allocation": {"devices": {"results": None}}}},
        {"metadata": {"name": "odd"}, "status": {"allocation": {"devices": {"results": ["x", {"device": 5}]}}}},
        claim({"driver": DRIVER, "pool": NODE}, name="no-device-name"),
        claim(result("gpu-0-mig-7g80gb-0-0"), name="good"),
    ]
    assert compute_allocated_devices(parse_claims(claims), DRIVER, NODE) == {"gpu-0-mig-7g80gb-0-0"}


# -- debounce and rate limit -----------------------------------------------------------------------


def test_a_change_is_signalled_debounce_seconds_after_it_was_seen() -> None:
    gate = RepublishGate(debounce=0.2, min_interval=1.0)
    assert gate.delay(0.0) is None
    assert not gate.take(0.0)
    gate.change(10.0)
    assert gate.delay(10.0) == pytest.approx(0.2)
    assert not gate.take(10.1)
    assert gate.take(10.2)
    assert not gate.pending
    assert not gate.take(10.3)  # signalled once


def test_a_burst_of_changes_is_one_signal_and_never_waits_for_the_burst_to_end() -> None:
    gate = RepublishGate(debounce=0.2, min_interval=0.0)
    gate.change(0.0)
    gate.change(0.1)
    gate.change(0.15)
    assert gate.delay(0.15) == pytest.approx(0.05)  # from the first change: a steady stream still publishes
    assert gate.take(0.2)
    assert not gate.pending


def test_a_change_in_the_quiet_period_is_not_lost_it_is_signalled_at_its_end() -> None:
    gate = RepublishGate(debounce=0.2, min_interval=1.0)
    gate.change(0.0)
    assert gate.take(0.2)
    gate.change(0.5)  # 0.3 s after the signal: the debounce alone would allow 0.7
    assert gate.delay(0.5) == pytest.approx(0.7)
    assert not gate.take(0.7)
    assert not gate.take(1.19)
    assert gate.take(1.2)
    gate.change(5.0)  # long after: only the debounce
    assert gate.delay(5.0) == pytest.approx(0.2)


def test_zero_debounce_and_interval_signal_at_once() -> None:
    gate = RepublishGate(debounce=0.0, min_interval=0.0)
    gate.change(3.0)
    assert gate.take(3.0)
    gate.change(3.0)
    assert gate.take(3.0)


def test_negative_times_are_refused() -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        RepublishGate(debounce=-0.1, min_interval=1.0)
    with pytest.raises(ValueError, match="must be >= 0"):
        RepublishGate(debounce=0.1, min_interval=-1.0)


# -- the occupancy source, driven by hand (its thread and informer are not started) ----------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def signals() -> list[float]:
    return []


@pytest.fixture
def occupancy(clock: FakeClock, signals: list[float]) -> Iterator[ClaimOccupancy]:
    kube = Client(configuration=client.Configuration(host="http://127.0.0.1:9"))  # never reached: not started
    source = ClaimOccupancy(
        Informer(kube, CLAIMS, Changes()),
        DRIVER,
        NODE,
        lambda: signals.append(clock.now),
        debounce=0.2,
        min_interval=1.0,
        clock=clock,
    )
    yield source
    source.stop()


def test_a_new_set_is_signalled_after_the_debounce_and_an_unchanged_one_never(
    occupancy: ClaimOccupancy, clock: FakeClock, signals: list[float]
) -> None:
    occupancy.observe(frozenset(), clock.now)
    assert signals == []  # the empty node it started from
    assert occupancy.next_wake() == occupancy.resync

    occupancy.observe(frozenset({"gpu-0-mig-1g10gb-19-6"}), clock.now)
    assert occupancy.allocated() == {"gpu-0-mig-1g10gb-19-6"}  # the publisher's next round sees it at once
    assert signals == []
    assert occupancy.next_wake() == pytest.approx(0.2)
    clock.now += 0.2
    occupancy.observe(frozenset({"gpu-0-mig-1g10gb-19-6"}), clock.now)  # the pass the wake-up runs
    assert signals == [pytest.approx(100.2)]
    occupancy.observe(frozenset({"gpu-0-mig-1g10gb-19-6"}), clock.now + 5)
    assert len(signals) == 1


def test_changes_within_the_minimum_interval_are_one_signal_at_its_end(
    occupancy: ClaimOccupancy, clock: FakeClock, signals: list[float]
) -> None:
    occupancy.observe(frozenset({"a"}), clock.now)
    clock.now += 0.2
    occupancy.observe(frozenset({"a"}), clock.now)
    assert len(signals) == 1
    clock.now += 0.1
    occupancy.observe(frozenset({"a", "b"}), clock.now)
    clock.now += 0.2
    occupancy.observe(frozenset({"b"}), clock.now)
    assert len(signals) == 1
    assert occupancy.next_wake() == pytest.approx(0.7)  # 1 s after the first signal
    clock.now += 0.7
    occupancy.observe(frozenset({"b"}), clock.now)
    assert signals == [pytest.approx(100.2), pytest.approx(101.2)]
    assert occupancy.allocated() == {"b"}


def test_a_pass_before_the_first_list_decides_nothing(occupancy: ClaimOccupancy, signals: list[float]) -> None:
    occupancy.sync()
    assert occupancy.allocated() == frozenset()
    assert signals == []


def test_a_failing_callback_does_not_stop_the_source(clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> None:
        raise RuntimeError("boom")

    kube = Client(configuration=client.Configuration(host="http://127.0.0.1:9"))
    source = ClaimOccupancy(
        Informer(kube, CLAIMS, Changes()), DRIVER, NODE, broken, debounce=0.0, min_interval=0.0, clock=clock
    )
    try:
        with caplog.at_level(logging.ERROR):
            source.observe(frozenset({"a"}), clock.now)
        assert source.signals == 1
        assert "signalling an occupancy change failed" in caplog.text
    finally:
        source.stop()


def test_a_source_that_never_reaches_the_api_server_stops_at_once() -> None:
    with socket.socket() as probe:  # a port nobody listens on: every list fails, as in an outage
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kube = Client(configuration=client.Configuration(host=f"http://127.0.0.1:{port}"), timeout=1.0)
    claims = Informer(kube, CLAIMS, Changes())  # the process's claim informer: app.py starts and stops it
    source = ClaimOccupancy(claims, DRIVER, NODE, lambda: None, debounce=0.2, min_interval=1.0)
    claims.start()
    source.start()
    assert not source.wait_synced(0.05)
    started = time.monotonic()
    source.stop()
    claims.stop()
    assert time.monotonic() - started < 5.0  # not the loop's 30 s wait for a first list
    assert source.allocated() == frozenset()


# -- settings and metrics --------------------------------------------------------------------------


def test_the_default_policy_is_the_policy_modules_default() -> None:
    settings = PluginSettings(node_name=NODE)
    assert settings.placement_policy == DEFAULT_POLICY
    assert (settings.placement_debounce, settings.placement_min_interval) == (0.2, 1.0)


@pytest.mark.parametrize("name", sorted(PLACEMENT_POLICIES))
def test_every_known_policy_is_accepted(name: str) -> None:
    assert PluginSettings(node_name=NODE, placement_policy=name).placement_policy == name


def test_an_unknown_policy_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValidationError) as caught:
        PluginSettings(node_name=NODE, placement_policy="best")
    message = str(caught.value)
    assert "unknown placement policy 'best'" in message
    for name in PLACEMENT_POLICIES:
        assert name in message


@pytest.mark.parametrize("field", ["placement_debounce", "placement_min_interval"])
def test_negative_placement_times_are_refused(field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        PluginSettings(node_name=NODE, **{field: -0.5})


def test_a_baseline_policy_is_accepted_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="kubeletplugin.publishing"):
        publishing = Publishing(
            PluginSettings(node_name=NODE, placement_policy="hami"), CollectorRegistry(), threading.Event()
        )
    assert publishing.policy.name == "hami"
    assert "comparison baseline" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kubeletplugin.publishing"):
        Publishing(PluginSettings(node_name=NODE, placement_policy="static"), CollectorRegistry(), threading.Event())
    assert caplog.text == ""


def test_placement_republishes_are_counted_with_their_writes() -> None:
    registry = CollectorRegistry()
    metrics = PublishMetrics(registry)
    metrics.observe_placement_republish(0)
    metrics.observe_placement_republish(7)
    metrics.observe_placement_republish(3)
    assert registry.get_sample_value("migdra_placement_republishes_total", {"result": "unchanged"}) == 1
    assert registry.get_sample_value("migdra_placement_republishes_total", {"result": "written"}) == 2
    assert registry.get_sample_value("migdra_placement_republish_writes_total") == 10


def test_the_plugin_counts_a_round_for_the_occupancy_alone_and_no_other() -> None:
    registry = CollectorRegistry()
    publishing = Publishing(PluginSettings(node_name=NODE), registry, threading.Event())
    pool = build_pool(example_inventory(["H100"]), DeviceModelConfig())
    publishing.on_round(pool, PublishResult(created=2, generation=1))  # the first publish
    publishing.on_round(pool, PublishResult(updated=2, generation=2, occupancy_only=True))
    publishing.on_round(pool, PublishResult(generation=2, occupancy_only=True))
    assert registry.get_sample_value("migdra_placement_republishes_total", {"result": "written"}) == 1
    assert registry.get_sample_value("migdra_placement_republishes_total", {"result": "unchanged"}) == 1
    assert registry.get_sample_value("migdra_placement_republish_writes_total") == 2
