"""The reservation controller and the node plugin write one claim's status.devices entry, racing, on the
real kube-apiserver: whatever the order of their reads and applies, neither loses the other's part,
nobody else's entry is touched, and the allocation -- opaque configuration included -- stays as the
scheduler wrote it (docs/claim-status.md).

Each writer does what it does in production: read the claim, compute its part (the controller from
its reservations and the claim's ``managedFields``, the plugin from its checkpoint record), and apply
it as its own field manager -- the controller without force (a 409 means the plugin took ``data``:
read again and recompute), the plugin with force.  Every interleaving of the two read/apply pairs is
played on a claim of its own, then the plugin unprepares and the controller converges again.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dra_driver import claimstatus
from dra_driver.controller.reservations import compute_reservations
from dra_driver.controller.status import compute_claim_entries
from dra_driver.kube.client import CLAIMS, SLICES, Client
from dra_driver.kube.failures import ApiFailure, classify_failure
from dra_driver.mig.catalog import Placement
from kubeletplugin.prepare.claim_status import build_plugin_entries
from kubeletplugin.prepare.records import ClaimRecord, ClaimState, DeviceIntent, DeviceRecord
from tests.kube_apiserver import KubeApiServer
from tests.prepare_harness import create_claim, mig_config, opaque, result
from tests.sim_objects import DRIVER, H100, claim_view, node_slices

NODE = "node-a"  # tests.prepare_harness allocates its claims to this node
DEVICE = "gpu-0-mig-3g40gb-9-4"
NOW = "2026-12-01T00:00:00Z"
FOREIGN = {"driver": "net.example.com", "pool": NODE, "device": "eth0", "data": {"ip": "10.0.0.1"}}
CONTROLLER = claimstatus.controller_field_manager(DRIVER)
PLUGIN = claimstatus.plugin_field_manager(DRIVER, NODE)


@pytest.fixture
def client(kube_api_server: KubeApiServer) -> Iterator[Client]:
    api = Client(kube_api_server.kubeconfig_path)
    for resource_slice in node_slices(NODE, [H100]):
        api.create(SLICES, copy.deepcopy(resource_slice))
    try:
        yield api
    finally:
        api.close()


def prepared_record(claim: dict[str, Any], gpu_uuid: str) -> ClaimRecord:
    intent = DeviceIntent(
        device_name=DEVICE,
        request_names=("gpu",),
        gpu_uuid=gpu_uuid,
        gpu_minor=0,
        profile_id=9,
        profile_name="3g.40gb",
        placement=Placement(start=4, size=4),
        multiprocessor_count=60,
        memory_bytes=40448 << 20,
    )
    device = DeviceRecord(intent=intent, gpu_instance_id=2, compute_instance_id=0, mig_uuid="MIG-5a1e")
    meta = claim["metadata"]
    return ClaimRecord(
        claim_uid=meta["uid"],
        namespace=meta["namespace"],
        name=meta["name"],
        state=ClaimState.PREPARE_COMPLETED,
        devices=(device,),
    )


class Writers:
    """The two writers of one claim, each a read then an apply, steppable in any order."""

    def __init__(self, client: Client, claim: dict[str, Any], slices: list[dict[str, Any]]) -> None:
        self.client = client
        self.meta = claim["metadata"]
        self.slices = slices
        self.gpu_uuid = next(
            d["attributes"]["parentUUID"]["string"]
            for s in slices
            for d in s["spec"].get("devices", [])
            if d["name"] == DEVICE
        )
        self.read_by: dict[str, dict[str, Any]] = {}

    def read(self, who: str) -> None:
        claim = self.client.get(CLAIMS, self.meta["namespace"], self.meta["name"])
        assert claim is not None
        self.read_by[who] = claim

    def controller_apply(self) -> None:
        """As the controller: its part from what it read; a 409 (the plugin took data) reads again."""
        for _ in range(3):
            claim = claim_view(self.read_by["controller"])
            entries, _ = compute_claim_entries(
                claim, DRIVER, CONTROLLER, compute_reservations([claim], self.slices, DRIVER), None, NOW
            )
            assert entries is not None
            if claimstatus.is_applied(claim, CONTROLLER, DRIVER, entries):
                return
            body = claimstatus.build_apply_body(
                self.meta["namespace"], self.meta["name"], self.meta["uid"], DRIVER, entries
            )
            try:
                self.client.apply_status(CLAIMS, body, field_manager=CONTROLLER)
                return
            except Exception as exc:
                if classify_failure(exc) is not ApiFailure.CONFLICT:
                    raise
                self.read("controller")
        raise AssertionError("the controller kept conflicting")

    def plugin_apply(self, prepared: bool) -> None:
        claim = self.read_by["plugin"]
        record = prepared_record(claim, self.gpu_uuid) if prepared else None
        entries = build_plugin_entries(claim_view(claim), DRIVER, NODE, record, None, NOW)
        body = claimstatus.build_apply_body(
            self.meta["namespace"], self.meta["name"], self.meta["uid"], DRIVER, entries
        )
        self.client.apply_status(CLAIMS, body, field_manager=PLUGIN, force=True)

    def entry(self) -> dict[str, Any]:
        claim = self.client.get(CLAIMS, self.meta["namespace"], self.meta["name"])
        assert claim is not None
        devices = claim["status"]["devices"]
        foreign = [{k: v for k, v in d.items() if v is not None} for d in devices if d["driver"] == FOREIGN["driver"]]
        assert foreign == [FOREIGN], "another driver's entry was touched"
        (ours,) = [d for d in devices if claimstatus.entry_key(d) == (DRIVER, NODE, DEVICE, None)]
        return dict(ours)


STEPS: dict[str, Callable[[Writers], None]] = {
    "controller reads": lambda w: w.read("controller"),
    "controller applies": Writers.controller_apply,
    "plugin reads": lambda w: w.read("plugin"),
    "plugin applies": lambda w: w.plugin_apply(prepared=True),
}


def interleavings() -> list[tuple[str, ...]]:
    """Every order of the four steps in which each writer reads before it applies."""
    orders = []
    for order in itertools.permutations(STEPS):
        if order.index("controller reads") < order.index("controller applies") and order.index(
            "plugin reads"
        ) < order.index("plugin applies"):
            orders.append(order)
    return orders


def test_the_controller_and_the_plugin_racing_on_one_entry_lose_nothing(
    kube_api_server: KubeApiServer, client: Client
) -> None:
    slices, _ = client.list(SLICES)
    config = [opaque(mig_config(CUDA_MPS_PIPE_DIRECTORY="/tmp/mps"))]
    orders = interleavings()
    assert len(orders) == 6
    for number, order in enumerate(orders):
        ref = create_claim(
            client.api_client, f"race-{number}", [result(DEVICE), result("eth0", "nic", "net.example.com")], config
        )
        claim = client.get(CLAIMS, ref.namespace, ref.name)
        assert claim is not None
        allocation = json.dumps(claim["status"]["allocation"], sort_keys=True)
        foreign = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": claim["metadata"]}
        foreign = {
            **foreign,
            "metadata": {"name": ref.name, "namespace": ref.namespace},
            "status": {"devices": [FOREIGN]},
        }
        claim = client.apply_status(CLAIMS, foreign, field_manager="net.example.com")  # another driver's entry
        writers = Writers(client, claim, slices)
        for step in order:
            STEPS[step](writers)
        writers.read("controller")
        writers.controller_apply()  # the controller's next pass, after both

        entry = writers.entry()
        assert {c["type"]: c["status"] for c in entry["conditions"]} == {"Reserved": "True", "Ready": "True"}, order
        assert entry["data"]["migUUID"] == "MIG-5a1e", order
        assert entry["data"]["placement"] == {"start": 4, "size": 4}, order
        assert entry["data"]["memory"] == "40448Mi", order

        writers.read("plugin")
        writers.plugin_apply(prepared=False)  # unprepare: the plugin gives its part up
        writers.read("controller")
        writers.controller_apply()
        entry = writers.entry()
        assert [c["type"] for c in entry["conditions"]] == ["Reserved"], order
        assert "migUUID" not in entry["data"], order
        assert entry["data"]["placement"] == {"start": 4, "size": 4}, order  # the reservation keys are back
        after = client.get(CLAIMS, ref.namespace, ref.name)
        assert after is not None
        assert json.dumps(after["status"]["allocation"], sort_keys=True) == allocation, "the allocation changed"
