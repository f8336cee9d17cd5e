"""Shares of one GPU instance on `migdra sim up`: three pods, each with a claim of the
``mig-shared.migdra.io`` class for 1, 1 and 2 compute slices of a 4g.40gb, run on one GPU instance, each
on its own compute instance (its own MIG UUID, CDI device and status entry keyed by its shareID); the
GPU instance stays while one share remains and goes with the last.  Real processes, real kubectl."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from dra_driver.kube.client import CLAIMS, SLICES
from dra_driver.nvml.session import open_nvml
from dra_driver.nvml.settings import build_nvml_settings
from tests.sim_cluster import SimCluster, versioned_cluster
from tests.sim_objects import latest_pool
from tests.waiting import wait_for

pytestmark = pytest.mark.xdist_group("e2e-shared-gpu-instance")

SHARE = """
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: {name}
spec:
  devices:
    requests:
    - name: share
      exactly:
        deviceClassName: mig-shared.migdra.io
        selectors:
        - cel:
            expression: >-
              device.attributes['gpu.migdra.io'].profile in {profiles}{extra} &&
              device.attributes['gpu.migdra.io'].parentUUID == '{gpu}'
        capacity:
          requests:
            computeSlices: "{slices}"
---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  nodeSelector:
    kubernetes.io/hostname: {node}
  containers:
  - name: app
    image: registry.example/infer:latest
    resources:
      claims:
      - name: gpu
  resourceClaims:
  - name: gpu
    resourceClaimName: {name}
"""


FOUR_G = "['4g.40gb']"
SHARED_4G = "gpu-0-shared-4g40gb-5-0"


cluster = versioned_cluster("--nodes", "1", "--gpus", "H100-SXM5-80GB:1", "--shared-devices")


def _compute_instances(cluster: SimCluster, node: str) -> dict[tuple[str, int], list[str]]:
    """(GPU UUID, GPU instance ID) -> the MIG UUIDs of its compute instances, as the node's simulated
    NVML holds them."""
    state = cluster.workdir / "nodes" / node / "nvml-state.json"
    with open_nvml(build_nvml_settings(nvml="simulated", sim_state=state)) as nvml:
        return {
            (gpu.uuid, gi.gpu_instance_id): sorted(ci.mig_uuid for ci in gi.compute_instances)
            for gpu in nvml.list_gpus()
            for gi in nvml.gpu_instances(gpu.uuid)
        }


def _admitted(cluster: SimCluster, node: str, device: str) -> list[str] | None:
    """The share sizes ``device`` of ``node`` admits as published at its pool's latest generation (its
    computeSlices request policy's valid values); None while that generation is not complete."""
    current = latest_pool(cluster.client.list(SLICES)[0], node)  # migdra's pool is named for its node
    if current is None:
        return None
    for resource_slice in current:
        for published in resource_slice["spec"].get("devices") or []:
            if published["name"] == device:
                return list(published["capacity"]["computeSlices"]["requestPolicy"]["validValues"])
    return None


def _share_entry(claim: dict[str, Any]) -> dict[str, Any] | None:
    """The claim's status entry of its share once the plugin wrote it Ready (and the controller Reserved)."""
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    for entry in claim.get("status", {}).get("devices") or []:
        conditions = {c["type"]: c["status"] for c in entry.get("conditions") or []}
        if entry.get("shareID") == result["shareID"] and conditions.get("Ready") == "True" and "Reserved" in conditions:
            return dict(entry)
    return None


def test_three_shares_run_on_one_gpu_instance_each_on_its_own_compute_instance(cluster: SimCluster) -> None:
    node = cluster.kubectl("get", "nodes", "-o", "jsonpath={.items[0].metadata.name}").stdout.strip()
    # One GPU of the node (an H100 has one 4g.40gb placement): the shares must meet on its GI, whichever
    # of the node's GPUs a scheduler would pick first for each of them.
    gpu = next(
        str(device["attributes"]["parentUUID"]["string"])
        for resource_slice in cluster.client.list(SLICES)[0]
        if resource_slice["spec"].get("nodeName") == node
        for device in resource_slice["spec"].get("devices") or []
        if device["name"].startswith("gpu-0-shared-4g40gb-")
    )
    namespace = cluster.namespace("shares")
    # every size while no share lives there (a pool being re-published answers None: waited out)
    wait_for("the shared device to admit 1, 2 and 4", lambda: _admitted(cluster, node, SHARED_4G) == ["1", "2", "4"])
    sizes = {"infer-a": 1, "infer-b": 1, "infer-c": 2}
    manifest = "".join(
        SHARE.format(name=n, slices=s, node=node, gpu=gpu, profiles=FOUR_G, extra="") for n, s in sizes.items()
    )
    cluster.apply(namespace, manifest)
    pods = wait_for("the three pods to run", lambda: cluster.running(namespace, set(sizes)))

    claims = {c["metadata"]["name"]: c for c in cluster.claims(namespace)}
    results = {name: claim["status"]["allocation"]["devices"]["results"][0] for name, claim in claims.items()}
    (device,) = {r["device"] for r in results.values()}
    assert re.fullmatch(r"gpu-0-shared-4g40gb-5-0", device), device
    assert len({r["shareID"] for r in results.values()}) == 3
    assert {n: int(r["consumedCapacity"]["computeSlices"]) for n, r in results.items()} == sizes

    def entries() -> dict[str, dict[str, Any]] | None:
        current = {c["metadata"]["name"]: _share_entry(c) for c in cluster.claims(namespace)}
        return current if all(current.values()) else None  # type: ignore[return-value]

    written = wait_for("each share's Ready and Reserved entry", entries)
    assert len({e["data"]["migUUID"] for e in written.values()}) == 3, "a MIG device of its own per share"
    assert len({e["data"]["gpuInstanceID"] for e in written.values()}) == 1, "one GPU instance"
    assert len({e["data"]["computeInstanceID"] for e in written.values()}) == 3
    assert {n: e["data"]["computeSlices"] for n, e in written.items()} == sizes
    first = next(iter(written.values()))["data"]
    gi = (first["gpuUUID"], first["gpuInstanceID"])
    assert _compute_instances(cluster, node) == {gi: sorted(e["data"]["migUUID"] for e in written.values())}
    cdi = {n: json.loads(p["metadata"]["annotations"]["sim.migdra.io/cdi-devices"]) for n, p in pods.items()}
    assert len({json.dumps(ids, sort_keys=True) for ids in cdi.values()}) == 3, "each pod sees only its own"

    # Full (1+1+2 of 4 slices): only the whole GI's size is admitted, which fits nowhere while CIs stand.
    wait_for("the full shared device to admit 4 alone", lambda: _admitted(cluster, node, device) == ["4"])

    cluster.kubectl("delete", "pod", "infer-c", "-n", namespace, "--wait=true", "--timeout=60s")
    cluster.kubectl("delete", "resourceclaim", "infer-c", "-n", namespace, "--wait=true", "--timeout=60s")
    left = sorted(written[n]["data"]["migUUID"] for n in ("infer-a", "infer-b"))
    wait_for("infer-c's compute instance to go", lambda: _compute_instances(cluster, node) == {gi: left})
    # CIs at 0:1 and 1:1 remain: a 2-slice share still has 2:2, a 4-slice one no placement, so the
    # published device stops admitting 4 (the plugin re-publishes when a share's CI comes or goes).
    wait_for("the shared device to admit 1 and 2", lambda: _admitted(cluster, node, device) == ["1", "2"])

    cluster.describe_running_claims(namespace)

    cluster.delete_all(namespace)
    cluster.kubectl("delete", "resourceclaims", "--all", "-n", namespace, "--wait=true", "--timeout=60s")
    wait_for("the GPU instance to go with its last share", lambda: _compute_instances(cluster, node) == {})
    assert cluster.client.list(CLAIMS, namespace)[0] == []


def _ci_starts(cluster: SimCluster, node: str) -> dict[str, int]:
    """MIG UUID -> the start of its compute instance inside its GPU instance, as the simulated NVML holds it."""
    state = cluster.workdir / "nodes" / node / "nvml-state.json"
    with open_nvml(build_nvml_settings(nvml="simulated", sim_state=state)) as nvml:
        return {
            ci.mig_uuid: ci.placement.start
            for gpu in nvml.list_gpus()
            for gi in nvml.gpu_instances(gpu.uuid)
            for ci in gi.compute_instances
        }


def test_a_fragmented_gpu_instance_is_not_offered_a_share_it_cannot_place(cluster: SimCluster) -> None:
    """Three 1-slice shares fill the 3g.40gb at memory slice 4 (compute slices 0, 1, 2); the two at 0 and 2
    leave: two slices are free but the only 2-slice placement (0:2) is half taken.  The plugin publishes
    that this GI admits 1 only, so a 2-slice share of any 3g.40gb goes to the other one (at 0) and runs,
    instead of to the GI that already serves shares -- which the placement order prefers, and where it
    would fail (kube-scheduler counts slices, not placements)."""
    node = cluster.kubectl("get", "nodes", "-o", "jsonpath={.items[0].metadata.name}").stdout.strip()
    fragmented, other = "gpu-0-shared-3g40gb-9-4", "gpu-0-shared-3g40gb-9-0"
    gpu = next(
        str(device["attributes"]["parentUUID"]["string"])
        for resource_slice in cluster.client.list(SLICES)[0]
        if resource_slice["spec"].get("nodeName") == node
        for device in resource_slice["spec"].get("devices") or []
        if device["name"] == fragmented
    )
    namespace = cluster.namespace("fragments")
    names = [f"one-{i}" for i in range(3)]
    at_4 = " && device.attributes['gpu.migdra.io'].placementStart == 4"
    three_g = "['3g.40gb']"
    cluster.apply(
        namespace,
        "".join(SHARE.format(name=n, slices=1, node=node, gpu=gpu, profiles=three_g, extra=at_4) for n in names),
    )
    wait_for("the three shares to run", lambda: cluster.running(namespace, set(names)))

    def entries() -> dict[str, dict[str, Any]] | None:
        current = {c["metadata"]["name"]: _share_entry(c) for c in cluster.claims(namespace)}
        return current if len(current) == 3 and all(current.values()) else None  # type: ignore[return-value]

    written = wait_for("the shares' entries", entries)
    assert {e["device"] for e in written.values()} == {fragmented}
    starts = _ci_starts(cluster, node)
    by_start = {starts[e["data"]["migUUID"]]: name for name, e in written.items()}
    assert sorted(by_start) == [0, 1, 2]
    for start in (0, 2):
        cluster.kubectl("delete", "pod", by_start[start], "-n", namespace, "--wait=true", "--timeout=60s")
        cluster.kubectl("delete", "resourceclaim", by_start[start], "-n", namespace, "--wait=true", "--timeout=60s")
    wait_for("the fragmented GI to admit 1 alone", lambda: _admitted(cluster, node, fragmented) == ["1"])

    cluster.apply(namespace, SHARE.format(name="two", slices=2, node=node, gpu=gpu, profiles=three_g, extra=""))
    wait_for("the 2-slice share to run", lambda: cluster.running(namespace, {"two"}))
    (claim,) = (c for c in cluster.claims(namespace) if c["metadata"]["name"] == "two")
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["device"], result["consumedCapacity"]["computeSlices"]) == (other, "2")

    cluster.describe_running_claims(namespace)

    cluster.delete_all(namespace)
    cluster.kubectl("delete", "resourceclaims", "--all", "-n", namespace, "--wait=true", "--timeout=60s")
    wait_for("every GPU instance to go with its shares", lambda: _compute_instances(cluster, node) == {})
