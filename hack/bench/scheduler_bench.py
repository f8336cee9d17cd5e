#!/usr/bin/env python3
"""Benchmark: kube-scheduler's DRA scheduling throughput on migdra's ResourceSlices, beside migdra's port
of the structured allocator (``dra_driver.allocation.allocate``) on the same cluster state.

Why: migdra publishes every legal MIG (profile, placement) as a device with shared counters -- 200
devices and 8 counter sets per 8x H100 node -- and kube-scheduler must search them for every claim.
How fast the real scheduler gets through a queue of MIG claims on such slices, and how that compares
with upstream's own DRA figure, is what a cluster admin sizing a GPU cluster wants to know.

The cluster is the real control plane and nothing else: etcd, kube-apiserver and kube-scheduler of
``make kube``, started with ``devcluster/migdra_devcluster/upstream``'s command lines (no controller-manager,
no kubelets, no plugins).  On it the benchmark creates ``--nodes`` Node objects (Ready, 110 pods
allocatable, as migdra's simulated kubelet writes them, without the not-ready taint that only
kube-controller-manager would lift), publishes each node's ResourceSlices with
migdra's own plugin code (simulated NVML of 8 H100-SXM5-80GB read as ``migdra slices`` reads it,
``build_pool``, then ``kubeletplugin.publisher.SlicePublisher`` with the default placement policy's
ordering as the plugin starts with it, nothing allocated) and the DeviceClasses of ``deviceclasses/``.

Each run, in a namespace of its own:

1. **kube-scheduler**: ``--pods`` ResourceClaims (one MIG device each, a seeded inference mix of
   1g.10gb / 2g.20gb / 3g.40gb) are created first, outside the clock; then one pod per claim
   (``resourceClaimName``: no templates, so no controller-manager is needed), created in order by
   ``--creators`` threads.  The clock runs from the first pod's create until a watch on the pods has
   seen every one bound (``spec.nodeName`` set).  So the pods/s include the API round trips of creating
   the pods, kube-scheduler's informers, its DRA allocation, its claim status write and its binding
   write -- what a user submitting a burst of pods sees, on this machine's CPUs, shared by etcd,
   kube-apiserver, kube-scheduler and the benchmark's own client.  From kube-scheduler's ``/metrics``
   (before and after): scheduling attempts per pod and the mean of its own scheduling SLI (from
   entering the scheduling queue to bound) and of one scheduling attempt.
2. **The port**: the same claims (as the API server returned them) in the same order, each given to
   ``allocate`` on the nodes in a fixed order (first that fits), with the same slices and classes as
   the API server holds them, every result accumulated as an allocated claim.  Claims/s is pure
   computation in this process: no API, no queue, no binding -- so the ratio of the two is informative
   (how much of a scheduling cycle the allocation search could be), not like for like.  Its node choice
   (first fit) is not kube-scheduler's (scored), so the two end with different placements.

The two parts alternate which comes first from run to run; every pod and claim of a run is deleted
before the next one (claims lose the delete-protection finalizer the scheduler adds: no
controller-manager runs to remove it; the empty namespace stays, as no namespace controller would
finish deleting it).  One untimed warm-up round of each part runs first.  kube-apiserver writes its
audit log as under ``sim up``.

kube-scheduler runs with ``--kube-api-qps``/``--kube-api-burst`` 5000 by default, as upstream's
``test/integration/scheduler_perf`` configures its scheduler's client; a default kube-scheduler allows
50 QPS (burst 100) and needs two writes per DRA pod, so past its burst it could not bind more than
about 25 pods/s whatever the allocation costs (``--kube-api-qps 50 --kube-api-burst 100`` measures that).

Results go to ``docs/benchmarks.json`` through ``run_all.py`` (``make bench BENCH_ARGS="--only scheduler"``);
docs/benchmarks.md gets its section with the first results (``render.py --check`` refuses table markers
that no report fills).
"""

from __future__ import annotations

import argparse
import queue
import random
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
from benchlib import REPO, Report, add_common_arguments, check_runs, ratios, summary
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(REPO))
from dra_driver.allocation import DEFAULT_FEATURES, allocate
from dra_driver.deviceclasses import deviceclass_documents
from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.policy import DEFAULT_POLICY, PRODUCTION_POLICIES, placement_policy
from dra_driver.devicemodel.pool import build_pool
from dra_driver.kube.client import CLAIMS, DEVICE_CLASSES, NODES, PODS, SLICES, Client, Kind
from dra_driver.nvml.inventory import read_inventory
from dra_driver.nvml.session import open_nvml
from dra_driver.nvml.settings import build_nvml_settings
from kubeletplugin.publisher import SlicePublisher
from migdra_devcluster.kubeconfig import write_kubeconfig
from migdra_devcluster.kubelet.node import node_status
from migdra_devcluster.upstream.binaries import KubeBinaries, built_versions, find_binaries
from migdra_devcluster.upstream.components import (
    KubeFiles,
    Ports,
    build_scheduler_argv,
)
from migdra_devcluster.upstream.controlplane import (
    ADMIN_GROUP,
    ADMIN_USER,
    SCHEDULER_USER,
    Component,
    build_store_and_apiserver,
    free_port,
    running,
    write_audit_policy,
)
from migdra_devcluster.upstream.pki import write_cluster_pki

DRIVER = "gpu.migdra.io"
MIG_CLASS = "mig.migdra.io"
GPUS = "H100-SXM5-80GB:8"
SERVICE_ACCOUNTS = Kind("", "v1", "serviceaccounts", namespaced=True, kind="ServiceAccount")
NAMESPACES = Kind("", "v1", "namespaces", namespaced=False, kind="Namespace")
# An inference mix, weighted; seeded, so every run asks for the same claims in the same order.
MIX: tuple[tuple[str, int], ...] = (("1g.10gb", 50), ("2g.20gb", 30), ("3g.40gb", 20))
NODE_CAPACITY = {"cpu": "64", "memory": "1Ti", "pods": "110", "ephemeral-storage": "1Ti"}
WAIT = 600.0
WARM_UP_PODS = 16
QPS_OF_SCHEDULER_PERF = 5000  # test/integration/scheduler_perf's client QPS and burst

Json = dict[str, Any]


def progress(text: str) -> None:
    print(f"scheduler_bench: {text}", file=sys.stderr, flush=True)


# -- the control plane: etcd, kube-apiserver, kube-scheduler ---------------------------------------


@dataclass
class ControlPlane:
    """The three processes, an admin client, and what it takes to read kube-scheduler's metrics."""

    client: Client
    scheduler_metrics_url: str
    metrics_pool: urllib3.PoolManager


@contextmanager
def control_plane(workdir: Path, binaries: KubeBinaries, qps: int, burst: int) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver + kube-scheduler with ``sim up``'s flags (and the scheduler's client QPS):
    nothing else writes to the cluster, so every write the benchmark sees is its own or the scheduler's."""
    files = KubeFiles(workdir / "kube")
    write_audit_policy(files)
    ports = Ports(free_port(), free_port(), free_port(), free_port(), free_port())
    pki = write_cluster_pki(files.pki.directory)
    url = f"https://127.0.0.1:{ports.apiserver}"
    admin = pki.client_certificate(ADMIN_USER, (ADMIN_GROUP,))
    kubeconfig = write_kubeconfig(workdir / "kubeconfig", url, None, pki.ca_pem(), admin)
    write_kubeconfig(
        files.kubeconfig("kube-scheduler"), url, None, pki.ca_pem(), pki.client_certificate(SCHEDULER_USER)
    )
    (workdir / "admin.crt").write_bytes(admin.cert_pem)
    (workdir / "admin.key").write_bytes(admin.key_pem)
    scheduler_argv = build_scheduler_argv(binaries.path("kube-scheduler"), files, ports)
    components = [
        *build_store_and_apiserver(binaries, files, ports, pki.ca_cert),
        Component(
            "kube-scheduler",
            [*scheduler_argv, f"--kube-api-qps={qps}", f"--kube-api-burst={burst}"],
            f"https://127.0.0.1:{ports.scheduler}/healthz",
            # It serves with a certificate it made itself at start-up: nothing to verify it against.
            ssl._create_unverified_context(),
        ),
    ]
    pool = urllib3.PoolManager(
        # kube-scheduler serves with the certificate it wrote into its --cert-dir at start-up.
        ca_certs=str(files.directory / "scheduler-certs" / "kube-scheduler.crt"),
        cert_file=str(workdir / "admin.crt"),
        key_file=str(workdir / "admin.key"),
    )
    client: Client | None = None
    try:
        progress(f"Kubernetes {binaries.version}")
        with running(components, files, progress):
            client = Client(kubeconfig)
            yield ControlPlane(client, f"https://127.0.0.1:{ports.scheduler}/metrics", pool)
    finally:
        if client is not None:
            client.close()
        pool.clear()


# -- kube-scheduler's metrics --------------------------------------------------------------------


@dataclass(frozen=True)
class SchedulerCounters:
    """Cumulative counters of kube-scheduler's /metrics; a run's figures are the differences."""

    attempts: float  # scheduler_schedule_attempts_total, every result
    sli_sum: float  # scheduler_pod_scheduling_sli_duration_seconds
    sli_count: float
    attempt_sum: float  # scheduler_scheduling_attempt_duration_seconds
    attempt_count: float


def read_scheduler_counters(plane: ControlPlane) -> SchedulerCounters:
    """kube-scheduler's own view, read as the admin (its secure port delegates authorization)."""
    answer = plane.metrics_pool.request("GET", plane.scheduler_metrics_url, timeout=30, retries=False)
    if answer.status != 200:
        raise SystemExit(f"kube-scheduler /metrics answered {answer.status}: {answer.data[:200]!r}")
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(answer.data.decode()):
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


# -- the cluster state: nodes, slices, classes ----------------------------------------------------


@dataclass
class ClusterState:
    """What both the scheduler and the port see, as the API server holds it."""

    nodes: list[Json]
    slices: list[Json]
    classes: list[Json]
    devices_per_node: int
    slices_per_node: int


def publish_cluster(plane: ControlPlane, node_count: int, policy_name: str) -> ClusterState:
    """Nodes as migdra's simulated kubelet writes them, each node's slices as migdra's plugin publishes
    them (simulated NVML read as ``migdra slices`` reads it, then the plugin's publisher), and the
    project's DeviceClasses."""
    client = plane.client
    for document in deviceclass_documents(REPO / "deviceclasses", DRIVER):
        client.create(DEVICE_CLASSES, document)
    policy = placement_policy(policy_name)
    devices = 0
    for number in range(node_count):
        name = f"node-{number}"
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
        created = client.create(
            NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
        )
        # kube-apiserver's TaintNodesByCondition admission taints a new Node not-ready until
        # kube-controller-manager's node-lifecycle controller sees it Ready; that controller is not running.
        created = client.merge_patch(NODES, None, name, {"spec": {"taints": None}})
        created["status"] = node_status(name, NODE_CAPACITY, "127.0.0.1")
        client.update(NODES, created, subresource="status")  # a Node's status is written on its own
        settings = build_nvml_settings(nvml=None, sim_state=None, sim_gpus=GPUS, sim_mig_enabled=None)
        with open_nvml(settings) as session:  # a throw-away simulated node: its own GPU UUIDs
            inventory = read_inventory(session)
        pool = build_pool(inventory, DeviceModelConfig())
        devices = len(pool.devices)
        SlicePublisher(client, name, DRIVER, policy).publish(pool)  # nothing allocated yet
    nodes = sorted(client.list(NODES)[0], key=lambda node: int(node["metadata"]["name"].split("-")[1]))
    slices = client.list(SLICES)[0]
    classes = client.list(DEVICE_CLASSES)[0]
    return ClusterState(nodes, slices, classes, devices, len(slices) // node_count)


# -- claims and pods ------------------------------------------------------------------------------


def claim_profiles(count: int, seed: int) -> list[str]:
    rng = random.Random(f"{seed}-claims")
    return rng.choices([profile for profile, _ in MIX], weights=[weight for _, weight in MIX], k=count)


def claim_body(namespace: str, name: str, profile: str) -> Json:
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


def pod_body(namespace: str, name: str, claim: str) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "app", "image": "registry.example/inference:1", "resources": {"claims": [{"name": "gpu"}]}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
        },
    }


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


def create_pods(client: Client, bodies: list[Json], creators: int) -> float:
    """Create the pods in order from ``creators`` threads (each its own connection); the monotonic
    time the last create returned."""
    work: queue.Queue[Json] = queue.Queue()
    for body in bodies:
        work.put(body)
    failures: list[BaseException] = []

    def creator() -> None:
        own = client.fork()
        try:
            while True:
                try:
                    body = work.get_nowait()
                except queue.Empty:
                    return
                own.create(PODS, body)
        except BaseException as exc:  # reported by the caller, after every thread ended
            failures.append(exc)
        finally:
            own.close()

    threads = [threading.Thread(target=creator, name=f"creator-{n}") for n in range(creators)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise SystemExit(f"creating pods failed: {failures[0]}")
    return time.monotonic()


@dataclass
class SchedulerRound:
    seconds: float  # first create to every pod bound
    create_seconds: float  # first create to the last create returned
    attempts_per_pod: float
    sli_mean_ms: float
    attempt_mean_ms: float
    per_node: dict[str, int] = field(default_factory=dict)


def create_claims(client: Client, namespace: str, profiles: list[str]) -> list[Json]:
    """A run's namespace and its claims, outside both clocks; the claims as the API server returned them."""
    client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    # The ServiceAccount admission plugin refuses pods without it; the controller that makes it is not running.
    client.create(
        SERVICE_ACCOUNTS,
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": namespace}},
    )
    return [
        client.create(CLAIMS, claim_body(namespace, f"claim-{index}", profile))
        for index, profile in enumerate(profiles)
    ]


def scheduler_round(plane: ControlPlane, namespace: str, count: int, creators: int) -> SchedulerRound:
    """One burst of ``count`` pods (one per claim already created) on kube-scheduler."""
    client = plane.client
    pods = [pod_body(namespace, f"pod-{index}", f"claim-{index}") for index in range(count)]
    before = read_scheduler_counters(plane)
    with BoundWatch(client, namespace) as watch:
        started = time.monotonic()
        created = create_pods(client, pods, creators)
        finished = watch.wait({body["metadata"]["name"] for body in pods})
        placed = dict(watch.bound)
    after = settled_counters(plane, before, count)
    check_allocations(client, namespace, placed)
    per_node: dict[str, int] = {}
    for _, node in placed.values():
        per_node[node] = per_node.get(node, 0) + 1
    return SchedulerRound(
        seconds=finished - started,
        create_seconds=created - started,
        attempts_per_pod=(after.attempts - before.attempts) / count,
        sli_mean_ms=1000 * (after.sli_sum - before.sli_sum) / max(after.sli_count - before.sli_count, 1),
        attempt_mean_ms=1000
        * (after.attempt_sum - before.attempt_sum)
        / max(after.attempt_count - before.attempt_count, 1),
        per_node=per_node,
    )


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


def clean_up(client: Client, namespace: str) -> None:
    """Delete the run's pods and claims and wait until they are gone, so the next run starts on empty
    nodes.  The claims carry the scheduler's delete-protection finalizer, which kube-controller-manager
    would remove; it is not running, so the admin removes it."""
    for pod in client.list(PODS, namespace)[0]:
        client.delete(PODS, namespace, pod["metadata"]["name"], grace_period_seconds=0)
    for claim in client.list(CLAIMS, namespace)[0]:
        name = claim["metadata"]["name"]
        if claim["metadata"].get("finalizers"):
            client.merge_patch(CLAIMS, namespace, name, {"metadata": {"finalizers": None}})
        client.delete(CLAIMS, namespace, name)
    deadline = time.monotonic() + WAIT
    while client.list(PODS, namespace)[0] or client.list(CLAIMS, namespace)[0]:
        if time.monotonic() > deadline:
            raise SystemExit(f"pods or claims of {namespace} left after {WAIT:g} s")
        time.sleep(0.2)


# -- the port: dra_driver.allocation.allocate on the same state ------------------------------------


def port_round(state: ClusterState, claims: list[Json]) -> tuple[float, int]:
    """The claims in order, each on the first node (in a fixed order) where ``allocate`` finds devices;
    every result becomes an allocated claim later calls see.  Seconds, and ``allocate`` calls made."""
    allocated: list[Json] = []
    calls = 0
    started = time.perf_counter()
    for claim in claims:
        for node in state.nodes:
            calls += 1
            results = allocate(
                claims=[claim],
                node=node,
                slices=state.slices,
                classes=state.classes,
                allocated_claims=allocated,
                features=DEFAULT_FEATURES,
                rng=None,
            )
            if results is not None:
                allocated.append({**claim, "status": {"allocation": results[0]}})
                break
        else:
            raise SystemExit(f"the port placed claim {claim['metadata']['name']} on no node")
    return time.perf_counter() - started, calls


# -- main -----------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument(
        "--pods",
        type=int,
        default=200,
        help="pods (each with its own claim) per run; 200 of the mix take about 3/4 of 8 nodes' memory slices",
    )
    parser.add_argument("--nodes", type=int, default=8, help=f"nodes of {GPUS}")
    parser.add_argument("--policy", choices=PRODUCTION_POLICIES, default=DEFAULT_POLICY, help="slice ordering")
    parser.add_argument("--creators", type=int, default=4, help="threads creating the pods")
    parser.add_argument("--kube-api-qps", type=int, default=QPS_OF_SCHEDULER_PERF, help="kube-scheduler's client QPS")
    parser.add_argument("--kube-api-burst", type=int, default=QPS_OF_SCHEDULER_PERF, help="and its burst")
    parser.add_argument("--seed", type=int, default=0, help="seeds the profile mix of the claims")
    parser.add_argument("--kube-version", default=None, help="a built version (default: the oldest, CI's 1.36)")
    args = parser.parse_args()
    check_runs(parser, args)
    versions = built_versions()
    if not versions:
        raise SystemExit("scheduler bench: no kube binaries; run `make kube` first")
    binaries = find_binaries(None, args.kube_version or versions[0])
    profiles = claim_profiles(args.pods, args.seed)
    mix = {profile: profiles.count(profile) for profile, _ in MIX}
    params = {
        "pods": args.pods,
        "nodes": args.nodes,
        "gpus": GPUS,
        "policy": args.policy,
        "creators": args.creators,
        "kube": binaries.version,
        "kube_api_qps": args.kube_api_qps,
        "kube_api_burst": args.kube_api_burst,
        "seed": args.seed,
        "mix": mix,
    }
    report = Report("scheduler", args, params)
    rounds: list[SchedulerRound] = []
    port_seconds: list[float] = []
    port_calls: list[float] = []
    with (
        tempfile.TemporaryDirectory(prefix="migdra-sched-", dir="/tmp") as scratch,
        control_plane(Path(scratch), binaries, args.kube_api_qps, args.kube_api_burst) as plane,
    ):
        state = publish_cluster(plane, args.nodes, args.policy)
        progress(
            f"{args.nodes} nodes, {state.devices_per_node} devices and {state.slices_per_node} ResourceSlices "
            f"each ({args.policy} ordering); claims: {mix}"
        )
        warm_up_pods = min(WARM_UP_PODS, args.pods)
        claims = create_claims(plane.client, "warm-up", profiles[:warm_up_pods])
        warm_up = scheduler_round(plane, "warm-up", warm_up_pods, args.creators)
        port_round(state, claims)
        clean_up(plane.client, "warm-up")
        progress(f"warmed up ({warm_up_pods} pods bound in {warm_up.seconds:.2f} s); measuring")
        with report:
            for run in range(args.runs):
                namespace = f"run-{run}"
                claims = create_claims(plane.client, namespace, profiles)
                # Which part comes first alternates, so neither always runs right after the other.
                if run % 2:
                    seconds, calls = port_round(state, claims)
                    measured = scheduler_round(plane, namespace, args.pods, args.creators)
                else:
                    measured = scheduler_round(plane, namespace, args.pods, args.creators)
                    seconds, calls = port_round(state, claims)
                clean_up(plane.client, namespace)
                rounds.append(measured)
                port_seconds.append(seconds)
                port_calls.append(calls / args.pods)
                progress(
                    f"run {run + 1}/{args.runs}: kube-scheduler {args.pods / measured.seconds:.1f} pods/s "
                    f"(created in {measured.create_seconds:.2f} s, all bound at {measured.seconds:.2f} s, "
                    f"{measured.attempts_per_pod:.2f} attempts/pod, pods per node "
                    f"{sorted(measured.per_node.values())}); port {args.pods / seconds:.1f} claims/s"
                )

    scheduler_rate = [args.pods / r.seconds for r in rounds]
    port_rate = [args.pods / s for s in port_seconds]
    table = report.table(
        "throughput",
        f"{args.pods} pods, one MIG claim each, on {args.nodes} nodes x {GPUS} "
        f"({args.policy} ordering; kube {binaries.version}, scheduler client QPS {args.kube_api_qps})",
        ["what", "pods/s (claims/s)", "seconds", "includes"],
    )
    table.add(
        "kube-scheduler",
        summary(scheduler_rate, "", 1),
        summary([r.seconds for r in rounds], "s", 2),
        "first pod create to every pod bound (watched): creates, queue, DRA allocation, claim status write, binding",
    )
    table.add(
        "migdra's port (`allocate`)",
        summary(port_rate, "", 1),
        summary(port_seconds, "s", 3),
        "in-process computation only: first-fit over the nodes in a fixed order, no API",
    )
    table.add(
        "port ÷ kube-scheduler", summary(ratios(port_rate, scheduler_rate), "x", 2), "", "per run; not like for like"
    )
    detail = report.table(
        "detail",
        "kube-scheduler's run in detail (its own figures from its /metrics, differences over the run)",
        [
            "every pod created after",
            "attempts per pod",
            "mean SLI (queue to bound)",
            "mean attempt",
            "port: `allocate` calls per claim",
        ],
    )
    detail.add(
        summary([r.create_seconds for r in rounds], "s", 2),
        summary([r.attempts_per_pod for r in rounds], "", 2),
        summary([r.sli_mean_ms for r in rounds], "ms", 1),
        summary([r.attempt_mean_ms for r in rounds], "ms", 1),
        summary(port_calls, "", 2),
    )
    report.note(
        "kube-scheduler's figure includes the API round trips of creating the pods, its informers, the claim "
        "status write and the binding, on CPUs shared by etcd, kube-apiserver, kube-scheduler and the benchmark; "
        "the port's is pure computation in one process. The ratio is informative, not like for like."
    )
    machine = report.as_json()["machine"]
    report.note(
        "Where this stands: upstream's test/integration/scheduler_perf reports about 250-270 pods/s for DRA "
        "claims from templates (SchedulingWithResourceClaimTemplate) on 6 CPUs, kube-apiserver and kube-scheduler "
        "in the test's own process, on its own test devices; here etcd, kube-apiserver, kube-scheduler and the "
        f"benchmark share {machine['cpus']} CPUs (1-min load median {machine['load_1min_during']['median']:.1f} "
        f"during the runs), each node publishes {state.devices_per_node} MIG devices with shared counters, and "
        "every pod is created over HTTPS inside the measured time."
    )
    report.finish()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
