"""The allocator port against the real kube-scheduler: the same claims on the same cluster get the same
devices, or fit nowhere on both.

Why: ``migdra allocate`` ("which devices would kube-scheduler give this claim, or why not?"),
``migdra plan``, the packing benchmark and the local scheduler all rest on :mod:`dra_driver.tools.allocation`,
a port of kube-scheduler's structured allocator.  A port that drifts answers confidently and wrongly,
so this test asks both on one cluster -- the upstream v1.36 kube-apiserver, kube-scheduler and
kube-controller-manager of ``make kube`` with migdra's plugins on three nodes of mixed GPU models --
and requires them to agree on every claim.

How, per claim: create the ResourceClaim; run ``migdra allocate --from-cluster --claim NS/NAME --node N
-o json`` (before the pod exists: the prediction); create a pod using the claim, pinned to node N with
a ``kubernetes.io/hostname`` nodeSelector (``spec.nodeName`` would bypass the scheduler); wait for the
scheduler's answer -- the claim's ``status.allocation``, or the pod ``Unschedulable`` with a
``FailedScheduling`` Event -- and compare.  Claims are seeded random mixes of the vocabulary of demo/
and deviceclasses/: MIG profiles of every model, CEL selectors on attributes and capacity, counts,
several requests with ``matchAttribute``/``distinctAttribute``, ``firstAvailable``, ``allocationMode:
All``, admin access, claim configs, shares of shared GPU instances (``MIGDRA_DIFFERENTIAL_SHARES``, 0.15)
(``mig-shared.migdra.io`` with a ``computeSlices`` capacity request: valid sizes, sizes the request
policy rounds up, sizes above every valid one, none), and pods of two claims (allocated together).  Allocated claims
stay, so nodes fill up; some are deleted at random, so they fragment.

Each step places one pod on every node at once: a node's pool holds only that node's GPUs, so claims
pinned to different nodes never compete and one step gives three independent comparisons.

The ``dynamic`` placement policy re-publishes a node's slices in a new order whenever its allocations
change, and a shared device's admitted share sizes change as its shares' compute instances come and
go, so before predicting, the test waits on explicit signals: every allocated pod prepared (it runs,
or a share of it has no compute-instance placement in its GI -- then it leaves, counted), and every
node's published pool (latest generation, complete) equal to what the plugin must publish for the
claims allocated now -- computed with the plugin's own functions (``build_pool`` on the node's
simulated NVML, ``compute_allocated_devices``, the ``dynamic`` policy, ``render_slices``).  A plugin
re-publishing while the batch is predicted makes the batch settle and predict again (counted).
kube-scheduler's informers see those slices before the pod exists (the pod is created after the
prediction).  When the port says a claim does not fit, its explanation is kept for the report.

Compared: the results (devices, request names, order), the configs and the node selector, or "does
not fit".  One difference is accounted for, exactly: the port gives configs 1.37's shape (``requests``
left out when an entry covers every request), 1.36 keeps the list (docs/allocation.md, "Versions");
the test applies that rule to 1.36's answer and counts the pods it changed.

``MIGDRA_DIFFERENTIAL_SEED`` and ``MIGDRA_DIFFERENTIAL_CLAIMS`` change the sequence and its length.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from dra_driver.cli.main import cli
from dra_driver.device_config import load_device_model_config
from dra_driver.devicemodel.layout import render_slices
from dra_driver.devicemodel.naming import parse_shared_device_name
from dra_driver.devicemodel.policy import DynamicPlacementPolicy
from dra_driver.devicemodel.pool import NodePool, build_pool
from dra_driver.kube.client import CLAIMS, EVENTS, PODS, SLICES
from dra_driver.nvml.errors import NvmlError
from dra_driver.nvml.inventory import read_inventory
from dra_driver.nvml.session import open_nvml
from dra_driver.nvml.settings import build_nvml_settings
from dra_driver.resourceclaim import parse_claims
from kubeletplugin.occupancy import compute_allocated_devices
from tests.sim_cluster import SimCluster, sim_cluster
from tests.sim_objects import latest_pool
from tests.waiting import wait_for

DRIVER = "gpu.migdra.io"
SHARED_CLASS = "mig-shared.migdra.io"
FAILED_PREPARE = "FailedPrepareDynamicResources"  # kubelet's Event reason
UNPLACEABLE_SHARE = "no free placement for a share of"  # the node's message for a share that fits nowhere
DOMAIN = DRIVER
NAMESPACE = "differential"
NODE_GPUS = {
    "node-1": "H100-SXM5-80GB:2",
    "node-2": "H100-SXM5-80GB:1,A100-SXM4-40GB:1",
    "node-3": "A100-SXM4-40GB:1,A30:1",
}
SEED = int(os.environ.get("MIGDRA_DIFFERENTIAL_SEED", "2"))
CLAIMS_WANTED = int(os.environ.get("MIGDRA_DIFFERENTIAL_CLAIMS", "200"))
SETTLE_TIMEOUT = 60.0
"""A re-publish takes the plugin's debounce (set to 0.05 s below) and a LIST and a few writes."""
OUTCOME_TIMEOUT = 60.0
"""kube-scheduler places a pod within a second; with both CPUs busy, a few."""
DELETE_TIMEOUT = 90.0
"""Graceful pod deletion: the kubelet unprepares (the MIG instance is destroyed), the controller
deallocates the claim and drops its finalizer."""


# -- the claims ------------------------------------------------------------------------------------

# Every MIG profile of the three models, the small ones more often (a node fills over several claims).
PROFILES: dict[str, int] = {
    "1g.10gb": 6,  # H100 (1 slice) and A100 40GB (2 slices): one name, two shapes
    "1g.5gb": 5,
    "1g.6gb": 4,
    "1g.20gb": 3,
    "2g.20gb": 4,
    "2g.10gb": 4,
    "2g.12gb": 3,
    "1g.10gb+me": 2,
    "1g.5gb+me": 1,
    "1g.6gb+me": 1,
    "2g.12gb+me": 1,
    "3g.40gb": 2,
    "3g.20gb": 2,
    "4g.40gb": 1,
    "4g.20gb": 1,
    "4g.24gb": 1,
    "7g.80gb": 1,
    "7g.40gb": 1,
}
# DeviceClasses of deviceclasses/ (and examples/) that select MIG devices.
CLASSES = [
    "mig-1g-10gb.migdra.io",
    "mig-1g-5gb.migdra.io",
    "mig-2g-20gb.migdra.io",
    "mig-2g-10gb.migdra.io",
    "mig-3g-20gb.migdra.io",
    "mig-20gi-40sm.migdra.io",
    "mig-hopper.migdra.io",
    "h100.migdra.io",
    "driver-580-cc90.migdra.io",
]
# GI profiles with shared devices (docs/sharing.md), and the computeSlices a share asks (None: the default).
SHARED_PROFILES = ["4g.40gb", "7g.80gb", "3g.40gb", "2g.20gb", "4g.20gb", "7g.40gb", "3g.20gb", "4g.24gb", "2g.12gb"]
SHARE_SIZES = [None, 1, 1, 1, 2, 2, 3, 4, 7, 8]
SHARE_WEIGHT = float(os.environ.get("MIGDRA_DIFFERENTIAL_SHARES", "0.15"))
"""How often a request is a share (0-1; 0 turns shares off).  Two earlier clean-clone runs saw
kube-scheduler allocate a claim the port had found no room for; in both the port predicted while a
node's prepares of the previous step were still running, and a share's compute instance changes what
its shared device admits.  The test now waits for every allocated pod to be prepared and for the
published share sizes, predicts again when a pool moved while predicting, and keeps the port's
explanation of a "does not fit" for the report."""
ATTRIBUTE = f"device.attributes['{DOMAIN}']"
CAPACITY = f"device.capacity['{DOMAIN}']"


@dataclass(frozen=True)
class ClaimGenerator:
    """Random claims for one node: mostly of profiles its GPUs have (so the node fills up), some of
    any model's (which do not fit there)."""

    rng: random.Random
    local_profiles: frozenset[str]

    def profile(self) -> str:
        names = list(PROFILES)
        if self.rng.random() < 0.75:
            names = [name for name in names if name in self.local_profiles]
        return self.rng.choices(names, weights=[PROFILES[name] for name in names])[0]

    def selector(self) -> str:
        """One CEL expression over migdra's attributes and capacities (never a runtime error on its devices)."""
        return _selector(self.rng, self.profile())

    def exactly(self, count: int = 1) -> dict[str, Any]:
        rng = self.rng
        if SHARE_WEIGHT and rng.random() < SHARE_WEIGHT:
            return self.share(count)
        request: dict[str, Any] = {"deviceClassName": "mig.migdra.io"}
        if rng.random() < 0.2:
            request["deviceClassName"] = rng.choice(CLASSES)
            if rng.random() < 0.5:
                return request | ({"count": count} if count > 1 else {})
        request["selectors"] = [{"cel": {"expression": self.selector()}}]
        if rng.random() < 0.15:
            request["selectors"].append({"cel": {"expression": self.selector()}})
        if count > 1:
            request["count"] = count
        if rng.random() < 0.04:
            request["adminAccess"] = True
        return request

    def share(self, count: int = 1) -> dict[str, Any]:
        """A request for a share of a shared GPU instance: its profile, and a computeSlices size or none."""
        rng = self.rng
        names = [name for name in SHARED_PROFILES if name in self.local_profiles] or SHARED_PROFILES
        if rng.random() < 0.2:
            names = SHARED_PROFILES
        request: dict[str, Any] = {
            "deviceClassName": SHARED_CLASS,
            "selectors": [{"cel": {"expression": f"{ATTRIBUTE}.profile == '{rng.choice(names)}'"}}],
        }
        size = rng.choice(SHARE_SIZES)
        if size is not None:
            request["capacity"] = {"requests": {"computeSlices": str(size)}}
        if count > 1:
            request["count"] = count
        return request

    def claim_spec(self) -> dict[str, Any]:
        """``spec.devices`` of one random claim."""
        return build_claim_spec(self)


def _selector(rng: random.Random, profile: str) -> str:
    kind = rng.choice(["profile", "profile", "profile", "memory", "memory-sm", "product", "placement", "slices"])
    if kind == "profile":
        return f"{ATTRIBUTE}.profile == '{profile}'"
    if kind == "memory":
        return f"{CAPACITY}.memory.compareTo(quantity('{rng.choice([5, 10, 12, 20, 40])}Gi')) >= 0"
    if kind == "memory-sm":
        memory, sms = rng.choice([(5, 20), (10, 30), (20, 60), (10, 16)])
        return (
            f"{CAPACITY}.memory.compareTo(quantity('{memory}Gi')) >= 0 && "
            f"{CAPACITY}.multiprocessors.compareTo(quantity('{sms}')) <= 0"
        )
    if kind == "product":
        product = rng.choice(["NVIDIA H100", "NVIDIA A100", "NVIDIA A30"])
        return (
            f"{ATTRIBUTE}.productName.startsWith('{product}') && {ATTRIBUTE}.computeSlices <= {rng.choice([1, 2, 3])}"
        )
    if kind == "placement":
        return f"{ATTRIBUTE}.placementStart >= {rng.choice([1, 2, 4])} && {ATTRIBUTE}.placementSize <= 2"
    return f"{ATTRIBUTE}.computeSlices == {rng.choice([1, 2, 3, 4])} && {ATTRIBUTE}.architecture == 'Ampere'"


def build_claim_spec(generator: ClaimGenerator) -> dict[str, Any]:
    rng = generator.rng
    shape = rng.choices(
        ["one", "count", "pair", "first-available", "first-available-pair", "all"],
        weights=[38, 10, 16, 20, 10, 6],
    )[0]
    constraints: list[dict[str, Any]] = []
    if shape == "one":
        requests = [{"name": "mig", "exactly": generator.exactly()}]
    elif shape == "count":
        requests = [{"name": "migs", "exactly": generator.exactly(rng.choice([2, 2, 3]))}]
        if rng.random() < 0.6:
            constraints.append({"matchAttribute": f"{DOMAIN}/parentUUID"})
    elif shape == "pair":
        requests = [{"name": "a", "exactly": generator.exactly()}, {"name": "b", "exactly": generator.exactly()}]
        kind = rng.choice(["match-gpu", "match-gpu", "match-product", "distinct-gpu", "none"])
        if kind == "match-gpu":
            constraints.append({"requests": ["a", "b"], "matchAttribute": f"{DOMAIN}/parentUUID"})
        elif kind == "match-product":
            constraints.append({"matchAttribute": f"{DOMAIN}/productName"})
        elif kind == "distinct-gpu":
            constraints.append({"requests": ["a", "b"], "distinctAttribute": f"{DOMAIN}/parentUUID"})
    elif shape in ("first-available", "first-available-pair"):
        subrequests = []
        for number in range(rng.choice([2, 2, 3])):
            subrequest = generator.exactly(rng.choice([1, 1, 1, 2]))
            subrequest.pop("adminAccess", None)  # not allowed in a sub-request
            subrequests.append({"name": f"s{number}", **subrequest})
        requests = [{"name": "pick", "firstAvailable": subrequests}]
        if shape == "first-available-pair":
            requests.append({"name": "other", "exactly": generator.exactly()})
            constraints.append({"requests": ["pick", "other"], "matchAttribute": f"{DOMAIN}/parentUUID"})
        elif rng.random() < 0.3:
            constraints.append({"requests": ["pick"], "matchAttribute": f"{DOMAIN}/parentUUID"})
    else:
        profile = rng.choice(["7g.80gb", "7g.40gb", "4g.40gb", "4g.20gb", "4g.24gb", "3g.40gb"])
        requests = [
            {
                "name": "every",
                "exactly": {
                    "deviceClassName": "mig.migdra.io",
                    "allocationMode": "All",
                    "selectors": [{"cel": {"expression": f"{ATTRIBUTE}.profile == '{profile}'"}}],
                },
            }
        ]
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    if rng.random() < 0.2:
        devices["config"] = [_config(rng, requests)]
    return devices


def _config(rng: random.Random, requests: list[dict[str, Any]]) -> dict[str, Any]:
    """A claim config for every request, one request or one sub-request (results carry what applies)."""
    entry: dict[str, Any] = {
        "opaque": {
            "driver": DRIVER,
            "parameters": {"apiVersion": f"{DRIVER}/v1alpha1", "kind": "MigDeviceConfig", "env": {"STAGE": "test"}},
        }
    }
    request = rng.choice(requests)
    choice = rng.random()
    if choice < 0.3 and len(requests) > 1:
        entry["requests"] = [request["name"]]
    elif choice < 0.5 and len(requests) > 1:
        entry["requests"] = [r["name"] for r in requests]
    elif choice < 0.8 and "firstAvailable" in request:
        entry["requests"] = [f"{request['name']}/{rng.choice(request['firstAvailable'])['name']}"]
    return entry


def claim_body(name: str, devices: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"devices": devices},
    }


def pod_body(name: str, node: str, claims: list[str]) -> dict[str, Any]:
    """A pod of ``claims`` that only ``node`` may run: a nodeSelector, so kube-scheduler decides."""
    entries = [f"claim-{number}" for number in range(len(claims))]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example/app:latest",
                    "resources": {"claims": [{"name": entry} for entry in entries]},
                }
            ],
            "resourceClaims": [
                {"name": entry, "resourceClaimName": claim} for entry, claim in zip(entries, claims, strict=True)
            ],
        },
    }


# -- what the plugins must publish ------------------------------------------------------------------

POLICY = DynamicPlacementPolicy()


def build_node_pools(sim: SimCluster, claims: list[dict[str, Any]] | None = None) -> dict[str, NodePool]:
    """Each node's pool as its plugin builds it now, from the node's simulated NVML and ``claims``.

    Every GPU instance there is migdra's own (nothing else creates any), and own instances change no
    device or counter; what they change is what a shared device admits: the share sizes still
    placeable beside the compute instances of its shares (docs/sharing.md).  The GIs of shares are
    those of shared devices allocated with a ``shareID``; their CIs are read from NVML, which is what
    the plugin's checkpoint records once no prepare is in flight (the test waits for that)."""
    shared = frozenset(
        (result["pool"], parse_shared_device_name(result["device"]))
        for claim in claims or []
        for result in (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        if result.get("driver") == DRIVER and result.get("shareID") and parse_shared_device_name(result["device"])
    )
    pools = {}
    for node in NODE_GPUS:
        state = sim.workdir / "nodes" / node / "nvml-state.json"
        version = state.stat()
        # Built again only when the node's NVML state or its shares changed: the settle wait polls often,
        # and building three pools at every look would take CPU from the tests beside it.
        key = (str(state), version.st_mtime_ns, version.st_size, frozenset(s for s in shared if s[0] == node))
        if key not in _POOLS:
            if len(_POOLS) > 64:
                _POOLS.clear()
            _POOLS[key] = _build_node_pool(node, state, shared)
        pools[node] = _POOLS[key]
    return pools


_POOLS: dict[tuple[object, ...], NodePool] = {}
# The nodes' plugins publish shared devices (``sim up --shared-devices``): the expected pools do too.
_CONFIG = load_device_model_config(None, driver_name=DRIVER).model_copy(update={"shared_devices": True})


def _build_node_pool(node: str, state: Path, shared: frozenset[tuple[str, Any]]) -> NodePool:
    with open_nvml(build_nvml_settings(nvml="simulated", sim_state=state)) as nvml:
        inventory = read_inventory(nvml)
    instances = [(entry.gpu, gi) for entry in inventory.gpus for gi in entry.gpu_instances]
    return build_pool(
        inventory,
        _CONFIG,
        owned_instances={(gpu.uuid, gi.gpu_instance_id) for gpu, gi in instances},
        share_compute_instances={
            (gpu.uuid, gi.profile_id, gi.placement): [ci.placement for ci in gi.compute_instances]
            for gpu, gi in instances
            if (node, (gpu.minor_number, gi.profile_id, gi.placement.start)) in shared
        },
    )


def pool_layout(slices: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each slice's devices (or counter sets) by name, in order: what decides the allocator's order; a
    shared device with the share sizes it admits.

    Names, not whole specs: kube-apiserver returns quantities in canonical form (``25165824000`` as
    ``25165824k``), so the published spec is not the rendered text, while the devices are the same.
    (Share sizes are small whole numbers, the same in either form.)"""
    return {
        item["metadata"]["name"]: [_layout_entry(entry) for entry in item["spec"].get("devices") or []]
        or [entry["name"] for entry in item["spec"].get("sharedCounters") or []]
        for item in slices
    }


def _layout_entry(device: dict[str, Any]) -> str:
    policy = ((device.get("capacity") or {}).get("computeSlices") or {}).get("requestPolicy")
    return f"{device['name']} admits {policy['validValues']}" if policy else str(device["name"])


def published_layout(slices: list[dict[str, Any]], node: str) -> dict[str, list[str]] | None:
    """The layout of ``node``'s pool at its latest generation; None while that generation is incomplete."""
    current = latest_pool(slices, node, DRIVER)
    return None if current is None else pool_layout(current)


def unsettled_nodes(sim: SimCluster) -> list[str]:
    """The nodes whose published pool is not yet what the plugin must publish for the claims allocated now
    (every node while a node's simulated NVML changes under the read: a GI listed, then gone)."""
    claims = sim.client.list(CLAIMS)[0]
    try:
        pools = build_node_pools(sim, claims)
    except NvmlError:
        return list(NODE_GPUS)
    slices = sim.client.list(SLICES)[0]
    behind = []
    for node, pool in pools.items():
        allocated = compute_allocated_devices(parse_claims(claims), DRIVER, node)
        if published_layout(slices, node) != pool_layout(render_slices(pool, node, 0, None, POLICY, allocated)):
            behind.append(node)
    return behind


def describe_unsettled(sim: SimCluster) -> str:
    """For each node behind: the devices published but not expected, expected but not published, and
    the first slice whose order differs -- what a timeout must show."""
    claims = sim.client.list(CLAIMS)[0]
    try:
        pools = build_node_pools(sim, claims)
    except NvmlError as exc:
        return f"reading a node's simulated NVML failed: {exc}"
    slices = sim.client.list(SLICES)[0]
    lines = []
    for node, pool in pools.items():
        allocated = compute_allocated_devices(parse_claims(claims), DRIVER, node)
        expected = pool_layout(render_slices(pool, node, 0, None, POLICY, allocated))
        published = published_layout(slices, node)
        if published == expected:
            continue
        if published is None:
            lines.append(f"{node}: the latest generation is incomplete")
            continue
        have = {d for names in published.values() for d in names}
        want = {d for names in expected.values() for d in names}
        lines.append(
            f"{node}: published, not expected {sorted(have - want)}; expected, not published {sorted(want - have)}; "
            f"allocated {sorted(allocated)}"
        )
        for name in sorted(set(expected) | set(published)):
            if expected.get(name) != published.get(name):
                lines.append(f"  slice {name}: expected {expected.get(name)}, published {published.get(name)}")
                break
    return "\n".join(lines)


def wait_settled(sim: SimCluster) -> None:
    last: list[str] = []

    def settled() -> bool:
        last[:] = unsettled_nodes(sim)
        return not last

    try:
        wait_for(
            "the published pools to follow the allocations",
            settled,
            timeout=SETTLE_TIMEOUT,
            detail=lambda: describe_unsettled(sim),
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}; behind: {', '.join(last)}") from exc


# -- one comparison ---------------------------------------------------------------------------------


@dataclass
class Placement:
    """One pod of the sequence: its claims, the node it is pinned to, the prediction and the outcome."""

    pod: str
    node: str
    claims: dict[str, dict[str, Any]]  # name -> spec.devices
    predicted: dict[str, Any] | None = None  # claim -> allocation, None: does not fit
    why_not: dict[str, Any] | None = None  # the port's explanation when it does not fit
    generation: int = 0  # the node's pool generation the prediction was made against
    actual: dict[str, Any] | None = None
    outcome: str = ""  # allocated | unschedulable
    config_rule_applied: bool = False  # 1.36's config differs from the port's 1.37 rule (accounted for)
    prepared: bool = False  # the node prepared it (the pod runs)
    prepare_failure: str = ""  # ... or why the node could not


@dataclass
class Tally:
    claims: int = 0
    pods: int = 0
    allocated: int = 0
    unschedulable: int = 0
    deleted: int = 0
    config_rule_applied: int = 0
    predicted_again: int = 0  # batches predicted across a re-publish, so predicted again
    not_prepared: list[str] = field(default_factory=list)  # allocated, but a share of it has no CI placement
    mismatched_claims: int = 0
    mismatches: list[str] = field(default_factory=list)
    shapes: Counter[str] = field(default_factory=Counter)
    share_claims: int = 0  # claims asking for a share of a shared GPU instance
    shares_allocated: int = 0  # ... that kube-scheduler allocated


def comparable(allocation: dict[str, Any]) -> dict[str, Any]:
    """What both sides decide: the devices (in result order, with their request names), the configs and
    the node selector."""
    devices = allocation.get("devices") or {}
    results = [
        dict(result, shareID="<a share>") if result.get("shareID") else result  # a fresh UUID on each side
        for result in devices.get("results") or []
    ]
    return {
        "results": results,
        "config": devices.get("config") or [],
        "nodeSelector": allocation.get("nodeSelector"),
    }


def with_the_ported_config_rule(allocation: dict[str, Any], devices: dict[str, Any]) -> dict[str, Any]:
    """kube-scheduler 1.36's allocation with the one rule the port takes from 1.37 applied: a config entry
    whose ``requests`` cover every request of the claim (by name, or by the sub-request chosen for it)
    drops them, "empty means all" (kubernetes #139731, corrected by #139814; docs/allocation.md,
    "Versions").  1.36 keeps them.  Written here from the rule, not with the port's code."""
    chosen: dict[str, set[str]] = {request["name"]: set() for request in devices["requests"]}
    for result in allocation["results"]:
        parent, slash, _ = str(result["request"]).partition("/")
        if slash:
            chosen[parent].add(str(result["request"]))

    def covers_every_request(entry: dict[str, Any]) -> bool:
        named = set(entry.get("requests") or ())
        return bool(named) and all(request in named or chosen[request] & named for request in chosen)

    config = [
        {key: value for key, value in entry.items() if key != "requests"} if covers_every_request(entry) else entry
        for entry in allocation["config"]
    ]
    return allocation | {"config": config}


def predict(kubeconfig: Path, placement: Placement) -> None:
    """``migdra allocate --from-cluster`` for the pod's claims on its node (in this process: the same
    command, without an interpreter's start-up per claim); keeps the explanation when nothing fits."""
    args = ["allocate", "--from-cluster", "--kubeconfig", str(kubeconfig), "--node", placement.node, "-o", "json"]
    for claim in placement.claims:
        args += ["--claim", f"{NAMESPACE}/{claim}"]
    done = CliRunner().invoke(cli, args)
    assert done.exit_code in (0, 3), f"migdra allocate {' '.join(args)}: exit {done.exit_code}\n{done.output}"
    answer = json.loads(done.output)
    if done.exit_code == 3:
        placement.predicted, placement.why_not = None, answer["explanation"]
        return
    placement.predicted = {
        entry["claim"].split("/", 1)[1]: comparable(entry["allocation"]) for entry in answer["claims"]
    }
    placement.why_not = None


def pool_generations(sim: SimCluster) -> dict[str, int]:
    """Each node's latest published pool generation."""
    generations: dict[str, int] = {}
    for item in sim.client.list(SLICES)[0]:
        spec = item["spec"]
        if spec["driver"] == DRIVER:
            node = spec["pool"]["name"]
            generations[node] = max(generations.get(node, 0), int(spec["pool"]["generation"]))
    return generations


def predict_settled(sim: SimCluster, batch: list[Placement]) -> int:
    """Predict every placement against settled pools, and make sure they stayed so.

    A prediction lists the slices itself; should a plugin write a new generation between the settle
    check and that list (half-written, the port rightly sees the pool incomplete), the prediction is
    of a state kube-scheduler never meets.  So the generations are read before and after, and a batch
    predicted across a re-publish is settled and predicted again (bounded).  Returns how many times."""
    for again in range(5):
        wait_settled(sim)
        before = pool_generations(sim)
        for placement in batch:
            predict(sim.kubeconfig, placement)
        if pool_generations(sim) == before and not unsettled_nodes(sim):
            for placement in batch:
                placement.generation = before[placement.node]
            return again
    raise AssertionError(f"the published pools kept changing while predicting: {pool_generations(sim)}")


def observe(sim: SimCluster, placement: Placement) -> bool:
    """Whether kube-scheduler has answered: every claim allocated, or the pod Unschedulable with a
    FailedScheduling Event."""
    allocations = {}
    for name in placement.claims:
        claim = sim.client.get(CLAIMS, NAMESPACE, name)
        allocation = ((claim or {}).get("status") or {}).get("allocation")
        if allocation:
            allocations[name] = comparable(allocation)
    if len(allocations) == len(placement.claims):
        placement.outcome, placement.actual = "allocated", {}
        for name, allocation in allocations.items():
            placement.actual[name] = with_the_ported_config_rule(allocation, placement.claims[name])
            placement.config_rule_applied |= placement.actual[name] != allocation
        return True
    pod = sim.client.get(PODS, NAMESPACE, placement.pod) or {}
    conditions = (pod.get("status") or {}).get("conditions") or []
    unschedulable = any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in conditions
    )
    if not unschedulable:
        return False
    events = sim.client.list(EVENTS, NAMESPACE, field_selector=f"involvedObject.name={placement.pod}")[0]
    if not any(event.get("reason") == "FailedScheduling" for event in events):
        return False
    placement.outcome, placement.actual = "unschedulable", None
    return True


def describe(placement: Placement) -> str:
    return json.dumps(
        {
            "pod": placement.pod,
            "node": placement.node,
            "claims": placement.claims,
            "predicted": placement.predicted,
            "why_not": placement.why_not,
            "actual": placement.actual,
            "generation": placement.generation,
        },
        sort_keys=True,
    )


# -- the cluster ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimCluster]:
    fast_republish = []
    for node in NODE_GPUS:
        # The test waits for the re-publish on its own signal; a shorter debounce only makes it sooner.
        fast_republish += ["--plugin-env", f"{node}:MIGDRA_PLACEMENT_DEBOUNCE=0.05"]
        fast_republish += ["--plugin-env", f"{node}:MIGDRA_PLACEMENT_MIN_INTERVAL=0"]
    mixed = [f"--node-gpus={node}={gpus}" for node, gpus in NODE_GPUS.items() if node != "node-1"]
    nodes = ["--nodes", str(len(NODE_GPUS)), "--gpus", NODE_GPUS["node-1"], *mixed, "--shared-devices"]
    with sim_cluster(*nodes, *fast_republish) as sim:
        yield sim


def delete(sim: SimCluster, placement: Placement) -> None:
    sim.client.delete(PODS, NAMESPACE, placement.pod)
    for name in placement.claims:
        sim.client.delete(CLAIMS, NAMESPACE, name)


def wait_gone(sim: SimCluster, placements: list[Placement], what: str) -> None:
    """Until the pods and claims are gone: a claim being deleted is still allocated, and it must not be
    released between the prediction and kube-scheduler's attempt."""

    def gone() -> bool:
        return all(
            sim.client.get(PODS, NAMESPACE, p.pod) is None
            and all(sim.client.get(CLAIMS, NAMESPACE, c) is None for c in p.claims)
            for p in placements
        )

    wait_for(what, gone, timeout=DELETE_TIMEOUT)


def prepare_failures(sim: SimCluster, placement: Placement) -> list[str]:
    """kubelet's ``FailedPrepareDynamicResources`` Event messages for the pod."""
    events = sim.client.list(EVENTS, NAMESPACE, field_selector=f"involvedObject.name={placement.pod}")[0]
    return [str(event.get("message")) for event in events if event.get("reason") == FAILED_PREPARE]


def prepared_or_unplaceable(sim: SimCluster, placement: Placement) -> bool:
    """Whether the node has prepared the pod's claims (the pod runs) or said a share of it has no
    compute-instance placement in its GPU instance (a 7g GI cannot promise every order of sizes;
    docs/sharing.md) -- kubelet would retry that for ever.  Any other prepare failure is retried by
    kubelet, and one that lasts fails the wait: the scheduler allocated what the node cannot prepare."""
    pod = sim.client.get(PODS, NAMESPACE, placement.pod) or {}
    if (pod.get("status") or {}).get("phase") == "Running":
        placement.prepared = True
        return True
    unplaceable = [message for message in prepare_failures(sim, placement) if UNPLACEABLE_SHARE in message]
    if unplaceable:
        placement.prepared, placement.prepare_failure = False, unplaceable[0]
        return True
    return False


def wait_prepared(sim: SimCluster, placement: Placement) -> None:
    wait_for(
        f"pod {placement.pod} to run (or a share of it to have no placement)",
        lambda: prepared_or_unplaceable(sim, placement),
        timeout=OUTCOME_TIMEOUT,
        detail=lambda: f"{describe(placement)}\nprepare failures: {prepare_failures(sim, placement)}",
    )


def wait_answer(sim: SimCluster, placement: Placement) -> None:
    wait_for(
        f"kube-scheduler's answer for pod {placement.pod}", lambda: observe(sim, placement), timeout=OUTCOME_TIMEOUT
    )


@dataclass
class DifferentialRun:
    """The sequence: per step, some allocated pods leave, then every node gets one new pod."""

    sim: SimCluster
    pools: dict[str, NodePool]
    rng: random.Random
    tally: Tally = field(default_factory=Tally)
    live: dict[str, list[Placement]] = field(default_factory=dict)
    last_fit: dict[str, bool] = field(default_factory=dict)
    number: int = 0

    def step(self) -> None:
        leaving = self.choose_leaving()
        for placement in leaving:
            delete(self.sim, placement)
        batch = [self.create_claims(node) for node in self.pools]
        wait_gone(self.sim, leaving, "deleted pods and claims to go")
        self.tally.predicted_again += predict_settled(self.sim, batch)
        for placement in batch:
            self.sim.client.create(PODS, pod_body(placement.pod, placement.node, list(placement.claims)))
        for placement in batch:
            wait_answer(self.sim, placement)
            self.record(placement)
        # A pod left pending would be placed later, when claims go: the next prediction would not know.
        unschedulable = [p for p in batch if p.outcome == "unschedulable"]
        # The node prepares what was allocated: a share's CI changes what its shared device admits, so
        # the next prediction waits for it (a share the node cannot place leaves; it is counted).
        for placement in batch:
            if placement.outcome == "allocated":
                wait_prepared(self.sim, placement)
        not_prepared = [p for p in batch if p.outcome == "allocated" and not p.prepared]
        for placement in not_prepared:
            self.live[placement.node].remove(placement)
            self.tally.not_prepared.append(f"{placement.pod}: {placement.prepare_failure}")
        for placement in unschedulable + not_prepared:
            delete(self.sim, placement)
        wait_gone(self.sim, unschedulable + not_prepared, "unschedulable and unprepared pods to go")

    def choose_leaving(self) -> list[Placement]:
        """At random, more after a claim that did not fit: nodes fill, fragment and free up."""
        leaving = []
        for node in self.pools:
            placements = self.live.setdefault(node, [])
            chance = 0.35 if self.last_fit.get(node, True) else 0.8
            while placements and self.rng.random() < chance:
                leaving.append(placements.pop(self.rng.randrange(len(placements))))
                chance /= 2
        self.tally.deleted += sum(len(p.claims) for p in leaving)
        return leaving

    def create_claims(self, node: str) -> Placement:
        self.number += 1
        names = [f"c{self.number}"] + ([f"c{self.number}b"] if self.rng.random() < 0.12 else [])
        local = frozenset(d.profile_name for d in self.pools[node].devices if d.profile_name)
        generator = ClaimGenerator(self.rng, local)
        placement = Placement(f"p{self.number}", node, {name: generator.claim_spec() for name in names})
        for name, devices in placement.claims.items():
            self.sim.client.create(CLAIMS, claim_body(name, devices))
            self.tally.shapes[_shape(devices)] += 1
            self.tally.share_claims += SHARED_CLASS in json.dumps(devices)
        return placement

    def record(self, placement: Placement) -> None:
        tally = self.tally
        tally.claims += len(placement.claims)
        tally.pods += 1
        tally.config_rule_applied += placement.config_rule_applied
        if placement.predicted != placement.actual:
            tally.mismatches.append(describe(placement))
            tally.mismatched_claims += len(placement.claims)
        self.last_fit[placement.node] = placement.outcome == "allocated"
        if placement.outcome == "allocated":
            tally.allocated += len(placement.claims)
            tally.shares_allocated += sum(
                any(result.get("shareID") for result in allocation["results"])
                for allocation in (placement.actual or {}).values()
            )
            self.live[placement.node].append(placement)
        else:
            tally.unschedulable += len(placement.claims)

    def summary(self) -> str:
        tally = self.tally
        agreed = tally.claims - tally.mismatched_claims
        nodes = ", ".join(f"{node} {gpus}" for node, gpus in NODE_GPUS.items())
        return (
            f"allocator differential (seed {SEED}): {agreed}/{tally.claims} claims agree "
            f"({100 * agreed / max(tally.claims, 1):.1f} %), {tally.pods - len(tally.mismatches)}/{tally.pods} pods, "
            f"on {len(NODE_GPUS)} nodes ({nodes}); {tally.allocated} claims allocated, {tally.unschedulable} did "
            f"not fit, {tally.deleted} deleted; {tally.config_rule_applied} pods' configs compared under 1.37's "
            f"rule; {tally.predicted_again} batches predicted again (a re-publish while predicting); "
            f"{len(tally.not_prepared)} allocated pods with a share the node could not place {tally.not_prepared}; "
            f"{tally.share_claims} claims asked for shares, {tally.shares_allocated} got them; "
            f"shapes {dict(sorted(tally.shapes.items()))}"
        )


def test_the_port_allocates_as_kube_scheduler_does(cluster: SimCluster) -> None:
    cluster.namespace(NAMESPACE)
    cluster.kubectl("label", "namespace", NAMESPACE, "resource.kubernetes.io/admin-access=true")  # adminAccess
    run = DifferentialRun(cluster, build_node_pools(cluster), random.Random(SEED))
    while run.tally.claims < CLAIMS_WANTED:
        run.step()
    print(f"\n{run.summary()}")
    assert not run.tally.mismatches, "\n".join([run.summary(), *run.tally.mismatches])


def _shape(devices: dict[str, Any]) -> str:
    request = devices["requests"][0]
    if "firstAvailable" in request:
        return "firstAvailable"
    if request["exactly"].get("allocationMode") == "All":
        return "All"
    if len(devices["requests"]) > 1:
        return "pair"
    return "count" if request["exactly"].get("count", 1) > 1 else "one"
