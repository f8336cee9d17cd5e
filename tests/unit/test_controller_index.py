"""The reservation controller's index (dra_driver/controller/index.py) against the whole-cluster answer:
after any sequence of claim and slice changes, each claim's reservations are exactly what
``compute_reservations`` says from every claim and every slice, and the claims a refresh hands back
include every claim whose reservations changed -- while a refresh recomputes only the pools the
changes touch."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from dra_driver.clusterview import compute_cluster_occupancy
from dra_driver.controller import index as index_module
from dra_driver.controller.index import ReservationIndex
from dra_driver.controller.reservations import DeviceReservation, Verdict, compute_reservations
from dra_driver.devicemodel.occupancy import GpuOccupancy
from dra_driver.kube.client import CLAIMS, SLICES
from dra_driver.kube.informer import Changes, Informer
from dra_driver.resourceclaim import ResourceClaimView
from tests.sim_objects import DRIVER, H100, allocated_claim, claim_views, node_slices

NODES = ("node-1", "node-2", "node-3")


class _NoClient:
    """The informers here are fed events by the test: they never talk to a server."""

    def fork(self) -> _NoClient:
        return self


class _Cluster:
    """Two informers fed by the test, and the version counter of its writes."""

    def __init__(self) -> None:
        self.claims = Informer(_NoClient(), CLAIMS, Changes())  # type: ignore[arg-type]
        self.slices = Informer(_NoClient(), SLICES, Changes())  # type: ignore[arg-type]
        self.version = 0
        self.generation = dict.fromkeys(NODES, 1)

    def put(self, informer: Informer, obj: dict[str, Any]) -> None:
        self.version += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.version)
        informer._apply({"type": "MODIFIED", "object": obj}, str(self.version))

    def delete(self, informer: Informer, obj: dict[str, Any]) -> None:
        self.version += 1
        gone = copy.deepcopy(obj)
        gone["metadata"]["resourceVersion"] = str(self.version)
        informer._apply({"type": "DELETED", "object": gone}, str(self.version))

    def publish(self, node: str, *, drop: int = 0, partial: bool = False, rng: random.Random | None = None) -> None:
        """The node's pool at a new generation; ``drop`` devices left out; ``partial``: only its
        counter slice written so far (the pool incomplete until the next publish)."""
        self.generation[node] += 1
        for resource_slice in node_slices(node, [H100, H100]):
            resource_slice["spec"]["pool"]["generation"] = self.generation[node]
            devices = resource_slice["spec"].get("devices")
            if devices and drop and rng is not None:
                for _ in range(drop):
                    devices.pop(rng.randrange(len(devices)))
            if partial and devices:
                continue
            self.put(self.slices, resource_slice)

    def remove_node(self, node: str) -> None:
        for resource_slice in self.slices.items():
            if resource_slice["spec"]["pool"]["name"] == node:
                self.delete(self.slices, resource_slice)


DEVICE_NAMES = [d["name"] for s in node_slices("node-1", [H100, H100]) for d in s["spec"].get("devices") or []]


def _normalised(gpus: list[GpuOccupancy]) -> list[tuple[object, ...]]:
    """What the occupancy metrics read of each GPU (which of two conflicting claims a slice shows is
    the order the claims came in, and says nothing the metrics use)."""
    return sorted(
        (
            gpu.pool,
            gpu.name,
            gpu.uuid,
            tuple(holder is None for holder in gpu.slices),
            tuple(sorted((i.claim, i.device, i.share_id or "", i.realized) for i in gpu.instances)),
            gpu.free_slices,
            tuple(gpu.foreign_slices),
            gpu.largest_allocatable,
            gpu.fragmentation,
        )
        for gpu in gpus
    )


def _per_pool_occupancy(index: ReservationIndex, cluster: _Cluster) -> list[tuple[object, ...]]:
    """The occupancy as the controller computes it for its metrics: pool by pool, from the index."""
    pools = {s["spec"]["pool"]["name"] for s in cluster.slices.items()}
    return _normalised([gpu for pool in pools for gpu in compute_cluster_occupancy(*index.pool_objects(pool), DRIVER)])


def _expected(cluster: _Cluster) -> dict[tuple[str, str], list[DeviceReservation]]:
    by_claim: dict[tuple[str, str], list[DeviceReservation]] = {}
    for reservation in compute_reservations(claim_views(cluster.claims.items()), cluster.slices.items(), DRIVER):
        by_claim.setdefault((reservation.namespace, reservation.claim_name), []).append(reservation)
    return by_claim


def _step(cluster: _Cluster, rng: random.Random, serial: int) -> None:
    roll = rng.random()
    claims = cluster.claims.items()
    if roll < 0.45 or not claims:
        node = rng.choice(NODES)
        devices = rng.sample(DEVICE_NAMES, rng.choice([1, 1, 2]))
        cluster.put(cluster.claims, allocated_claim(f"c{serial}", *devices, pool=node, admin=rng.random() < 0.05))
    elif roll < 0.6:
        cluster.delete(cluster.claims, rng.choice(claims))
    elif roll < 0.7:  # a claim's status written (another manager): the same reservations
        claim = copy.deepcopy(rng.choice(claims))
        claim["status"]["devices"] = [{"driver": DRIVER, "pool": "x", "device": "y"}]
        cluster.put(cluster.claims, claim)
    elif roll < 0.85:
        cluster.publish(rng.choice(NODES), drop=rng.choice([0, 0, 3]), rng=rng)
    elif roll < 0.95:
        cluster.publish(rng.choice(NODES), partial=True)
    else:
        cluster.remove_node(rng.choice(NODES))


def test_the_index_agrees_with_the_whole_cluster_answer_after_every_change() -> None:
    seen: set[Verdict] = set()
    for seed in range(8):
        rng = random.Random(seed)
        cluster = _Cluster()
        for node in NODES:
            cluster.publish(node)
        index = ReservationIndex(DRIVER)
        before: dict[tuple[str, str], list[DeviceReservation]] = {}
        for serial in range(120):
            for step in range(rng.choice([1, 1, 3])):  # sometimes several changes between two passes
                _step(cluster, rng, serial * 10 + step)
            changed = index.refresh(cluster.claims, cluster.slices)
            expected = _expected(cluster)
            keys = {(c["metadata"]["namespace"], c["metadata"]["name"]) for c in cluster.claims.items()}
            for key in keys | set(before):
                assert index.reservations_of(key) == expected.get(key, []), (seed, serial, key)
                if expected.get(key, []) != before.get(key, []):
                    assert key in changed, (seed, serial, key)
            seen |= {r.verdict for held in expected.values() for r in held}
            before = expected
            if serial % 10 == 0:
                assert _per_pool_occupancy(index, cluster) == _normalised(
                    compute_cluster_occupancy(cluster.slices.items(), claim_views(cluster.claims.items()), DRIVER)
                ), (seed, serial)
    assert seen == set(Verdict), "every verdict was exercised"


def test_a_refresh_recomputes_only_the_pools_that_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = _Cluster()
    for node in NODES:
        cluster.publish(node)
    for number, node in enumerate(NODES):
        cluster.put(cluster.claims, allocated_claim(f"on-{node}", DEVICE_NAMES[number], pool=node))
    index = ReservationIndex(DRIVER)
    assert len(index.refresh(cluster.claims, cluster.slices)) == 3
    recomputed: list[str] = []
    original = index_module.pool_reservations

    def counting(*args: Any, **kwargs: Any) -> list[DeviceReservation]:
        recomputed.append(str(kwargs["only_pool"]))
        return original(*args, **kwargs)

    monkeypatch.setattr(index_module, "pool_reservations", counting)
    cluster.put(cluster.claims, allocated_claim("another", DEVICE_NAMES[5], pool="node-2"))
    assert index.refresh(cluster.claims, cluster.slices) == {("default", "another")}
    assert recomputed == ["node-2"]
    recomputed.clear()
    assert index.refresh(cluster.claims, cluster.slices) == set()  # nothing changed: nothing recomputed
    assert recomputed == []


def test_a_controller_pass_looks_only_at_the_claims_whose_reservations_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller's work per claim does not grow with the cluster: after the first pass, a pass
    evaluates the claims that changed or whose pool changed what they hold, and nothing else."""
    from dra_driver.controller.controller import ReservationController
    from dra_driver.controller.reservation_metrics import ReservationMetrics
    from dra_driver.kube.events import EventRecorder

    cluster = _Cluster()
    for node in NODES:
        cluster.publish(node)
    for number in range(30):
        node = NODES[number % 3]
        cluster.put(cluster.claims, allocated_claim(f"c{number}", DEVICE_NAMES[number // 3], pool=node))
    client = _NoClient()
    controller = ReservationController(
        client,  # type: ignore[arg-type]
        DRIVER,
        EventRecorder(client, "test"),  # type: ignore[arg-type]
        ReservationMetrics(CollectorRegistry()),
        is_leader=lambda: True,
    )
    controller.claims, controller.slices = cluster.claims, cluster.slices
    for informer in (cluster.claims, cluster.slices):
        informer._synced.set()
    looked_at: list[str] = []

    def desired(claim: ResourceClaimView, held: Any) -> tuple[None, list[Any]]:
        looked_at.append(claim.metadata.name)
        return None, []  # as if its status said it already

    monkeypatch.setattr(controller, "_desired", desired)
    controller.sync()
    assert sorted(looked_at) == sorted(f"c{number}" for number in range(30))
    looked_at.clear()
    controller.sync()
    assert looked_at == []  # nothing changed
    cluster.put(cluster.claims, allocated_claim("new", "gpu-1-mig-1g10gb-19-6", pool="node-2"))  # overlaps no one
    controller.sync()
    assert looked_at == ["new"]
    looked_at.clear()
    cluster.publish("node-3")  # a new generation, the same devices: nobody's reservation changed
    controller.sync()
    assert looked_at == []
    cluster.publish("node-3", partial=True)  # mid-republish: node-3's claims are Unknown for now
    controller.sync()
    assert sorted(looked_at) == sorted(f"c{number}" for number in range(2, 30, 3))
