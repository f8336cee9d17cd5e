"""``migdra controller`` as a real process against the local API server: hand-allocated claims get
their exact placement, overlapping ones are flagged and left allocated, a gone device is said to be
gone, and of two replicas only the Lease holder writes; killing it hands over within the lease time."""

from __future__ import annotations

import copy
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dra_driver.kube.client import CLAIMS, EVENTS, LEASES, SLICES, Client
from migdra_devcluster.ports import free_port
from tests.kube_apiserver import KubeApiServer
from tests.plugin_command import MIGDRA
from tests.sim_objects import DRIVER, H100, claim_view, node_slices
from tests.waiting import wait_for

NODE = "node-1"
THREE_G_AT_4 = "gpu-0-mig-3g40gb-9-4"
ONE_G_AT_6 = "gpu-0-mig-1g10gb-19-6"
LEASE_DURATION = 3.0


@pytest.fixture
def api(api_server: KubeApiServer) -> Iterator[tuple[Client, Path]]:
    assert api_server.kubeconfig_path is not None
    client = Client(api_server.kubeconfig_path)
    for resource_slice in node_slices(NODE, [H100, H100]):
        client.create(SLICES, resource_slice)
    try:
        yield client, api_server.kubeconfig_path
    finally:
        client.close()


class ControllerProcess:
    def __init__(self, kubeconfig: Path, identity: str, log: Path) -> None:
        self.identity = identity
        self.port = free_port()
        argv = [
            MIGDRA,
            "-v",
            "controller",
            "--kubeconfig",
            str(kubeconfig),
            "--identity",
            identity,
            "--lease-namespace",
            "default",
            "--lease-duration",
            str(LEASE_DURATION),
            "--renew-deadline",
            "2",
            "--retry-period",
            "0.5",
            "--metrics-address",
            f"127.0.0.1:{self.port}",
        ]
        self._log = log.open("wb")
        self.process = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT)

    def serving(self) -> bool:
        try:
            self.metric("migdra_controller_leader")
        except OSError:
            return False
        return True

    def metric(self, name: str, **labels: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return float(sample.value)
        return 0.0

    def healthz(self) -> tuple[int, str]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=5) as answer:
            return int(answer.status), answer.read().decode().strip()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self._log.close()


@pytest.fixture
def start_controller(api: tuple[Client, Path], tmp_path: Path) -> Iterator[Callable[[str], ControllerProcess]]:
    started: list[ControllerProcess] = []

    def start(identity: str) -> ControllerProcess:
        process = ControllerProcess(api[1], identity, tmp_path / f"{identity}.log")
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def allocate(client: Client, name: str, *devices: str) -> dict[str, Any]:
    """A claim allocated by hand (no scheduler, no pod) to ``devices`` of node-1."""
    created = client.create(
        CLAIMS,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "mig.migdra.io"}}]}},
        },
    )
    results = [{"request": "gpu", "driver": DRIVER, "pool": NODE, "device": device} for device in devices]
    created["status"] = {"allocation": {"devices": {"results": results}}}
    return client.update(CLAIMS, created, subresource="status")


def reserved_condition(client: Client, name: str, device: str) -> dict[str, Any] | None:
    claim = client.get(CLAIMS, "default", name)
    if claim is None:
        return None
    entry = claim_view(claim).status_entry(DRIVER, NODE, device)
    condition = entry.condition("Reserved") if entry is not None else None
    return condition.model_dump(by_alias=True, exclude_none=True) if condition is not None else None


def events_of(client: Client, name: str) -> list[dict[str, Any]]:
    items, _ = client.list(EVENTS, "default", field_selector=f"involvedObject.name={name}")
    return items


def test_a_claim_allocated_by_hand_gets_its_placement_and_no_mig_fields(
    api: tuple[Client, Path], start_controller: Callable[[str], ControllerProcess]
) -> None:
    client, _ = api
    controller = start_controller("replica-a")
    allocate(client, "by-hand", THREE_G_AT_4)
    condition = wait_for("Reserved", lambda: reserved_condition(client, "by-hand", THREE_G_AT_4))
    assert (condition["status"], condition["reason"]) == ("True", "Allocated")
    claim = client.get(CLAIMS, "default", "by-hand")
    assert claim is not None
    (entry,) = claim["status"]["devices"]
    slices, _ = client.list(SLICES)
    parent = next(
        d["attributes"]["parentUUID"]["string"]
        for s in slices
        for d in s["spec"].get("devices") or []
        if d["name"] == THREE_G_AT_4
    )
    assert entry["data"] == {
        "schemaVersion": "v1",
        "node": NODE,
        "gpuUUID": parent,
        "gpuMinor": 0,
        "profile": "3g.40gb",
        "placement": {"start": 4, "size": 4},
        "memory": entry["data"]["memory"],
        "multiprocessors": 60,
    }
    assert entry["data"]["memory"].endswith("Mi")
    events = wait_for(
        "the Reserved Event", lambda: [e for e in events_of(client, "by-hand") if e["reason"] == "Reserved"]
    )
    # The leader's per-GPU picture: 4 of GPU 0's 8 memory slices held, none realized yet.
    wait_for(
        "the occupancy metric",
        lambda: controller.metric("migdra_gpu_free_memory_slices", node=NODE, gpu="gpu-0") == 4,
    )
    assert controller.metric("migdra_gpu_reserved_instances", node=NODE, gpu="gpu-0", profile="3g.40gb") == 1
    assert controller.metric("migdra_gpu_realized_instances", node=NODE, gpu="gpu-0", profile="3g.40gb") == 0
    assert controller.healthz() == (200, "ok")  # the liveness probe's answer while all runs
    assert events[0]["type"] == "Normal"
    assert events[0]["message"] == f"Reserved 3g.40gb at memory slices 4\u20137 of {parent} on {NODE}"


def test_overlapping_claims_are_both_flagged_and_nothing_is_deallocated(
    api: tuple[Client, Path], start_controller: Callable[[str], ControllerProcess]
) -> None:
    client, _ = api
    controller = start_controller("replica-a")
    allocate(client, "first", THREE_G_AT_4)
    allocate(client, "second", ONE_G_AT_6)
    for name, device in (("first", THREE_G_AT_4), ("second", ONE_G_AT_6)):
        condition = wait_for(
            f"{name} flagged",
            lambda name=name, device=device: (
                (c := reserved_condition(client, name, device)) and c["status"] == "False" and c
            ),
        )
        assert condition["reason"] == "PlacementConflict"
        other = "second" if name == "first" else "first"
        assert f"default/{other}" in condition["message"]
        warnings = wait_for(
            f"{name}'s Warning",
            lambda name=name: [e for e in events_of(client, name) if e["reason"] == "PlacementConflict"],
        )
        assert warnings[0]["type"] == "Warning"
        claim = client.get(CLAIMS, "default", name)
        assert claim is not None
        assert claim["status"]["allocation"]["devices"]["results"][0]["device"] == device, "deallocated"
    wait_for("the conflict metric", lambda: controller.metric("migdra_reservation_conflicts", node=NODE) == 2)


def test_a_device_that_is_no_longer_published_is_gone(
    api: tuple[Client, Path], start_controller: Callable[[str], ControllerProcess]
) -> None:
    client, _ = api
    start_controller("replica-a")
    allocate(client, "held", THREE_G_AT_4)
    wait_for("Reserved", lambda: (c := reserved_condition(client, "held", THREE_G_AT_4)) and c["status"] == "True")
    slices, _ = client.list(SLICES)
    for resource_slice in slices:  # a new generation without that device (its GPU's MIG layout changed)
        changed = copy.deepcopy(resource_slice)
        changed["spec"]["pool"]["generation"] += 1
        changed["spec"]["devices"] = [d for d in changed["spec"].get("devices") or [] if d["name"] != THREE_G_AT_4]
        if not changed["spec"]["devices"]:
            del changed["spec"]["devices"]
        client.update(SLICES, changed)
    condition = wait_for(
        "DeviceGone", lambda: (c := reserved_condition(client, "held", THREE_G_AT_4)) and c["status"] == "False" and c
    )
    assert condition["reason"] == "DeviceGone"
    claim = client.get(CLAIMS, "default", "held")
    assert claim is not None
    (entry,) = claim["status"]["devices"]
    assert entry["data"]["placement"] == {"start": 4, "size": 4}, "the last known placement stays"


def _holder(client: Client) -> str | None:
    lease = client.get(LEASES, "default", f"{DRIVER}-controller")
    return (lease or {}).get("spec", {}).get("holderIdentity") or None


def test_of_two_replicas_only_the_leader_writes_and_killing_it_hands_over(
    api: tuple[Client, Path], start_controller: Callable[[str], ControllerProcess]
) -> None:
    client, _ = api
    replicas = {"replica-a": start_controller("replica-a")}
    wait_for("replica-a leads", lambda: _holder(client) == "replica-a")
    replicas["replica-b"] = start_controller("replica-b")
    wait_for("replica-b serves metrics", replicas["replica-b"].serving)
    assert replicas["replica-b"].metric("migdra_controller_leader") == 0
    allocate(client, "one", THREE_G_AT_4)
    wait_for("Reserved", lambda: reserved_condition(client, "one", THREE_G_AT_4))
    # The leader counts its write once the API has answered it: a moment after the condition is readable.
    wait_for(
        "replica-a to count its status write",
        lambda: replicas["replica-a"].metric("migdra_controller_status_writes_total", result="success") >= 1,
    )
    assert replicas["replica-b"].metric("migdra_controller_status_writes_total", result="success") == 0
    (event,) = [e for e in events_of(client, "one") if e["reason"] == "Reserved"]
    assert event["reportingInstance"] == "replica-a"

    replicas["replica-a"].process.kill()  # SIGKILL: no release, the Lease must expire
    killed_at = time.monotonic()
    wait_for("replica-b leads", lambda: _holder(client) == "replica-b", timeout=LEASE_DURATION * 4)
    assert time.monotonic() - killed_at < LEASE_DURATION + 2 * 0.5 + 2, "took longer than the lease time"
    allocate(client, "two", ONE_G_AT_0_GPU1 := "gpu-1-mig-1g10gb-19-0")
    wait_for("Reserved by the new leader", lambda: reserved_condition(client, "two", ONE_G_AT_0_GPU1))
    events = wait_for("its Event", lambda: [e for e in events_of(client, "two") if e["reason"] == "Reserved"])
    assert events[0]["reportingInstance"] == "replica-b"


def test_a_clean_stop_releases_the_lease(
    api: tuple[Client, Path], start_controller: Callable[[str], ControllerProcess]
) -> None:
    client, _ = api
    replica = start_controller("replica-a")
    wait_for("replica-a leads", lambda: _holder(client) == "replica-a")
    replica.stop()
    assert replica.process.returncode == 0
    assert _holder(client) is None
