"""What the kube-scheduler benchmarks share: a control plane of etcd + kube-apiserver + kube-scheduler and
nothing else, a fleet of Node objects with migdra's ResourceSlices, bursts of pods, and what the
processes spent on them.

Why a module of its own: ``scheduler_bench.py`` (the throughput curve over cluster sizes) and
``schedlayout_bench.py`` (the same scheduler on alternative slice layouts, and where its time goes) must
measure the same way, or their tables could not be read side by side.

- **The control plane** is ``make kube``'s, started with ``devcluster/migdra_devcluster/upstream``'s
  command lines (the start every upstream control plane of migdra shares), no controller-manager, no
  kubelets, no plugins; kube-scheduler with its profiling endpoint on (``/debug/pprof``, read as the
  admin) and ``--kube-api-qps/--kube-api-burst`` 5000 as upstream's ``test/integration/scheduler_perf``
  configures its scheduler's client (a stock scheduler's 50/100 caps it near 25 pods/s at two writes
  per DRA pod, whatever the allocation costs).
- **The fleet**: Nodes as migdra's simulated kubelet writes them (Ready, 110 pods, without the not-ready
  taint only kube-controller-manager would lift), each with the slices migdra's plugin publishes for 8
  simulated H100-SXM5-80GB (its own GPU UUIDs, the plugin's ``build_pool`` and ``SlicePublisher``, the
  placement policy's order), grown node by node as a curve needs.  *Half full* gives every GPU one
  allocated ``4g.40gb`` at memory slice 0 (claims whose ``status.allocation`` the admin writes, as
  kube-scheduler would have): half of every GPU's memory slices taken, every profile of the burst
  still placeable; an occupancy-aware policy re-publishes for it, as the plugin would.
- **A round**: ``count`` pods created in order by ``creators`` threads, each with a pre-made claim for
  one MIG device (a seeded inference mix) or, for the floor, without any claim; the clock runs from
  the first create until a watch has seen every pod bound.  kube-scheduler's own /metrics (attempts,
  its SLI, the attempt duration) and the CPU seconds each process spent (``/proc/<pid>/stat``) are
  read before and after.
"""

from __future__ import annotations

import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
from benchlib import REPO
from prometheus_client.parser import text_string_to_metric_families

from dra_driver.jsontypes import MutableJSON

sys.path.insert(0, str(REPO))
from dra_driver.deviceclasses import deviceclass_documents
from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.layout import render_slices
from dra_driver.devicemodel.policy import DEFAULT_POLICY, PlacementPolicy, placement_policy
from dra_driver.devicemodel.pool import NodePool, build_pool
from dra_driver.kube.client import CLAIMS, DEVICE_CLASSES, NODES, PODS, SLICES, Client, Kind
from dra_driver.nvml.inventory import read_inventory
from dra_driver.nvml.session import open_nvml
from dra_driver.nvml.settings import build_nvml_settings
from dra_driver.nvml.types import NodeInventory
from kubeletplugin.publisher import SlicePublisher
from migdra_devcluster.kubelet.node import kubelet_version, node_status
from migdra_devcluster.upstream.binaries import KubeBinaries
from migdra_devcluster.upstream.controlplane import ControlPlaneShape, UpstreamControlPlane

DRIVER = "gpu.migdra.io"
MIG_CLASS = "mig.migdra.io"
GPU_MODEL = "H100-SXM5-80GB"
GPUS_PER_NODE = 8
MEMORY_SLICES_PER_GPU = 8
SERVICE_ACCOUNTS = Kind("", "v1", "serviceaccounts", namespaced=True, kind="ServiceAccount")
NAMESPACES = Kind("", "v1", "namespaces", namespaced=False, kind="Namespace")
# An inference mix, weighted; seeded, so every run asks for the same claims in the same order.
MIX: tuple[tuple[str, int], ...] = (("1g.10gb", 50), ("2g.20gb", 30), ("3g.40gb", 20))
MIX_MEMORY_SLICES = {"1g.10gb": 1, "2g.20gb": 2, "3g.40gb": 4}
FILL_PROFILE = "4g.40gb"  # half full: one at memory slice 0 of every GPU
NODE_CAPACITY = {"cpu": "64", "memory": "1Ti", "pods": "110", "ephemeral-storage": "1Ti"}
WAIT = 900.0
QPS_OF_SCHEDULER_PERF = 5000  # test/integration/scheduler_perf's client QPS and burst
PROCESSES = ("etcd", "kube-apiserver", "kube-scheduler")


def progress(text: str) -> None:
    print(f"scheduler bench: {text}", file=sys.stderr, flush=True)


# -- the control plane --------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessStats:
    """What one process holds and has spent: resident memory now and at its peak, CPU seconds so far."""

    rss_mib: float
    peak_rss_mib: float
    cpu_seconds: float


def process_stats(pid: int) -> ProcessStats:
    status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    fields = {line.split(":", 1)[0]: line.split(":", 1)[1].split() for line in status.splitlines() if ":" in line}
    stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    after_name = stat.rsplit(")", 1)[1].split()  # the name may hold spaces; fields 14 and 15 follow it
    ticks = int(after_name[11]) + int(after_name[12])
    return ProcessStats(
        int(fields["VmRSS"][0]) / 1024, int(fields["VmHWM"][0]) / 1024, ticks / os.sysconf("SC_CLK_TCK")
    )


@dataclass
class ControlPlane:
    """The three processes, an admin client, and what it takes to read kube-scheduler's endpoints."""

    client: Client
    version: str
    scheduler_url: str
    https: urllib3.PoolManager
    pids: dict[str, int]

    def stats(self) -> dict[str, ProcessStats]:
        return {name: process_stats(pid) for name, pid in self.pids.items()}

    def scheduler_get(self, path: str, timeout: float = 30) -> bytes:
        answer = self.https.request("GET", self.scheduler_url + path, timeout=timeout, retries=False)
        if answer.status != 200:
            raise SystemExit(f"kube-scheduler {path} answered {answer.status}: {answer.data[:200]!r}")
        return bytes(answer.data)


@contextmanager
def control_plane(workdir: Path, binaries: KubeBinaries, qps: int, burst: int) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver + kube-scheduler started as ``sim up`` starts them (the one way:
    :class:`~migdra_devcluster.upstream.controlplane.UpstreamControlPlane`), with the scheduler's client QPS
    and its profiling endpoint: nothing else writes to the cluster."""
    shape = ControlPlaneShape(
        controller_manager=False,
        scheduler_profiling=True,
        scheduler_flags=(f"--kube-api-qps={qps}", f"--kube-api-burst={burst}"),
    )
    plane = UpstreamControlPlane(workdir, binaries, shape, progress)
    https = urllib3.PoolManager(
        # kube-scheduler serves with the certificate it wrote into its --cert-dir at start-up.
        ca_certs=str(plane.files.directory / "scheduler-certs" / "kube-scheduler.crt"),
        cert_file=str(workdir / "admin.crt"),
        key_file=str(workdir / "admin.key"),
    )
    client: Client | None = None
    # A benchmark stopped with SIGTERM (timeout, kill) stops its control plane too, as on Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        progress(f"Kubernetes {binaries.version}")
        plane.start()
        client = Client(plane.kubeconfig)
        for document in deviceclass_documents(REPO / "deviceclasses", DRIVER):
            client.create(DEVICE_CLASSES, document)
        yield ControlPlane(client, binaries.version, f"https://127.0.0.1:{plane.ports.scheduler}", https, plane.pids)
    finally:
        if client is not None:
            client.close()
        https.clear()
        plane.stop()


@dataclass(frozen=True)
class SchedulerCounters:
    """Cumulative counters of kube-scheduler's /metrics; a round's figures are the differences."""

    attempts: float  # scheduler_schedule_attempts_total, every result
    sli_sum: float  # scheduler_pod_scheduling_sli_duration_seconds
    sli_count: float
    attempt_sum: float  # scheduler_scheduling_attempt_duration_seconds
    attempt_count: float


def read_scheduler_counters(plane: ControlPlane) -> SchedulerCounters:
    """kube-scheduler's own view, read as the admin (its secure port delegates authorization)."""
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(plane.scheduler_get("/metrics").decode()):
        for sample in family.samples:
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return SchedulerCounters(
        attempts=totals.get("scheduler_schedule_attempts_total", 0.0),
        sli_sum=totals.get("scheduler_pod_scheduling_sli_duration_seconds_sum", 0.0),
        sli_count=totals.get("scheduler_pod_scheduling_sli_duration_seconds_count", 0.0),
        attempt_sum=totals.get("scheduler_scheduling_attempt_duration_seconds_sum", 0.0),
        attempt_count=totals.get("scheduler_scheduling_attempt_duration_seconds_count", 0.0),
    )


def settled_counters(plane: ControlPlane, before: SchedulerCounters, count: int) -> SchedulerCounters:
    """The counters once they include all ``count`` pods: kube-scheduler records a pod's SLI and attempt
    after its binding call returns, so the watch may see the pod bound a moment before (5 s at most)."""
    deadline = time.monotonic() + 5
    while True:
        after = read_scheduler_counters(plane)
        if after.sli_count - before.sli_count >= count or time.monotonic() > deadline:
            return after
        time.sleep(0.05)


# -- the fleet: nodes and their slices --------------------------------------------------------


SliceTransform = Callable[[list[MutableJSON]], list[MutableJSON]]


@dataclass(frozen=True)
class Layout:
    """How the fleet's nodes publish: the device configuration and placement policy migdra's plugin
    would run with, and -- for the layout experiments only -- a rewrite of the rendered slices that no
    configuration offers (fewer attributes, other counters), published by the benchmark itself."""

    name: str
    description: str
    policy: Callable[[], PlacementPolicy] = lambda: placement_policy(DEFAULT_POLICY)
    config: DeviceModelConfig = field(default_factory=DeviceModelConfig)
    transform: SliceTransform | None = None
    class_selectors: Mapping[str, str] | None = None  # DeviceClass name -> its one CEL selector, replaced


DEFAULT_LAYOUT = Layout("default", "what migdra's plugin publishes by default")


def named_policy(name: str) -> Callable[[], PlacementPolicy]:
    return lambda: placement_policy(name)


class Fleet:
    """The benchmark's nodes, grown on demand, and their slices as the plugin would publish them."""

    def __init__(self, plane: ControlPlane, layout: Layout = DEFAULT_LAYOUT) -> None:
        self.plane = plane
        self.layout = layout
        self.nodes: list[str] = []
        self.pools: dict[str, NodePool] = {}
        self.allocated: dict[str, frozenset[str]] = {}
        self.generations: dict[str, int] = {}
        self.fill_namespace: str | None = None
        self._inventories: dict[str, NodeInventory] = {}
        self._publishers: dict[str, SlicePublisher] = {}
        self._classes = {c["metadata"]["name"]: c for c in plane.client.list(DEVICE_CLASSES)[0]}
        self._policy = layout.policy()
        self._patch_classes()

    def _patch_classes(self) -> None:
        """The layout's class selectors, or the project's where it names none."""
        for name, original in self._classes.items():
            selectors = original["spec"].get("selectors") or []
            if self.layout.class_selectors and name in self.layout.class_selectors:
                selectors = [{"cel": {"expression": self.layout.class_selectors[name]}}]
            self.plane.client.merge_patch(DEVICE_CLASSES, None, name, {"spec": {"selectors": selectors}})

    def use(self, layout: Layout) -> None:
        """Every node re-published in ``layout`` (its slices deleted first, so no two layouts mix), the
        fill kept."""
        self.layout = layout
        self._policy = layout.policy()
        self._patch_classes()
        self._publishers.clear()
        client = self.plane.client
        for node in self.nodes:
            self.pools[node] = build_pool(self._inventories[node], layout.config)
            for old in client.list(SLICES, field_selector=f"spec.nodeName={node}")[0]:
                client.delete(SLICES, None, old["metadata"]["name"])
            self._publish(node)

    @property
    def devices_per_node(self) -> int:
        return len(next(iter(self.pools.values())).devices) if self.pools else 0

    def slices_per_node(self) -> int:
        return len(self.plane.client.list(SLICES, field_selector=f"spec.nodeName={self.nodes[0]}")[0])

    def grow(self, count: int) -> None:
        """Nodes until there are ``count``, each with its slices published."""
        client = self.plane.client
        version = kubelet_version(self.plane.version)
        started = time.monotonic()
        while len(self.nodes) < count:
            name = f"node-{len(self.nodes):04d}"
            labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
            client.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})
            # kube-apiserver's TaintNodesByCondition admission taints a new Node not-ready until
            # kube-controller-manager's node-lifecycle controller sees it Ready; that controller is not running.
            created = client.merge_patch(NODES, None, name, {"spec": {"taints": None}})
            created["status"] = node_status(name, NODE_CAPACITY, "127.0.0.1", version)
            client.update(NODES, created, subresource="status")  # a Node's status is written on its own
            settings = build_nvml_settings(
                nvml=None, sim_state=None, sim_gpus=f"{GPU_MODEL}:{GPUS_PER_NODE}", sim_mig_enabled=None
            )
            with open_nvml(settings) as session:  # a throw-away simulated node: its own GPU UUIDs
                inventory = read_inventory(session)
            self._inventories[name] = inventory
            self.pools[name] = build_pool(inventory, self.layout.config)
            self.allocated[name] = frozenset()
            self.nodes.append(name)
            self._publish(name)
        progress(f"{count} nodes published ({time.monotonic() - started:.0f} s for the new ones)")

    def _publish(self, node: str) -> None:
        if self.layout.transform is None:
            publisher = self._publishers.get(node)
            if publisher is None:
                publisher = SlicePublisher(
                    self.plane.client,
                    node,
                    DRIVER,
                    self._policy,
                    allocated=lambda node=node: self.allocated[node],  # type: ignore[misc]
                )
                self._publishers[node] = publisher
            publisher.publish(self.pools[node])
            return
        # A layout no configuration offers: the next generation, written whole after the old one is gone.
        client = self.plane.client
        generation = self.generations.get(node, 0) + 1
        self.generations[node] = generation
        for old in client.list(SLICES, field_selector=f"spec.nodeName={node}")[0]:
            client.delete(SLICES, None, old["metadata"]["name"])
        rendered = render_slices(
            self.pools[node], node, generation, policy=self._policy, allocated=self.allocated[node]
        )
        for body in self.layout.transform(rendered):
            client.create(SLICES, body)

    def fill_half(self, creators: int) -> None:
        """One allocated ``4g.40gb`` at memory slice 0 on every GPU of every node, then re-publish."""
        namespace = f"fill-{len(self.nodes)}-{int(time.time())}"
        make_namespace(self.plane.client, namespace)
        work: list[tuple[str, str]] = []
        for node in self.nodes:
            taken = [
                d.name
                for d in self.pools[node].devices
                if d.profile_name == FILL_PROFILE
                and not d.shared
                and d.placement is not None
                and d.placement.start == 0
            ]
            if len(taken) != GPUS_PER_NODE:
                raise SystemExit(f"{node}: {len(taken)} {FILL_PROFILE} devices at slice 0, not {GPUS_PER_NODE}")
            work += [(node, device) for device in taken]
            self.allocated[node] = frozenset(taken)

        def fill(own: Client, index: int, item: tuple[str, str]) -> None:
            create_allocated_claim(own, namespace, f"fill-{index}", FILL_PROFILE, *item)

        started = time.monotonic()
        in_parallel(self.plane.client, list(enumerate(work)), lambda own, pair: fill(own, *pair), creators)
        for node in self.nodes:
            self._publish(node)
        self.fill_namespace = namespace
        progress(f"half full: {len(work)} {FILL_PROFILE} claims allocated ({time.monotonic() - started:.0f} s)")

    def empty(self) -> None:
        """Remove the fill (one collection delete), then re-publish."""
        if self.fill_namespace is None:
            return
        client = self.plane.client
        client.delete_collection(CLAIMS, self.fill_namespace, timeout=120)
        wait_empty(client, CLAIMS, self.fill_namespace)
        self.fill_namespace = None
        for node in self.nodes:
            self.allocated[node] = frozenset()
            self._publish(node)


# -- claims, pods, rounds -----------------------------------------------------------------------


def claim_profiles(count: int, seed: int) -> list[str]:
    rng = random.Random(f"{seed}-claims")
    return rng.choices([profile for profile, _ in MIX], weights=[weight for _, weight in MIX], k=count)


def mean_memory_slices() -> float:
    total = sum(weight for _, weight in MIX)
    return sum(MIX_MEMORY_SLICES[profile] * weight for profile, weight in MIX) / total


def claim_body(namespace: str, name: str, profile: str) -> MutableJSON:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "mig",
                        "exactly": {
                            "deviceClassName": MIG_CLASS,
                            "selectors": [
                                {"cel": {"expression": f"device.attributes['{DRIVER}'].profile == '{profile}'"}}
                            ],
                        },
                    }
                ]
            }
        },
    }


def create_allocated_claim(client: Client, namespace: str, name: str, profile: str, node: str, device: str) -> None:
    """A claim for ``profile`` allocated ``device`` of ``node``, written as kube-scheduler writes an
    allocation (the admin may: the benchmark plays the scheduler for claims that only need to exist)."""
    claim = client.create(CLAIMS, claim_body(namespace, name, profile))
    claim["status"] = {
        "allocation": {
            "devices": {"results": [{"request": "mig", "driver": DRIVER, "pool": node, "device": device}]},
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            },
        }
    }
    client.update(CLAIMS, claim, subresource="status")


def pod_body(namespace: str, name: str, claim: str | None) -> MutableJSON:
    container: MutableJSON = {"name": "app", "image": "registry.example/inference:1"}
    spec: MutableJSON = {
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
        "containers": [container],
    }
    if claim is not None:
        container["resources"] = {"claims": [{"name": "gpu"}]}
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def make_namespace(client: Client, namespace: str) -> None:
    client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    # The ServiceAccount admission plugin refuses pods without it; the controller that makes it is not running.
    client.create(
        SERVICE_ACCOUNTS,
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": namespace}},
    )


def in_parallel(client: Client, items: Sequence[Any], work: Callable[[Client, Any], object], threads: int) -> None:
    """``work(own_client, item)`` for every item, in order, from ``threads`` threads each with its own
    connection (what ``work`` returns is dropped); the first failure is raised once every thread has
    ended."""
    pending: queue.Queue[Any] = queue.Queue()
    for item in items:
        pending.put(item)
    failures: list[BaseException] = []

    def worker() -> None:
        own = client.fork()
        try:
            while not failures:
                try:
                    item = pending.get_nowait()
                except queue.Empty:
                    return
                work(own, item)
        except BaseException as exc:  # reported by the caller, after every thread ended
            failures.append(exc)
        finally:
            own.close()

    running_threads = [threading.Thread(target=worker, name=f"bench-worker-{n}") for n in range(threads)]
    for thread in running_threads:
        thread.start()
    for thread in running_threads:
        thread.join()
    if failures:
        raise SystemExit(f"bench requests failed: {failures[0]}")


def wait_empty(client: Client, kind: Kind, namespace: str) -> None:
    deadline = time.monotonic() + WAIT
    while client.peek(kind, namespace)[0]:
        if time.monotonic() > deadline:
            raise SystemExit(f"{kind.plural} of {namespace} left after {WAIT:g} s")
        time.sleep(0.2)


class BoundWatch:
    """When each pod of one namespace was first seen bound (``spec.nodeName``), from a watch (a thread)."""

    def __init__(self, client: Client, namespace: str) -> None:
        self.client = client.fork()
        self.namespace = namespace
        self.bound: dict[str, tuple[float, str]] = {}
        self.changed = threading.Condition()
        self._stop = threading.Event()
        self._stream: Any = None
        self._thread = threading.Thread(target=self._run, name="bound-watch", daemon=True)
        self._ready = threading.Event()

    def __enter__(self) -> BoundWatch:
        self._thread.start()
        if not self._ready.wait(60):
            raise SystemExit("the pod watch did not open within 60 s")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._stream is not None:
            self._stream.close()
        self._thread.join(timeout=30)
        self.client.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            _, version = self.client.list(PODS, self.namespace)
            try:
                self._stream = self.client.watch(PODS, version, timeout_seconds=300)
                self._ready.set()
                for event in self._stream:
                    obj = event.get("object") or {}
                    meta = obj.get("metadata") or {}
                    node = (obj.get("spec") or {}).get("nodeName")
                    if event.get("type") in ("ADDED", "MODIFIED") and node and meta.get("namespace") == self.namespace:
                        with self.changed:
                            self.bound.setdefault(meta["name"], (time.monotonic(), node))
                            self.changed.notify_all()
            except Exception:  # a watch that ends or breaks is opened again; the list catches up
                if self._stop.is_set():
                    return
                continue

    def wait(self, names: set[str], timeout: float = WAIT) -> float:
        """The monotonic time the last of ``names`` was bound."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not names <= self.bound.keys():
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(names - self.bound.keys())
                    raise SystemExit(f"{len(missing)} pods not bound within {timeout:g} s, e.g. {missing[:5]}")
                self.changed.wait(min(left, 1.0))
            return max(self.bound[name][0] for name in names)


@dataclass
class Round:
    """One burst, as the watch and the processes saw it."""

    pods: int
    seconds: float  # first create to every pod bound
    create_seconds: float  # first create to the last create returned
    attempts_per_pod: float
    sli_mean_ms: float
    attempt_mean_ms: float
    cpu_ms_per_pod: dict[str, float]
    per_node: dict[str, int] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.pods / self.seconds


class Burst:
    """A namespace with ``count`` pods to create; with ``profiles`` each has its own pre-made claim."""

    def __init__(self, plane: ControlPlane, namespace: str, count: int, profiles: Sequence[str] | None) -> None:
        self.plane = plane
        self.namespace = namespace
        self.with_claims = profiles is not None
        make_namespace(plane.client, namespace)
        if profiles is not None:
            in_parallel(
                plane.client,
                list(enumerate(profiles[:count])),
                lambda own, pair: own.create(CLAIMS, claim_body(namespace, f"claim-{pair[0]}", pair[1])),
                4,
            )
        self.pods = [
            pod_body(namespace, f"pod-{index}", f"claim-{index}" if profiles is not None else None)
            for index in range(count)
        ]

    def run(self, creators: int) -> Round:
        """Create the pods (timed) until every one is bound; then check the allocations (untimed)."""
        plane = self.plane
        before, stats_before = read_scheduler_counters(plane), plane.stats()
        with BoundWatch(plane.client, self.namespace) as watch:
            started = time.monotonic()
            in_parallel(plane.client, self.pods, lambda own, body: own.create(PODS, body), creators)
            created = time.monotonic()
            finished = watch.wait({body["metadata"]["name"] for body in self.pods})
            placed = dict(watch.bound)
        after, stats_after = settled_counters(plane, before, len(self.pods)), plane.stats()
        if self.with_claims:
            check_allocations(plane.client, self.namespace, placed)
        per_node: dict[str, int] = {}
        for _, node in placed.values():
            per_node[node] = per_node.get(node, 0) + 1
        count = len(self.pods)
        return Round(
            pods=count,
            seconds=finished - started,
            create_seconds=created - started,
            attempts_per_pod=(after.attempts - before.attempts) / count,
            sli_mean_ms=1000 * (after.sli_sum - before.sli_sum) / max(after.sli_count - before.sli_count, 1),
            attempt_mean_ms=1000
            * (after.attempt_sum - before.attempt_sum)
            / max(after.attempt_count - before.attempt_count, 1),
            cpu_ms_per_pod={
                name: 1000 * (stats_after[name].cpu_seconds - stats_before[name].cpu_seconds) / count
                for name in stats_after
            },
            per_node=per_node,
        )

    def clean_up(self) -> None:
        """Delete the pods and claims (collection deletes) and wait until they are gone.  The claims carry
        kube-scheduler's delete-protection finalizer, which kube-controller-manager would remove; it is
        not running, so the admin removes it.  The empty namespace stays: no controller would finish
        deleting it."""
        client = self.plane.client
        client.delete_collection(PODS, self.namespace, timeout=120)
        if self.with_claims:
            in_parallel(
                client,
                [
                    c["metadata"]["name"]
                    for c in client.list(CLAIMS, self.namespace)[0]
                    if c["metadata"].get("finalizers")
                ],
                lambda own, name: own.merge_patch(CLAIMS, self.namespace, name, {"metadata": {"finalizers": None}}),
                4,
            )
            client.delete_collection(CLAIMS, self.namespace, timeout=120)
            wait_empty(client, CLAIMS, self.namespace)
        wait_empty(client, PODS, self.namespace)


def check_allocations(client: Client, namespace: str, placed: Mapping[str, tuple[float, str]]) -> None:
    """Every claim allocated one device on the node its pod was bound to, reserved for that pod, and no
    device allocated twice (outside the clock)."""
    taken: set[tuple[str, str]] = set()
    for claim in client.list(CLAIMS, namespace)[0]:
        name = claim["metadata"]["name"]
        pod = "pod-" + name.split("-", 1)[1]
        status = claim.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        reserved = [entry.get("name") for entry in status.get("reservedFor") or []]
        if len(results) != 1 or reserved != [pod]:
            raise SystemExit(
                f"claim {namespace}/{name}: allocation {results} reserved for {reserved}, not one for {pod}"
            )
        device = (results[0]["pool"], results[0]["device"])
        if device[0] != placed[pod][1] or device in taken:
            raise SystemExit(f"claim {namespace}/{name}: device {device} is not free on node {placed[pod][1]}")
        taken.add(device)


# -- where kube-scheduler's time goes -----------------------------------------------------------

# (what, the function of kube-scheduler whose cumulative share of the CPU samples says it).  Read with
# ``go tool pprof -top -cum``; the names are upstream's (k8s.io/dynamic-resource-allocation,
# k8s.io/kubernetes/pkg/scheduler), matched as substrings of the profile's function names.
TOTAL_SAMPLES = "everything kube-scheduler ran, all goroutines (% of one core)"
"""The profile's own row: its samples' CPU time over its duration.  The parts below are shares of those
samples; ``scheduleOne`` is only the scheduling goroutine (Filter runs on parallel goroutines of its own)."""

PROFILE_PARTS: tuple[tuple[str, str], ...] = (
    ("the scheduling goroutine (without parallel Filter workers)", "scheduler.(*Scheduler).scheduleOne"),
    ("Filter, all plugins, all nodes", "(*frameworkImpl).RunFilterPlugins"),
    ("DRA Filter", "dynamicresources.(*DynamicResources).Filter"),
    ("allocator: one node's search", "(*Allocator).Allocate"),
    ("pools gathered for the node", "GatherPools"),
    ("device selectors (class + request)", "(*allocator).selectorsMatch"),
    ("device converted for CEL", "Convert_api_Device_To_v1_Device"),
    ("CEL evaluation", "DeviceMatches"),
    ("counters and constraints of a candidate", "(*allocator).allocateDevice"),
    ("Score, all plugins", "(*frameworkImpl).RunScorePlugins"),
    ("binding and claim status writes", "(*frameworkImpl).RunPreBindPlugins"),
    ("garbage collection", "runtime.gcBgMarkWorker"),
)


def take_cpu_profile(plane: ControlPlane, seconds: int, path: Path) -> threading.Thread:
    """A thread reading kube-scheduler's CPU profile of the next ``seconds`` into ``path``."""

    def read() -> None:
        path.write_bytes(plane.scheduler_get(f"/debug/pprof/profile?seconds={seconds}", timeout=seconds + 60))

    thread = threading.Thread(target=read, name="pprof", daemon=True)
    thread.start()
    return thread


def profile_shares(path: Path) -> dict[str, float]:
    """Each :data:`PROFILE_PARTS` entry's cumulative share (%) of the profile's samples, by ``go tool pprof``
    (the profile carries its function names: no binary needed)."""
    listing = subprocess.run(
        ["go", "tool", "pprof", "-top", "-cum", "-nodecount=100000", str(path)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    shares: dict[str, float] = {}
    for line in listing.splitlines():
        total = re.search(r"Duration: ([0-9.]+)s, Total samples = ([0-9.]+)(m?s)", line)
        if total is not None:  # every goroutine's CPU in the profile's time: the cores it kept busy, in %
            cpu = float(total.group(2)) / (1000 if total.group(3) == "ms" else 1)
            shares[TOTAL_SAMPLES] = 100 * cpu / float(total.group(1))
        parts = line.split()
        if len(parts) < 6 or not parts[4].endswith("%"):
            continue
        name = " ".join(parts[5:])
        for what, function in PROFILE_PARTS:
            if function in name and what not in shares:
                shares[what] = float(parts[4].rstrip("%"))
    return shares
