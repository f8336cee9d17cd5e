"""The ResourceSlice publisher against the local API server over HTTP, with the official client."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pynvml
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_driver.devicemodel import example_inventory
from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.layout import render_slices
from dra_driver.devicemodel.pool import NodePool, build_pool
from dra_driver.kube.client import Client
from dra_driver.kube.failures import BackoffPolicy
from dra_driver.mig import load_catalog
from dra_driver.nvml.inventory import read_inventory
from kubeletplugin.publisher import PublishLoop, SlicePublisher
from tests.conftest import OpenSimulatedNode
from tests.kube_apiserver import KubeApiServer
from tests.slice_watch import slice_watch
from tests.waiting import wait_for

NODE = "node-a"
DRIVER = "gpu.migdra.io"
FAST = BackoffPolicy(initial=0.001, maximum=0.01)  # retries of failed rounds, in tests


@pytest.fixture
def api_client(api_server: KubeApiServer) -> Iterator[client.ApiClient]:
    with api_server.api_client() as c:
        yield c


@pytest.fixture
def node(api_client: client.ApiClient) -> dict[str, Any]:
    created = client.CoreV1Api(api_client).create_node({"metadata": {"name": NODE}})
    return {"name": created.metadata.name, "uid": created.metadata.uid}


def pool_of(*models: str, config: DeviceModelConfig | None = None) -> NodePool:
    return build_pool(example_inventory(list(models)), config or DeviceModelConfig())


def stored_slices(api_client: client.ApiClient) -> list[dict[str, Any]]:
    items = client.ResourceV1Api(api_client).list_resource_slice(field_selector=f"spec.nodeName={NODE}").items
    return sorted((api_client.sanitize_for_serialization(i) for i in items), key=lambda s: s["metadata"]["name"])


def test_first_publish_creates_exactly_the_rendered_slices_owned_by_the_node(
    api_client: client.ApiClient, node: dict[str, Any]
) -> None:
    pool = pool_of("H100-SXM5-80GB", "A100-SXM4-40GB", "H100-SXM5-80GB")
    result = SlicePublisher(Client(api_client=api_client), NODE, DRIVER).publish(pool)
    expected = render_slices(pool, NODE, generation=1)
    assert (result.created, result.updated, result.deleted, result.generation) == (len(expected), 0, 0, 1)
    stored = stored_slices(api_client)
    assert [s["metadata"]["name"] for s in stored] == sorted(s["metadata"]["name"] for s in expected)
    by_name = {s["metadata"]["name"]: s for s in expected}
    for item in stored:
        assert item["spec"] == by_name[item["metadata"]["name"]]["spec"]
        assert item["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node["uid"], "controller": True}
        ]


def test_unchanged_republish_writes_nothing(api_server: KubeApiServer, api_client: client.ApiClient, node: Any) -> None:
    publisher = SlicePublisher(Client(api_client=api_client), NODE, DRIVER)
    publisher.publish(pool_of("H100-SXM5-80GB", "B200"))
    with slice_watch(api_server) as slices:
        slices.recording = True
        result = publisher.publish(pool_of("H100-SXM5-80GB", "B200"))
        slices.barrier()
    assert result.writes == 0
    assert result.generation == 1
    assert slices.writes == []  # as kube-apiserver saw it, not only as the publisher counted


def test_quantities_the_server_spells_canonically_are_not_a_change(
    api_server: KubeApiServer, api_client: client.ApiClient, node: Any
) -> None:
    """kube-apiserver stores quantities canonically: the A30's memory, rendered as
    ``25165824000``, reads back as ``25165824k``; the same pool published again is no change."""
    publisher = SlicePublisher(Client(api_client=api_client), NODE, DRIVER)
    publisher.publish(pool_of("A30", "H100-SXM5-80GB"))
    rendered = {s["metadata"]["name"]: s["spec"] for s in render_slices(pool_of("A30", "H100-SXM5-80GB"), NODE, 1)}
    stored = {s["metadata"]["name"]: s["spec"] for s in stored_slices(api_client)}
    assert stored != rendered, "the server spells some quantity otherwise than rendered"
    assert "25165824k" in str(stored)
    assert "25165824k" not in str(rendered)
    with slice_watch(api_server) as slices:
        slices.recording = True
        result = publisher.publish(pool_of("A30", "H100-SXM5-80GB"))
        slices.barrier()
    assert (result.writes, result.generation) == (0, 1)
    assert slices.writes == []


def test_a_change_bumps_the_generation_in_every_slice_and_removes_surplus_slices(
    api_client: client.ApiClient, node: Any
) -> None:
    publisher = SlicePublisher(Client(api_client=api_client), NODE, DRIVER)
    inventory = example_inventory(["H100"] * 3)
    publisher.publish(build_pool(inventory, DeviceModelConfig()))
    assert len(stored_slices(api_client)) == 3  # counters + 2 device slices (3 x (25 exclusive + 7 shared))

    shrunk = DeviceModelConfig(exclude_gpus=(inventory.gpus[1].gpu.uuid, inventory.gpus[2].gpu.uuid))
    result = publisher.publish(build_pool(inventory, shrunk))
    stored = stored_slices(api_client)
    assert (result.updated, result.deleted, result.generation) == (2, 1, 2)
    assert len(stored) == 2
    assert {s["spec"]["pool"]["generation"] for s in stored} == {2}
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in stored} == {2}

    regrown = publisher.publish(build_pool(inventory, DeviceModelConfig()))
    assert (regrown.created, regrown.generation) == (1, 3)
    assert {s["spec"]["pool"]["generation"] for s in stored_slices(api_client)} == {3}


def test_mig_mode_change_on_one_gpu_republishes(api_client: client.ApiClient, node: Any) -> None:
    """One GPU switching MIG off: its MIG devices and counter set go, a whole-GPU device appears."""
    publisher = SlicePublisher(Client(api_client=api_client), NODE, DRIVER)
    inventory = example_inventory(["H100"] * 2)
    publisher.publish(build_pool(inventory, DeviceModelConfig()))
    mig_off = example_inventory(["H100"] * 2, mig_enabled=False).gpus[1]
    result = publisher.publish(
        build_pool(
            type(inventory)(inventory.driver_version, inventory.cuda_driver_version, (inventory.gpus[0], mig_off)),
            DeviceModelConfig(),
        )
    )
    assert result.generation == 2
    devices = {d["name"] for s in stored_slices(api_client) for d in s["spec"].get("devices", [])}
    assert "gpu-1" in devices
    assert not any(name.startswith("gpu-1-mig-") for name in devices)
    counter_sets = [cs["name"] for s in stored_slices(api_client) for cs in s["spec"].get("sharedCounters", [])]
    assert counter_sets == ["gpu-0-counter-set"]


def test_someone_elses_edit_is_reverted_and_a_conflict_is_retried(
    api_client: client.ApiClient, node: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    publisher = SlicePublisher(Client(api_client=api_client), NODE, DRIVER)
    publisher.publish(pool_of("H100"))
    resource = client.ResourceV1Api(api_client)
    victim = stored_slices(api_client)[1]
    victim["spec"]["devices"] = victim["spec"]["devices"][:3]
    resource.replace_resource_slice(victim["metadata"]["name"], victim)

    # The first replace races with another writer and gets 409; the publisher must list again and retry.
    # The race is made at the transport, so it holds however the publisher builds its requests.
    original = api_client.call_api
    raced: list[str] = []

    def racing_call(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method == "PUT" and "/resourceslices/" in url and not raced:
            name = url.rsplit("/", 1)[1]
            raced.append(name)
            with client.ApiClient(api_client.configuration) as other:
                current = client.ResourceV1Api(other).read_resource_slice(name)
                current.metadata.labels = {"touched": "yes"}
                client.ResourceV1Api(other).replace_resource_slice(name, current)
        return original(method, url, *args, **kwargs)

    monkeypatch.setattr(api_client, "call_api", racing_call)
    result = publisher.publish(pool_of("H100"))
    assert raced
    assert result.generation >= 2
    stored = stored_slices(api_client)
    assert sum(len(s["spec"].get("devices", [])) for s in stored) == 25  # every MIG device (no shared ones by default)
    assert {s["spec"]["pool"]["generation"] for s in stored} == {result.generation}


def test_cleanup_on_exit_deletes_the_pool_and_only_it(api_client: client.ApiClient, node: Any) -> None:
    mine = SlicePublisher(Client(api_client=api_client), NODE, DRIVER)
    mine.publish(pool_of("H100"))
    other_driver = SlicePublisher(Client(api_client=api_client), NODE, "other.example.com")
    other_driver.publish(build_pool(example_inventory(["A30"]), DeviceModelConfig(driver_name="other.example.com")))
    assert mine.delete_all() == 2
    remaining = stored_slices(api_client)
    assert {s["spec"]["driver"] for s in remaining} == {"other.example.com"}


@pytest.mark.parametrize("shared_devices", [False, True], ids=["default", "shared-devices"])
@pytest.mark.parametrize("model_key", sorted(load_catalog().gpus))
def test_a_node_with_eight_gpus_of_each_model_is_accepted_by_the_api(
    api_client: client.ApiClient, node: Any, model_key: str, shared_devices: bool
) -> None:
    """As the default publishes them, and with ``sharedDevices: true`` (shared devices and their request
    policies too)."""
    pool = pool_of(*[model_key] * 8, config=DeviceModelConfig(shared_devices=shared_devices))
    result = SlicePublisher(Client(api_client=api_client), NODE, DRIVER).publish(pool)
    assert result.created == len(stored_slices(api_client))


def test_invalid_slices_are_refused_by_the_server(api_client: client.ApiClient, node: Any) -> None:
    """The publisher does not paper over validation: a pool the API refuses is an error, not a retry loop."""
    bad = DeviceModelConfig(driver_name=DRIVER)
    pool = pool_of("H100", config=bad)
    broken = NodePool(DRIVER, (*pool.devices, pool.devices[0]), pool.counter_sets)  # a duplicate device
    with pytest.raises(ApiException) as info:
        SlicePublisher(Client(api_client=api_client), NODE, DRIVER).publish(broken)
    assert info.value.status == 422


def test_publish_loop_rescans_when_triggered(
    api_client: client.ApiClient, node: Any, simulated_node: OpenSimulatedNode
) -> None:
    three_g = load_catalog().model("H100").profile_by_name("3g.40gb")
    with simulated_node("H100-SXM5-80GB") as nvml:
        loop = PublishLoop(
            SlicePublisher(Client(api_client=api_client), NODE, DRIVER),
            lambda: build_pool(read_inventory(nvml), DeviceModelConfig()),
            interval=60,
        )
        loop.start()
        try:
            wait_for("the first round", lambda: loop.rounds >= 1, timeout=10)
            assert loop.last_result is not None
            assert loop.last_result.generation == 1
            placement = pynvml.c_nvmlGpuInstancePlacement_t()
            placement.start, placement.size = 0, 4
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, three_g.profile_id, pynvml.byref(placement))
            loop.trigger()
            wait_for("the triggered round", lambda: loop.rounds >= 2, timeout=10)
        finally:
            loop.stop()
    assert loop.last_result is not None
    assert loop.last_result.generation == 2
    names = {d["name"] for s in stored_slices(api_client) for d in s["spec"].get("devices", [])}
    assert "gpu-0-mig-3g40gb-9-0" not in names
    assert "gpu-0-mig-3g40gb-9-4" in names


def test_a_refused_pool_is_logged_as_one_line_per_round_and_then_is_fatal(
    api_client: client.ApiClient, node: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """An admin reads the status, reason and kube's message, not the client's dump of headers and body."""
    pool = pool_of("H100")
    broken = NodePool(DRIVER, (*pool.devices, pool.devices[0]), pool.counter_sets)  # a duplicate device
    fatal: list[BaseException] = []
    stopped = threading.Event()
    loop = PublishLoop(
        SlicePublisher(Client(api_client=api_client), NODE, DRIVER),
        lambda: broken,
        interval=0.01,
        on_fatal=lambda exc: (fatal.append(exc), stopped.set()),
        fatal_after=2,
        backoff=FAST,
    )
    with caplog.at_level("ERROR", logger="kubeletplugin.publisher"):
        loop.start()
        assert stopped.wait(10), "a pool the API server refuses must stop the loop"
        loop.stop()
    assert isinstance(fatal[0], ApiException)
    failures = [r for r in caplog.records if r.name == "kubeletplugin.publisher"]
    assert len(failures) == 2
    for record in failures:
        message = record.getMessage()
        assert "\n" not in message
        assert record.exc_info is None
        assert f"the API server {api_client.configuration.host} answered 422 Invalid: ResourceSlice" in message
        assert "Duplicate value" in message
        assert "HTTP response" not in message


def test_a_failed_round_is_retried_even_when_its_backoff_passed_before_the_loop_went_to_sleep(
    api_client: client.ApiClient,
) -> None:
    """The retry is due at the backoff's deadline; one already past means "now", never "at the next
    resync" (an hour here).  A busy machine once let a millisecond's backoff pass before the loop
    computed its sleep, and the outage test waited for a retry that was an hour away."""
    attempts = 0
    retried = threading.Event()

    def failing_pool() -> NodePool:
        nonlocal attempts
        attempts += 1
        if attempts >= 5:
            retried.set()
        raise ConnectionRefusedError("the API server is down")  # an outage: retried for ever, never fatal

    loop = PublishLoop(
        SlicePublisher(Client(api_client=api_client), NODE, DRIVER),
        failing_pool,
        interval=3600,
        backoff=BackoffPolicy(initial=1e-9, maximum=1e-9),  # always over before the loop sleeps
    )
    loop.start()
    try:
        assert retried.wait(30), f"the loop stopped retrying after {attempts} attempt(s)"
    finally:
        loop.stop()
