"""Publishing through trouble: an API server that goes away and comes back, and GPU instances destroyed
while NVML lists them.  Every wait is on a signal (a publish round, a failed round, a write to the API
server's store) with a bound; nothing here sleeps and hopes."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dra_driver.devicemodel import example_inventory
from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.pool import NodePool, build_pool
from dra_driver.kube.client import Client
from dra_driver.kube.failures import BackoffPolicy
from dra_driver.nvml.settings import build_nvml_settings
from kubeletplugin.app import run_publish_only
from kubeletplugin.publisher import PublishLoop, PublishResult, RoundFailure, SlicePublisher
from kubeletplugin.settings import PluginSettings
from tests.api_outage import RestartableApiServer, restartable_api_server
from tests.waiting import wait_for

NODE = "node-r"
DRIVER = "gpu.migdra.io"
FAST = BackoffPolicy(initial=0.001, maximum=0.01)

TWO_H100 = 2 * 25  # published devices of two H100s: 25 MIG devices each (no shared ones by default)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[RestartableApiServer]:
    with restartable_api_server(tmp_path) as server:
        server.write_kubeconfig(tmp_path / "kubeconfig")
        with server.api_client() as c:
            client.CoreV1Api(c).create_node({"metadata": {"name": NODE}})
        yield server


def published(api: RestartableApiServer) -> list[dict[str, Any]]:
    """The pool's slices as stored, once all slices of its newest generation are there; else []."""
    with api.api_client() as c:
        items = client.ResourceV1Api(c).list_resource_slice(field_selector=f"spec.nodeName={NODE}").items
        slices = [c.sanitize_for_serialization(i) for i in items]
    if not slices:
        return []
    newest = max(s["spec"]["pool"]["generation"] for s in slices)
    current = [s for s in slices if s["spec"]["pool"]["generation"] == newest]
    return current if len(current) == current[0]["spec"]["pool"]["resourceSliceCount"] else []


def device_count(slices: list[dict[str, Any]]) -> int:
    return sum(len(s["spec"].get("devices", [])) for s in slices)


def test_an_api_outage_never_stops_the_publish_loop_and_it_republishes_when_the_server_returns(
    api: RestartableApiServer,
) -> None:
    fatal_after = 3
    inventory = example_inventory(["H100"] * 2)
    pools: list[NodePool] = [build_pool(inventory, DeviceModelConfig())]
    failures: list[RoundFailure] = []
    long_outage = threading.Event()
    rounds: list[PublishResult] = []
    round_done = threading.Event()
    fatal: list[BaseException] = []

    def on_failure(kind: RoundFailure, exc: BaseException, in_a_row: int) -> None:
        failures.append(kind)
        if in_a_row >= 4 * fatal_after:  # far more rounds than a refused publish would get
            long_outage.set()

    def on_round(pool: NodePool, result: PublishResult) -> None:
        rounds.append(result)
        round_done.set()

    with api.api_client() as api_client:
        loop = PublishLoop(
            SlicePublisher(Client(api_client=api_client, timeout=5), NODE, DRIVER),
            lambda: pools[-1],
            interval=3600,  # only failures and the test's trigger make rounds
            on_fatal=fatal.append,
            fatal_after=fatal_after,
            on_round=on_round,
            backoff=FAST,
            on_failure=on_failure,
        )
        loop.start()
        try:
            assert round_done.wait(10)
            assert device_count(published(api)) == TWO_H100
            round_done.clear()

            api.stop()
            shrunk = DeviceModelConfig(exclude_gpus=(inventory.gpus[1].gpu.uuid,))
            pools.append(build_pool(inventory, shrunk))  # the node changes during the outage
            loop.trigger()
            assert long_outage.wait(30), f"the loop stopped retrying after {len(failures)} failures"
            assert not fatal
            assert set(failures) == {RoundFailure.API_UNAVAILABLE}

            api.start()
            assert round_done.wait(30), "publishing did not resume when the API server came back"
        finally:
            loop.stop()
    assert not fatal
    assert rounds[-1].generation == 2
    assert device_count(published(api)) == 25  # one H100: its 25 MIG devices


@pytest.fixture
def publish_only(api: RestartableApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``start(fault_rules)``: the publish-only plugin in this process with a simulated NVML fault plan."""
    for name in [k for k in os.environ if k.startswith("MIGDRA_")]:
        monkeypatch.delenv(name)
    # Through the variables, as an operator would set them (a plugin without these settings ignores them).
    monkeypatch.setenv("MIGDRA_API_BACKOFF_INITIAL", "0.01")
    monkeypatch.setenv("MIGDRA_API_BACKOFF_MAX", "0.05")
    stop = threading.Event()
    threads: list[threading.Thread] = []
    outcome: list[Any] = []

    def start(rules: list[dict[str, Any]]) -> None:
        monkeypatch.setenv("MIGDRA_SIM_FAULTS", json.dumps({"rules": rules}))
        plugin = PluginSettings(node_name=NODE, kubeconfig=tmp_path / "kubeconfig", rescan_interval=3600)
        nvml = build_nvml_settings(nvml="simulated", sim_state=tmp_path / "nvml.json", sim_gpus="H100-SXM5-80GB:2")

        def run() -> None:
            try:
                outcome.append(run_publish_only(plugin, nvml, stop))
            except BaseException as exc:
                outcome.append(exc)

        thread = threading.Thread(target=run, name="publish-only")
        threads.append(thread)
        thread.start()

    yield start
    stop.set()
    for thread in threads:
        thread.join(30)
    assert outcome == [0] * len(threads)


def _instance_listing_fails(count: int) -> list[dict[str, Any]]:
    """INVALID_ARGUMENT from NVML's instance listing, as when a GI is destroyed while it is listed."""
    return [{"symbol": "nvmlDeviceGetGpuInstances", "nth": 1, "count": count, "error": "NVML_ERROR_INVALID_ARGUMENT"}]


def _plugin_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The plugin's records, less the one notice of a control plane older than 1.37 (the tests' API server
    may be 1.36: kubernetes/kubernetes#138917, kubeletplugin/control_plane_version.py)."""
    return [
        r
        for r in caplog.records
        if r.name.startswith(("kubeletplugin", "dra_driver")) and "kubernetes/kubernetes#138917" not in r.getMessage()
    ]


def test_gpu_instances_destroyed_while_they_are_listed_are_read_again_in_the_same_round(
    api: RestartableApiServer, publish_only: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        publish_only(_instance_listing_fails(1))
        # The first round must publish: the next rescan is an hour away.
        wait_for(
            "the first round publishes",
            lambda: device_count(published(api)) == TWO_H100,
            timeout=20,
        )
    records = _plugin_records(caplog)
    assert [r for r in records if r.levelno >= logging.WARNING] == []
    assert any("changed while they were read" in r.getMessage() for r in records)  # the fault did fire
    assert all(r.exc_info is None for r in records)


def test_gpu_instances_that_keep_changing_skip_a_round_in_one_line_without_a_traceback(
    api: RestartableApiServer, publish_only: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        publish_only(_instance_listing_fails(4))  # the first read and all three re-reads of the first round
        wait_for(
            "the next round publishes",
            lambda: device_count(published(api)) == TWO_H100,
            timeout=20,
        )
    records = _plugin_records(caplog)
    assert [r for r in records if r.levelno >= logging.WARNING] == []
    assert all(r.exc_info is None for r in records)
    (skipped,) = [
        r for r in records if r.levelno == logging.INFO and "changed during each of 4 reads" in r.getMessage()
    ]
    assert "\n" not in skipped.getMessage()
