"""The plugin's and the controller's writes to one status.devices entry, interleaved in any order
against the local API server, never lose a key (docs/claim-status.md).

Each writer does what it does in production: read the claim, compute its part with its own merge
function, PUT the status subresource with the resourceVersion read, and on 409 read again.
Hypothesis chooses the operations and how the reads and writes of the two writers interleave.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_driver import claimstatus
from dra_driver.controller.reservations import compute_reservations
from dra_driver.controller.status import compute_claim_devices
from dra_driver.kube.client import CLAIMS, SLICES, Client, status_code
from kubeletplugin.prepare.claim_status import DeviceStatusUpdate, clear_plugin_part, merge_plugin_part
from migdra_devcluster.apiserver import LocalAPIServer
from tests.sim_objects import DRIVER, H100, node_slices

NODE = "node-1"
DEVICE = "gpu-0-mig-3g40gb-9-4"
SLICE_OBJECTS = node_slices(NODE, [H100])
NOW = "2026-12-01T00:00:00Z"
FOREIGN = {"driver": "net.example.com", "pool": NODE, "device": "eth0", "data": {"ip": "10.0.0.1"}}
# What an admin's tool wrote into migdra's own entry: neither writer owns it, both must keep it.
THIRD_PARTY = {
    "driver": DRIVER,
    "pool": NODE,
    "device": DEVICE,
    "data": {"ticket": "OPS-42"},
    "conditions": [
        {"type": "example.com/Audited", "status": "True", "reason": "Audited", "message": "", "lastTransitionTime": NOW}
    ],
}
PLUGIN_IDENTITY = {
    "schemaVersion": claimstatus.SCHEMA_VERSION,
    "gpuUUID": "",  # filled in from the slices
    "profile": "3g.40gb",
    "placement": {"start": 4, "size": 4},
    "node": NODE,
    "migUUID": "MIG-5a1e",
    "gpuInstanceID": 2,
    "computeInstanceID": 0,
}


@pytest.fixture
def client(api_server: LocalAPIServer) -> Iterator[Client]:
    assert api_server.kubeconfig_path is not None
    api = Client(api_server.kubeconfig_path)
    for resource_slice in SLICE_OBJECTS:
        api.create(SLICES, copy.deepcopy(resource_slice))
    try:
        yield api
    finally:
        api.close()


def _plugin_change(operation: str, devices: list[dict[str, Any]], gpu_uuid: str) -> list[dict[str, Any]]:
    if operation == "unprepare":
        return clear_plugin_part(devices, DRIVER, NODE)
    data = {**PLUGIN_IDENTITY, "gpuUUID": gpu_uuid}
    ready = {"type": "Ready", "status": "True", "reason": "MigInstanceReady", "message": "", "lastTransitionTime": NOW}
    return merge_plugin_part(devices, DRIVER, NODE, [DeviceStatusUpdate(DEVICE, data, ready)])


@dataclass
class Writer:
    name: str
    operations: list[str]
    read: dict[str, Any] | None = None
    done: list[str] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return not self.operations

    def step(self, client: Client, claim_name: str, gpu_uuid: str) -> None:
        """Read (if it has nothing read) or write what it read, changed; a 409 sends it back to read."""
        if self.read is None:
            self.read = client.get(CLAIMS, "default", claim_name)
            return
        claim = self.read
        devices = [dict(e) for e in (claim.get("status") or {}).get("devices") or []]
        if self.name == "controller":
            reservations = compute_reservations([claim], SLICE_OBJECTS, DRIVER)
            devices, _ = compute_claim_devices(devices, DRIVER, reservations, None, NOW)
        else:
            devices = _plugin_change(self.operations[0], devices, gpu_uuid)
        body = copy.deepcopy(claim)
        body["status"]["devices"] = devices
        self.read = None
        try:
            client.update(CLAIMS, body, subresource="status")
        except Exception as exc:
            if status_code(exc) != 409:
                raise
            return  # read again and recompute: the operation is not done
        self.done.append(self.operations.pop(0))


_counter = iter(range(1_000_000))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    plugin_operations=st.lists(st.sampled_from(["prepare", "unprepare"]), min_size=1, max_size=4),
    controller_passes=st.integers(min_value=1, max_value=3),
    schedule=st.lists(st.booleans(), max_size=40),
)
def test_interleaved_writes_of_plugin_and_controller_never_lose_a_key(
    client: Client, plugin_operations: list[str], controller_passes: int, schedule: list[bool]
) -> None:
    name = f"claim-{next(_counter)}"
    created = client.create(
        CLAIMS,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "mig.migdra.io"}}]}},
        },
    )
    created["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": DEVICE},
                    {"request": "gpu", "driver": FOREIGN["driver"], "pool": NODE, "device": FOREIGN["device"]},
                ]
            }
        },
        "devices": [copy.deepcopy(FOREIGN), copy.deepcopy(THIRD_PARTY)],
    }
    client.update(CLAIMS, created, subresource="status")
    (reservation,) = compute_reservations([created], SLICE_OBJECTS, DRIVER)
    assert reservation.device is not None
    gpu_uuid = reservation.device.gpu_uuid

    plugin = Writer("plugin", list(plugin_operations))
    controller = Writer("controller", ["reserve"] * controller_passes)
    for plugin_first in schedule:
        writer = plugin if plugin_first else controller
        if writer.finished:
            writer = controller if plugin_first else plugin
        if writer.finished:
            break
        writer.step(client, name, gpu_uuid)
    for writer in (plugin, controller):
        while not writer.finished:
            writer.step(client, name, gpu_uuid)

    final = client.get(CLAIMS, "default", name)
    assert final is not None
    devices = final["status"]["devices"]
    assert FOREIGN in devices, "another driver's entry was lost"
    index = claimstatus.find_entry(devices, DRIVER, NODE, DEVICE)
    assert index is not None
    entry = devices[index]
    data = entry["data"]
    reserved = claimstatus.condition_of(entry, "Reserved")
    assert reserved is not None, "the controller's Reserved condition was lost"
    assert reserved["status"] == "True"
    assert data["placement"] == {"start": 4, "size": 4}, "a shared key was lost"
    assert data["gpuUUID"] == gpu_uuid
    assert data["gpuMinor"] == 0, "a controller key was lost"
    assert data["multiprocessors"] == 60
    assert data["ticket"] == "OPS-42", "a third party's key in our entry was lost"
    assert claimstatus.condition_of(entry, "example.com/Audited") is not None
    ready = claimstatus.condition_of(entry, "Ready")
    if plugin.done[-1] == "prepare":
        assert ready is not None, "the plugin's Ready was lost"
        assert (data["migUUID"], data["gpuInstanceID"], data["computeInstanceID"]) == ("MIG-5a1e", 2, 0)
    else:
        assert ready is None
        assert not set(claimstatus.IDENTITY_KEYS) & set(data), "the plugin's unprepare left identity keys"
