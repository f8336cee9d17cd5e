"""Dynamic placement against the local API server: re-publishing the order as claims come and go never
shows the allocator an invalid pool, and the plugin follows a claim allocated by hand.

1. The real publisher and the real ``dynamic`` policy on a pool where an occupancy change moves devices
   *between* slices (ten H100s: 70 ``1g.10gb`` devices are one run split 64 + 6, and which six go to
   the second slice depends on the occupancy).  Every state the API server holds during the re-publish
   (recorded by the store's listener after each write, under its lock) goes through the allocator's own
   pool gathering: each must be the old generation complete, the new one complete, or incomplete
   (skipped) -- never a pool with a device in two slices.  The checker is shown to catch the naive
   order (the new content written at the *same* generation).
2. ``run_publish_only`` with ``placement_policy=dynamic``: a claim allocated by hand (``status.allocation``
   written as the scheduler would) changes the published order to what ``render_slices`` says for that
   occupancy, and its deallocation changes it back.
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dra_driver.devicemodel import example_inventory
from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.layout import render_slices
from dra_driver.devicemodel.policy import DynamicPlacementPolicy
from dra_driver.devicemodel.pool import NodePool, build_pool
from dra_driver.jsontypes import JSON
from dra_driver.kube.client import Client
from dra_driver.kube.failures import retry_conflicts
from dra_driver.nvml.settings import build_nvml_settings
from dra_driver.tools.allocation.features import DEFAULT_FEATURES, Features
from dra_driver.tools.allocation.pools import gather_pools
from kubeletplugin.app import run_publish_only
from kubeletplugin.publisher import SlicePublisher
from kubeletplugin.settings import PluginSettings
from tests.kube_apiserver import KubeApiServer
from tests.prepare_harness import DRIVER, NODE, create_claim, read_claim_json, result
from tests.slice_watch import slice_watch
from tests.waiting import wait_for

FEATURES = Features.from_names(DEFAULT_FEATURES)
NODE_OBJECT = {"metadata": {"name": NODE}}
Layout = tuple[tuple[str, int, tuple[str, ...]], ...]


@pytest.fixture
def api(api_server: KubeApiServer, tmp_path: Path) -> KubeApiServer:
    api_server.write_kubeconfig(tmp_path / "kubeconfig")
    with api_server.api_client() as c:
        client.CoreV1Api(c).create_node({"metadata": {"name": NODE}})
    return api_server


@pytest.fixture
def api_client(api: KubeApiServer) -> Iterator[client.ApiClient]:
    with api.api_client() as c:
        yield c


def pool_of(gpus: int) -> NodePool:
    return build_pool(example_inventory(["H100-SXM5-80GB"] * gpus), DeviceModelConfig())


def layout(slices: Sequence[JSON]) -> Layout:
    """The device slices as the allocator walks them: by name, each with its generation and device order."""
    device_slices = [s for s in slices if not s["spec"].get("sharedCounters")]
    return tuple(
        (
            s["metadata"]["name"],
            int(s["spec"]["pool"]["generation"]),
            tuple(d["name"] for d in s["spec"].get("devices") or ()),
        )
        for s in sorted(device_slices, key=lambda s: str(s["metadata"]["name"]))
    )


def membership(slices: Sequence[JSON]) -> dict[str, str]:
    """Device name -> the slice it is in."""
    return {device: name for name, _, devices in layout(slices) for device in devices}


def what_the_allocator_sees(state: Sequence[JSON], old: Sequence[JSON], new: Sequence[JSON]) -> str:
    """``old``, ``new`` or ``incomplete``: this node's pool as kube-scheduler's pool gathering finds it in
    ``state``.  AssertionError when it is invalid (a device twice: the allocator could hand it out twice
    or refuses the whole pool) or complete but neither generation."""
    pools = [p for p in gather_pools(copy.deepcopy(list(state)), NODE_OBJECT, FEATURES) if p.id == (DRIVER, NODE)]
    assert len(pools) == 1, pools
    pool = pools[0]
    assert not pool.invalid, f"the allocator sees an invalid pool: {pool.invalid_reason}"
    if pool.incomplete:
        return "incomplete"
    seen = layout(pool.slices)
    if seen == layout(old):
        return "old"
    if seen == layout(new):
        return "new"
    raise AssertionError(f"a complete pool that is neither the old nor the new generation: {seen}")


def problem_of(state: Sequence[JSON], old: Sequence[JSON], new: Sequence[JSON]) -> str | None:
    """What :func:`what_the_allocator_sees` finds wrong with ``state``, or None."""
    try:
        what_the_allocator_sees(state, old, new)
    except AssertionError as exc:
        return str(exc)
    return None


def test_a_republish_that_moves_devices_between_slices_never_shows_the_allocator_an_invalid_pool(
    api: KubeApiServer, api_client: client.ApiClient
) -> None:
    pool = pool_of(10)
    policy = DynamicPlacementPolicy()
    occupancy = [frozenset[str]()]
    publisher = SlicePublisher(Client(api_client=api_client), NODE, DRIVER, policy, allocated=lambda: occupancy[0])
    first = publisher.publish(pool)
    assert first.generation == 1
    assert not first.occupancy_only
    old = published(api)

    occupancy[0] = frozenset({"gpu-9-mig-1g10gb-19-6"})  # GPU 9 is now the fullest: its 1g devices first
    expected = render_slices(pool, NODE, 2, policy=policy, allocated=occupancy[0])
    moved = {d for d, s in membership(old).items() if membership(expected)[d] != s}
    assert moved, "the case must move devices between slices, not only reorder them"
    with slice_watch(api) as states:
        states.recording = True
        second = publisher.publish(pool)
        states.barrier()
        states.recording = False

        assert second.occupancy_only
        assert (second.created, second.deleted, second.generation) == (0, 0, 2)
        assert second.updated == len(old)  # every slice carries the new generation
        new = states.states[-1]
        assert layout(new) == layout(expected)
        seen = [what_the_allocator_sees(state, old, new) for state in states.states]
        assert seen == ["incomplete"] * (len(seen) - 1) + ["new"], seen

        # The same occupancy again: nothing to render or write.  An occupancy that leaves the order as it is
        # (a device no longer published, say): rendered, compared, no write.
        recorded = len(states.writes)
        states.recording = True
        assert publisher.publish(pool).writes == 0
        occupancy[0] = frozenset({"gpu-9-mig-1g10gb-19-6", "a-device-no-longer-published"})
        unchanged = publisher.publish(pool)
        states.barrier()
        states.recording = False
    assert (unchanged.writes, unchanged.generation, unchanged.occupancy_only) == (0, 2, True)
    assert len(states.writes) == recorded  # kube-apiserver saw no write


def test_the_checker_catches_the_naive_order_a_new_order_at_the_same_generation() -> None:
    pool = pool_of(10)
    policy = DynamicPlacementPolicy()
    old = render_slices(pool, NODE, 1, policy=policy)
    same_generation = render_slices(pool, NODE, 1, policy=policy, allocated=frozenset({"gpu-9-mig-1g10gb-19-6"}))
    new = render_slices(pool, NODE, 2, policy=policy, allocated=frozenset({"gpu-9-mig-1g10gb-19-6"}))
    assert what_the_allocator_sees(old, old, new) == "old"
    assert what_the_allocator_sees(new, old, new) == "new"
    assert what_the_allocator_sees([*old[:-1], new[-1]], old, new) == "incomplete"

    state = {s["metadata"]["name"]: s for s in old}
    naive: list[list[dict[str, Any]]] = []
    for body in same_generation:  # written in the publisher's order, but in place
        state[body["metadata"]["name"]] = body
        naive.append(list(state.values()))
    problems = [problem for problem in (problem_of(state, old, new) for state in naive) if problem]
    assert problems, "the checker must catch a device in two slices of one generation"
    assert "the allocator sees an invalid pool: duplicate device name gpu-9-mig-" in problems[0]


# -- the plugin ------------------------------------------------------------------------------------


def published(api: KubeApiServer) -> list[dict[str, Any]]:
    with api.api_client() as api_client:
        items = client.ResourceV1Api(api_client).list_resource_slice(field_selector=f"spec.nodeName={NODE}").items
        return [api_client.sanitize_for_serialization(item) for item in items]


def complete_layout(api: KubeApiServer) -> Layout | None:
    """The node's device slices when the API holds one complete generation of them (else None)."""
    slices = published(api)
    generations = {int(s["spec"]["pool"]["generation"]) for s in slices}
    if len(generations) != 1 or len(slices) != slices[0]["spec"]["pool"]["resourceSliceCount"]:
        return None
    return layout(slices)


def names(slices: Layout | None) -> list[tuple[str, tuple[str, ...]]]:
    return [(name, devices) for name, _, devices in slices or ()]


def deallocate(api_client: client.ApiClient, claim: Any) -> None:
    def attempt() -> None:
        body = read_claim_json(api_client, claim)
        body["status"].pop("allocation", None)
        client.ResourceV1Api(api_client).replace_namespaced_resource_claim_status(claim.name, claim.namespace, body)

    retry_conflicts(attempt, what=f"deallocating {claim.name}")


@pytest.fixture
def publish_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[PluginSettings], None]]:
    """``start(settings)``: the publish-only plugin in this process on two simulated H100s."""
    for name in [k for k in os.environ if k.startswith("MIGDRA_")]:
        monkeypatch.delenv(name)
    stop = threading.Event()
    threads: list[threading.Thread] = []
    outcome: list[Any] = []

    def start(plugin: PluginSettings) -> None:
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


def test_the_plugin_republishes_the_dynamic_order_for_a_claim_allocated_here_and_back_when_it_goes(
    api: KubeApiServer, api_client: client.ApiClient, tmp_path: Path, publish_only: Any
) -> None:
    pool, policy = pool_of(2), DynamicPlacementPolicy()
    held = frozenset({"gpu-1-mig-1g10gb-19-6"})
    empty_order = names(layout(render_slices(pool, NODE, 1, policy=policy)))
    held_order = names(layout(render_slices(pool, NODE, 1, policy=policy, allocated=held)))
    assert held_order != empty_order  # GPU 1 is the fuller one now: its 1g devices come first

    publish_only(
        PluginSettings(
            node_name=NODE,
            kubeconfig=tmp_path / "kubeconfig",
            rescan_interval=3600,  # only the occupancy re-publishes
            placement_policy="dynamic",
            placement_debounce=0.05,
            placement_min_interval=0.1,
        )
    )
    wait_for("the first publish", lambda: names(complete_layout(api)) == empty_order, timeout=20)
    assert {s["spec"]["pool"]["generation"] for s in published(api)} == {1}

    claim = create_claim(api_client, "one-g", [result("gpu-1-mig-1g10gb-19-6")])
    wait_for("the order for the claim", lambda: names(complete_layout(api)) == held_order, timeout=10)
    assert {s["spec"]["pool"]["generation"] for s in published(api)} == {2}  # one re-publish, no churn

    deallocate(api_client, claim)
    wait_for("the order without it", lambda: names(complete_layout(api)) == empty_order, timeout=10)
    assert {s["spec"]["pool"]["generation"] for s in published(api)} == {3}
