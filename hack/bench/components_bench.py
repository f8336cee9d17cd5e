#!/usr/bin/env python3
"""Benchmark: migdra's own components on a big cluster, at several fleet sizes in one run.

The reservation controller, one node plugin's slice publishing, ``migdra status`` and ``migdra allocate
--from-cluster``, each at every size, so what grows with nodes and what with claims is read off the rows
side by side.

Why: ``scheduler_bench.py`` sizes kube-scheduler on migdra's slices; an administrator of a 500-node fleet
also runs migdra's controller, a plugin per node and the CLI against the same API server, and wants to
know what each costs there and whether its work per claim stays the same as the cluster grows.

One control plane of ``schedcluster`` (etcd + kube-apiserver + kube-scheduler of ``make kube``, the
newest built unless ``--kube-version``) and its fleet of Nodes of 8 H100-SXM5-80GB, each with the slices
migdra's plugin code publishes (``Fleet.grow``), grown to each of ``--nodes`` in turn.  At each size:

- **Plugin**: one more node's plugin code (``SlicePublisher``, the default policy, its own client and
  user) publishes its pool for the first time, re-publishes it unchanged (the periodic rescan) and after
  a change (GPU 3's MIG mode off: every slice rewritten, as ``devicemodel_bench`` does); each step's
  wall time, the publisher's CPU time (in this process) and its API requests.  Then that node and its
  slices are removed, so every run meets the same cluster.
- **Controller**: for each of ``--claims`` that fits the fleet (each claim holds one 1g.10gb device,
  round-robin over nodes, GPUs and the 7 placements of a GPU: no device twice, no memory slice twice),
  the claims are created and allocated by the admin (as kube-scheduler would have written them), then
  each run starts ``migdra controller`` (its own user, default settings -- leader election, a write rate
  of 20/s with a burst of 50 -- unless ``--write-qps`` / ``--write-burst``: ``run_all`` raises the rate to
  1000/s, to see the controller's own pace) as a process and times it from its start until a watch has seen every
  claim's ``Reserved`` condition True; its CPU seconds and peak RSS from ``/proc``; its API requests
  from kube-apiserver's audit log (status writes, Events, the rest).  Then, caught up, ``--increment``
  more claims are allocated, ``--increment-rate`` per second: from each one's allocation to its
  ``Reserved``, and the controller's CPU and requests per new claim (the incremental path).  Between
  runs the controller is stopped and the claims' ``status.devices`` removed, so each run converges the
  same claims from scratch.
- **CLI**: with those claims present and one pending claim, ``migdra status``, ``status --node``,
  ``allocate --from-cluster --claim`` on one node and on every node, each as the command a user runs
  (``.venv/bin/migdra``, its own user): wall time, CPU and peak RSS of the process (``wait4``), and its
  API requests.

API requests are counted from the audit log (``Metadata`` level, one line per request; a watch is
counted once), up to a marker request the benchmark sends after each step, so no request is counted in
the wrong step.  Results go to ``docs/benchmarks.md`` ("migdra's own components at scale") through
``run_all.py`` (``make bench BENCH_ARGS="--only components"``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from benchlib import Report, add_common_arguments, check_runs, summary
from schedcluster import (
    DRIVER,
    GPU_MODEL,
    GPUS_PER_NODE,
    NODE_CAPACITY,
    QPS_OF_SCHEDULER_PERF,
    ControlPlane,
    Fleet,
    ProcessStats,
    claim_body,
    control_plane,
    create_allocated_claim,
    in_parallel,
    make_namespace,
    process_stats,
)

from dra_driver.claimstatus import RESERVED
from dra_driver.controller.controller import METRICS_INTERVAL_SECONDS
from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.examples import example_inventory
from dra_driver.devicemodel.policy import DEFAULT_POLICY, placement_policy
from dra_driver.devicemodel.pool import build_pool
from dra_driver.jsontypes import MutableJSON
from dra_driver.kube.client import CLAIMS, EVENTS, NODES, SLICES, Client, Kind, status_code
from kubeletplugin.publisher import SlicePublisher
from migdra_devcluster.kubeconfig import write_kubeconfig
from migdra_devcluster.kubelet.node import kubelet_version, node_status
from migdra_devcluster.upstream.binaries import built_versions, find_binaries
from migdra_devcluster.upstream.components import KubeFiles
from migdra_devcluster.upstream.controlplane import ADMIN_GROUP

PROFILE = "1g.10gb"  # every claim's device: 7 placements per H100, the most claims a fleet holds
CONFIG_MAPS = Kind("", "v1", "configmaps", namespaced=True, kind="ConfigMap")
USERS = {
    "controller": "migdra-bench:controller",
    "plugin": "migdra-bench:plugin",
    "cli": "migdra-bench:cli",
}
CREATORS = 4  # admin threads writing claims (as in schedcluster)
CLI_NAMESPACE = "cli"
PENDING = "pending"
MIGDRA = str(Path(sys.executable).with_name("migdra"))


def progress(text: str) -> None:
    print(f"components bench: {text}", file=sys.stderr, flush=True)


# -- the audit log: requests per user between two markers --------------------------------------


class AuditLog:
    """kube-apiserver's audit log read as it grows (``tail -F``: it rotates at 100 MB), counting the
    requests of the benchmark's users since the last :meth:`mark`.

    A request is one line at its end (``ResponseComplete``); a watch also has a ``ResponseStarted`` line
    when it opens and is counted there, once.  :meth:`mark` sends a request of its own (the admin reading a
    ConfigMap that does not exist) and reads until that request's line: every request that finished before
    the mark was sent is in the count, and none after it.
    """

    def __init__(self, path: Path, admin: Client) -> None:
        self.path = path
        self.admin = admin
        self._file: IO[bytes] | None = None
        self._inode = -1
        self._rest = b""
        self._started: set[str] = set()
        self._needles = [name.encode() for name in USERS.values()]

    def _open(self) -> None:
        self._file = self.path.open("rb")
        self._inode = os.fstat(self._file.fileno()).st_ino

    def _lines(self) -> Iterator[bytes]:
        """Every complete line written since the last call, across a rotation."""
        if self._file is None:
            if not self.path.exists():
                return
            self._open()
        assert self._file is not None
        while True:
            chunk = self._file.read(1 << 20)
            if chunk:
                data = self._rest + chunk
                *lines, self._rest = data.split(b"\n")
                yield from lines
                continue
            try:
                rotated = os.stat(self.path).st_ino != self._inode
            except FileNotFoundError:
                rotated = False
            if not rotated:
                return
            self._file.close()  # the old file is read to its end: on to the new one, and drop the old
            for old in self.path.parent.glob(f"{self.path.stem}-*{self.path.suffix}"):
                old.unlink(missing_ok=True)
            self._rest = b""
            self._open()

    def mark(self, timeout: float = 60.0) -> Counter[tuple[str, str]]:
        """(component, kind of request) -> requests since the previous mark."""
        marker = f"bench-marker-{uuid.uuid4().hex[:12]}"
        self.admin.get(CONFIG_MAPS, "default", marker)
        counts: Counter[tuple[str, str]] = Counter()
        deadline = time.monotonic() + timeout
        needle = marker.encode()
        while True:
            for line in self._lines():
                if needle in line:
                    return counts
                if not any(n in line for n in self._needles):
                    continue
                entry = json.loads(line)
                component = next((c for c, u in USERS.items() if u == entry["user"]["username"]), None)
                if component is None:
                    continue
                audit_id, stage = entry.get("auditID", ""), entry.get("stage")
                if stage == "ResponseStarted":
                    self._started.add(audit_id)
                elif audit_id in self._started:  # the end of a watch counted when it opened
                    self._started.discard(audit_id)
                    continue
                counts[(component, request_kind(entry))] += 1
            if time.monotonic() > deadline:
                raise SystemExit(f"the audit log {self.path} did not show the marker request within {timeout:g} s")
            time.sleep(0.05)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def request_kind(entry: MutableJSON) -> str:
    """``status`` (a claim status write), ``event`` (an Event written), ``write``, ``list``, ``watch``, ``read``."""
    ref = entry.get("objectRef") or {}
    verb = entry.get("verb", "")
    if ref.get("resource") == "resourceclaims" and ref.get("subresource") == "status" and verb in ("patch", "update"):
        return "status"
    if ref.get("resource") == "events" and verb in ("create", "patch", "update"):
        return "event"
    if verb in ("create", "update", "patch", "delete", "deletecollection"):
        return "write"
    if verb in ("list", "watch"):
        return str(verb)
    return "read"


def total(counts: Counter[tuple[str, str]], component: str) -> int:
    return sum(n for (who, _), n in counts.items() if who == component)


# -- processes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CommandRun:
    """One command as the kernel accounted for it."""

    seconds: float
    cpu_seconds: float
    peak_rss_mib: float


def run_command(argv: Sequence[str], log: Path, timeout: float) -> CommandRun:
    """Run ``argv`` (stdout discarded, stderr to ``log``) and read its own rusage (``wait4``): wall time,
    CPU and peak RSS of that process alone.  Killed after ``timeout`` seconds, and on any exit."""
    with log.open("wb") as errors:
        started = time.monotonic()
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=errors)
    killer = threading.Timer(timeout, process.kill)
    killer.start()
    try:
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    finally:
        killer.cancel()
        if process.returncode is None:
            process.kill()
            process.wait()
    seconds = time.monotonic() - started
    if process.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:]
        raise SystemExit(f"{' '.join(argv[1:3])} exited {process.returncode} after {seconds:.1f} s: {tail}")
    return CommandRun(seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


@contextlib.contextmanager
def controller_process(argv: Sequence[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``migdra controller`` running until the block ends (SIGTERM, then SIGKILL after 30 s: always reaped)."""
    with log.open("ab") as errors:
        process = subprocess.Popen(argv, stdout=errors, stderr=errors)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# -- claims ------------------------------------------------------------------------------------


def placements(fleet: Fleet, node: str) -> dict[tuple[int, int], str]:
    """(GPU minor, placement start) -> the exclusive 1g.10gb device there."""
    return {
        (d.gpu_minor, d.placement.start): d.name
        for d in fleet.pools[node].devices
        if d.profile_name == PROFILE and not d.shared and d.placement is not None
    }


class Claims:
    """Allocated claims as the admin writes them: claim ``index`` holds the 1g.10gb device of node
    ``index % nodes``, GPU ``(index // nodes) % 8``, the GPU's ``index // (nodes * 8)``-th placement -- so
    indices below :attr:`capacity` never share a device or a memory slice, and each node holds as many as
    every other (within one)."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.nodes = list(fleet.nodes)
        self._devices = {node: placements(fleet, node) for node in self.nodes}
        starts = sorted({start for minor, start in self._devices[self.nodes[0]] if minor == 0})
        self.starts = starts
        self.capacity = len(self.nodes) * GPUS_PER_NODE * len(starts)

    def device(self, index: int) -> tuple[str, str]:
        if index >= self.capacity:
            raise ValueError(f"claim {index}: the fleet holds {self.capacity} {PROFILE} claims at most")
        count = len(self.nodes)
        node = self.nodes[index % count]
        gpu = (index // count) % GPUS_PER_NODE
        start = self.starts[index // (count * GPUS_PER_NODE)]
        return node, self._devices[node][(gpu, start)]

    def write(
        self, client: Client, namespace: str, items: Sequence[tuple[str, int]], rate: float | None = None
    ) -> dict[str, float]:
        """Create and allocate each (name, index) from :data:`CREATORS` threads, as fast as they go or, with
        ``rate``, the k-th not before k / rate seconds after the first; when each allocation landed."""
        landed: dict[str, float] = {}
        start = time.monotonic()
        order = {name: k for k, (name, _) in enumerate(items)}

        def one(own: Client, item: tuple[str, int]) -> None:
            name, index = item
            if rate is not None:  # paced: claims allocated one by one, as kube-scheduler allocates them
                time.sleep(max(0.0, start + order[name] / rate - time.monotonic()))
            create_allocated_claim(own, namespace, name, PROFILE, *self.device(index))
            landed[name] = time.monotonic()

        in_parallel(client, items, one, CREATORS)
        return landed


def strip_reservations(client: Client, namespace: str, names: Sequence[str]) -> None:
    """Remove ``status.devices`` (what the controller wrote) from the claims: the next controller starts
    from claims that carry only their allocation."""

    def strip(own: Client, name: str) -> None:
        own.merge_patch(CLAIMS, namespace, name, {"status": {"devices": None}}, "status")

    in_parallel(client, names, strip, CREATORS)


def wait_quiet(pid: int, quiet_for: float, timeout: float = 120.0) -> ProcessStats:
    """The process's stats once it has used no CPU to speak of (under 20 ms per half second) for
    ``quiet_for`` seconds: the controller has finished what the catch-up left it (its metrics refresh
    comes up to METRICS_INTERVAL_SECONDS after the last change)."""
    deadline = time.monotonic() + timeout
    last = process_stats(pid)
    since = time.monotonic()
    while True:
        time.sleep(0.5)
        now = process_stats(pid)
        if now.cpu_seconds - last.cpu_seconds > 0.02:
            since = time.monotonic()
        elif time.monotonic() - since >= quiet_for:
            return now
        last = now
        if time.monotonic() > deadline:
            raise SystemExit(f"the controller kept using CPU for {timeout:g} s after it caught up")


def current_version(client: Client, kind: Kind) -> str:
    """The API's resourceVersion now (a one-item list), to watch from."""
    return client.peek(kind)[1]


def remove_namespace_objects(client: Client, kind: Kind, namespace: str, wait: float = 900.0) -> None:
    """A collection delete, then a bounded wait until a one-item list shows none left."""
    client.delete_collection(kind, namespace, timeout=300)
    deadline = time.monotonic() + wait
    while client.peek(kind, namespace)[0]:
        if time.monotonic() > deadline:
            raise SystemExit(f"{kind.plural} of {namespace} left after {wait:g} s")
        time.sleep(0.2)


def is_reserved(claim: MutableJSON) -> bool:
    """Every device entry of the driver says ``Reserved`` True (and there is one)."""
    entries = [e for e in (claim.get("status") or {}).get("devices") or [] if e.get("driver") == DRIVER]
    return bool(entries) and all(
        any(c.get("type") == RESERVED and c.get("status") == "True" for c in e.get("conditions") or []) for e in entries
    )


class ReservedWatch:
    """When each claim of some namespaces was first seen ``Reserved``, from a watch that resumes from the
    last resourceVersion it saw (bookmarks included) and lists again only when the server refuses it."""

    def __init__(self, client: Client, namespaces: set[str], resource_version: str) -> None:
        self.client = client.fork()
        self.namespaces = namespaces
        self.version: str | None = resource_version
        self.reserved: dict[tuple[str, str], float] = {}
        self.changed = threading.Condition()
        self._stop = threading.Event()
        self._stream: Any = None
        self._thread = threading.Thread(target=self._run, name="reserved-watch", daemon=True)

    def __enter__(self) -> ReservedWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()
        self._thread.join(timeout=30)
        self.client.close()

    def _seen(self, claim: MutableJSON) -> None:
        meta = claim.get("metadata") or {}
        if meta.get("namespace") not in self.namespaces:
            return
        key = (str(meta["namespace"]), str(meta["name"]))
        with self.changed:
            if is_reserved(claim):
                self.reserved.setdefault(key, time.monotonic())
            else:
                self.reserved.pop(key, None)
            self.changed.notify_all()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                version = self.version
                if version is None:
                    items, version = self.client.list(CLAIMS)
                    for item in items:
                        self._seen(item)
                    self.version = version
                self._stream = self.client.watch(CLAIMS, version, timeout_seconds=60)
                for event in self._stream:
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        self.version = None
                        break
                    self.version = (obj.get("metadata") or {}).get("resourceVersion") or self.version
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self._seen(obj)
            except Exception as exc:  # a refused (410) or broken watch: list again, or resume
                if self._stop.is_set():
                    return
                if status_code(exc) == 410:
                    self.version = None
                time.sleep(0.2)
            finally:
                self._stream = None

    def wait(self, keys: set[tuple[str, str]], timeout: float, process: subprocess.Popen[bytes] | None) -> float:
        """The monotonic time the last of ``keys`` was seen reserved; fails on timeout or if ``process``
        (the controller) exits first."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not keys <= self.reserved.keys():
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(keys - self.reserved.keys())
                    raise SystemExit(f"{len(missing)} claims not Reserved within {timeout:g} s, e.g. {missing[:3]}")
                if process is not None and process.poll() is not None:
                    raise SystemExit(f"migdra controller exited ({process.returncode}) before every claim was Reserved")
                self.changed.wait(min(left, 1.0))
            return max(self.reserved[key] for key in keys)


# -- the measurements ----------------------------------------------------------------------------


@dataclass
class ControllerRun:
    seconds: float
    cpu_seconds: float
    peak_rss_mib: float
    requests: Counter[tuple[str, str]]
    inc_latency_median: float  # per new claim: its allocation to its Reserved
    inc_latency_max: float
    inc_cpu_seconds: float
    inc_requests: Counter[tuple[str, str]]


@dataclass
class ControllerPoint:
    nodes: int
    claims: int
    runs: list[ControllerRun] = field(default_factory=list)


@dataclass
class PublishStep:
    seconds: float
    cpu_seconds: float
    requests: int
    writes: int


@dataclass
class PluginPoint:
    nodes: int
    slices: int
    steps: dict[str, list[PublishStep]] = field(default_factory=dict)


@dataclass
class CliPoint:
    command: str
    nodes: int
    claims: int
    runs: list[CommandRun] = field(default_factory=list)
    requests: list[int] = field(default_factory=list)


PUBLISH_STEPS = ("first publish", "unchanged republish", "GPU 3 MIG mode off")
CLI_COMMANDS: dict[str, list[str]] = {
    "migdra status": ["status"],
    "migdra status --node": ["status", "--node", "{node}"],
    "migdra allocate --from-cluster --node": [
        "allocate",
        "--from-cluster",
        "--claim",
        f"{CLI_NAMESPACE}/{PENDING}",
        "--node",
        "{node}",
    ],
    "migdra allocate --from-cluster (every node)": [
        "allocate",
        "--from-cluster",
        "--claim",
        f"{CLI_NAMESPACE}/{PENDING}",
    ],
}


class Bench:
    """The control plane, its fleet, the benchmark's users and what was measured."""

    def __init__(self, plane: ControlPlane, workdir: Path, args: argparse.Namespace) -> None:
        self.plane = plane
        self.client = plane.client
        self.workdir = workdir
        self.args = args
        self.fleet = Fleet(plane)
        files = KubeFiles(workdir / "kube")
        pki = files.pki
        url = self.client.server
        self.kubeconfigs = {
            component: write_kubeconfig(
                workdir / f"{component}.kubeconfig",
                url,
                None,
                pki.ca_pem(),
                pki.client_certificate(user, (ADMIN_GROUP,)),
            )
            for component, user in USERS.items()
        }
        self.audit = AuditLog(files.audit_log, self.client)
        self.plugin_client = Client(self.kubeconfigs["plugin"])
        self.controller_points: list[ControllerPoint] = []
        self.plugin_points: list[PluginPoint] = []
        self.cli_points: list[CliPoint] = []
        make_namespace(self.client, CLI_NAMESPACE)
        self.client.create(CLAIMS, claim_body(CLI_NAMESPACE, PENDING, PROFILE))
        inventory = example_inventory([GPU_MODEL] * GPUS_PER_NODE)
        mig_off = example_inventory([GPU_MODEL] * GPUS_PER_NODE, mig_enabled=False).gpus[3]
        changed = replace(inventory, gpus=(*inventory.gpus[:3], mig_off, *inventory.gpus[4:]))
        self.pools = {
            "first publish": build_pool(inventory, DeviceModelConfig()),
            "unchanged republish": build_pool(inventory, DeviceModelConfig()),
            "GPU 3 MIG mode off": build_pool(changed, DeviceModelConfig()),
        }
        self.policy = placement_policy(DEFAULT_POLICY)
        self.reserved: set[str] = set()  # claims of the fleet's namespace that carry the controller's status
        self._serial = 0

    def close(self) -> None:
        self.audit.close()
        self.plugin_client.close()

    # -- one more node's plugin --

    def add_node(self, name: str) -> None:
        """A Node as ``Fleet.grow`` writes it: created, untainted, Ready."""
        client = self.client
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
        client.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})
        created = client.merge_patch(NODES, None, name, {"spec": {"taints": None}})
        created["status"] = node_status(name, NODE_CAPACITY, "127.0.0.1", kubelet_version(self.plane.version))
        client.update(NODES, created, subresource="status")

    def remove_node(self, name: str) -> None:
        for item in self.client.list(SLICES, field_selector=f"spec.nodeName={name}")[0]:
            self.client.delete(SLICES, None, item["metadata"]["name"])
        self.client.delete(NODES, None, name)

    def measure_plugin(self, nodes: int) -> None:
        point = PluginPoint(nodes, nodes * self.fleet.slices_per_node())
        progress(f"{nodes} nodes ({point.slices} slices): {self.args.runs} runs of one more node's publishing")
        for run in range(self.args.runs):
            self._serial += 1
            node = f"extra-{self._serial:04d}"
            self.add_node(node)
            publisher = SlicePublisher(self.plugin_client, node, DRIVER, self.policy)
            self.audit.mark()
            for step in PUBLISH_STEPS:
                started, cpu = time.perf_counter(), time.process_time()
                result = publisher.publish(self.pools[step])
                seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
                counts = self.audit.mark()
                point.steps.setdefault(step, []).append(
                    PublishStep(seconds, cpu_seconds, total(counts, "plugin"), result.writes)
                )
            self.remove_node(node)
            first = point.steps["first publish"][-1]
            progress(f"  run {run + 1}: first publish {1000 * first.seconds:.0f} ms, {first.requests} requests")
        self.plugin_points.append(point)

    # -- the controller --

    def controller_argv(self) -> list[str]:
        argv = [MIGDRA, "controller", "--kubeconfig", str(self.kubeconfigs["controller"]), "--identity", "bench"]
        if self.args.write_qps is not None:
            argv += ["--write-qps", str(self.args.write_qps)]
        if self.args.write_burst is not None:
            argv += ["--write-burst", str(self.args.write_burst)]
        return argv

    def measure_controller(self, claims: Claims, namespace: str, names: list[str]) -> None:
        nodes, count = len(claims.nodes), len(names)
        point = ControllerPoint(nodes, count)
        increment = self.args.increment
        progress(f"{nodes} nodes, {count} claims: {self.args.runs} controller runs (+{increment} claims each)")
        keys = {(namespace, name) for name in names}
        inc_namespace = f"inc-{nodes}-{count}"
        make_namespace(self.client, inc_namespace)
        timeout = 300 + count * self.args.seconds_per_claim
        for run in range(self.args.runs):
            # What an earlier run (or the point before, on fewer claims) reserved is taken off again.
            strip_reservations(self.client, namespace, sorted(self.reserved))
            self.reserved.clear()
            remove_namespace_objects(self.client, EVENTS, namespace)  # the last run's Events
            self.audit.mark()
            version = current_version(self.client, CLAIMS)
            log = self.workdir / f"controller-{nodes}-{count}.log"
            with ReservedWatch(self.client, {namespace, inc_namespace}, version) as watch:
                started = time.monotonic()
                with controller_process(self.controller_argv(), log) as process:
                    caught_up = watch.wait(keys, timeout, process)
                    stats = process_stats(process.pid)
                    requests = self.audit.mark()
                    # The catch-up's last metrics refresh (every pool touched) is not the new claims' work.
                    settled = wait_quiet(process.pid, METRICS_INTERVAL_SECONDS + 1)
                    self.audit.mark()
                    inc_names = [f"inc-{run}-{k}" for k in range(increment)]
                    landed = claims.write(
                        self.client,
                        inc_namespace,
                        [(n, count + k) for k, n in enumerate(inc_names)],  # indices after the fill's
                        self.args.increment_rate,
                    )
                    watch.wait({(inc_namespace, n) for n in inc_names}, 300 + increment, process)
                    latencies = [watch.reserved[(inc_namespace, n)] - landed[n] for n in inc_names]
                    inc_stats = process_stats(process.pid)
                    inc_requests = self.audit.mark()
            self.reserved.update(names)
            point.runs.append(
                ControllerRun(
                    seconds=caught_up - started,
                    cpu_seconds=stats.cpu_seconds,
                    peak_rss_mib=stats.peak_rss_mib,
                    requests=requests,
                    inc_latency_median=statistics.median(latencies),
                    inc_latency_max=max(latencies),
                    inc_cpu_seconds=inc_stats.cpu_seconds - settled.cpu_seconds,
                    inc_requests=inc_requests,
                )
            )
            remove_namespace_objects(self.client, CLAIMS, inc_namespace)
            remove_namespace_objects(self.client, EVENTS, inc_namespace)
            done = point.runs[-1]
            progress(
                f"  run {run + 1}: {done.seconds:.1f} s, {done.cpu_seconds:.1f} CPU s, {done.peak_rss_mib:.0f} MiB, "
                f"{total(done.requests, 'controller') / count:.2f} requests/claim; +{increment}: "
                f"median {1000 * done.inc_latency_median:.0f} ms, {1000 * done.inc_cpu_seconds / increment:.1f} "
                "CPU ms/claim"
            )
        self.controller_points.append(point)

    # -- the CLI --

    def measure_cli(self, nodes: int, claims: int) -> None:
        progress(f"{nodes} nodes, {claims} claims: {self.args.runs} runs of each CLI command")
        kubeconfig_args = ["--kubeconfig", str(self.kubeconfigs["cli"])]
        points = {name: CliPoint(name, nodes, claims) for name in CLI_COMMANDS}
        for run in range(self.args.runs):
            order = list(CLI_COMMANDS)
            order = order[run % len(order) :] + order[: run % len(order)]
            for name in order:
                argv = [
                    MIGDRA,
                    *(part.format(node=self.fleet.nodes[0]) for part in CLI_COMMANDS[name]),
                    *kubeconfig_args,
                ]
                self.audit.mark()
                measured = run_command(argv, self.workdir / "cli.log", self.args.cli_timeout)
                points[name].runs.append(measured)
                points[name].requests.append(total(self.audit.mark(), "cli"))
        for name in CLI_COMMANDS:
            runs = points[name].runs
            progress(
                f"  {name}: {statistics.median(r.seconds for r in runs):.2f} s, "
                f"{statistics.median(r.peak_rss_mib for r in runs):.0f} MiB"
            )
        self.cli_points += points.values()

    # -- one fleet size --

    def measure_size(self, nodes: int) -> None:
        self.fleet.grow(nodes)
        self.measure_plugin(nodes)
        claims = Claims(self.fleet)
        namespace = f"claims-{nodes}"
        make_namespace(self.client, namespace)
        names: list[str] = []
        fitting = [c for c in sorted(self.args.claims) if c + self.args.increment <= claims.capacity]
        for count in sorted(self.args.claims):
            if count not in fitting:
                progress(f"{nodes} nodes: {count} claims skipped (the fleet holds {claims.capacity} {PROFILE})")
        for count in fitting:
            started = time.monotonic()
            new = [(f"claim-{index}", index) for index in range(len(names), count)]
            claims.write(self.client, namespace, new)
            names += [name for name, _ in new]
            progress(f"{nodes} nodes: {count} claims allocated ({time.monotonic() - started:.0f} s for the new ones)")
            self.measure_controller(claims, namespace, names)
            self.measure_cli(nodes, count)
        if not fitting:
            self.measure_cli(nodes, 0)
        if names:
            remove_namespace_objects(self.client, CLAIMS, namespace)
        self.reserved.clear()
        remove_namespace_objects(self.client, EVENTS, namespace)


# -- tables ----------------------------------------------------------------------------------------


def ratio_text(value: float, reference: float) -> str:
    return f"{value / reference:.2f}x" if reference > 0 else "-"


def write_tables(report: Report, bench: Bench, args: argparse.Namespace) -> None:
    increment = args.increment
    settings = "default settings: write rate 20/s, burst 50"
    if args.write_qps is not None or args.write_burst is not None:
        settings = f"--write-qps {args.write_qps or 20:g}, --write-burst {args.write_burst or 50}"
    controller = report.table(
        "controller",
        f"migdra controller from its start until every allocated claim is Reserved ({settings}), on nodes of "
        f"{GPUS_PER_NODE}x {GPU_MODEL}; ratios: the medians against the first row's",
        [
            "nodes (GPUs)",
            "claims",
            "all Reserved after",
            "claims/s",
            "CPU",
            "CPU ms per claim",
            "peak RSS",
            "API requests per claim",
            "of them: status / Event / other",
            "CPU per claim ÷ first row",
            "RSS ÷ first row",
        ],
    )
    incremental = report.table(
        "incremental",
        f"The incremental path: {increment} more claims allocated at {args.increment_rate:g}/s once the controller "
        "has caught up, each timed from its allocation to its Reserved; the controller's CPU and requests meanwhile",
        [
            "nodes",
            "claims present",
            "median claim",
            "slowest claim",
            "CPU ms per new claim",
            "API requests per new claim",
            "CPU per claim ÷ first row",
        ],
    )
    reference: tuple[float, float, float] | None = None
    for point in bench.controller_points:
        runs, count = point.runs, point.claims
        per_claim = [1000 * r.cpu_seconds / count for r in runs]
        rss = [r.peak_rss_mib for r in runs]
        inc_per_claim = [1000 * r.inc_cpu_seconds / increment for r in runs]
        if reference is None:
            reference = (statistics.median(per_claim), statistics.median(rss), statistics.median(inc_per_claim))
        kinds = {
            kind: statistics.median(r.requests.get(("controller", kind), 0) / count for r in runs)
            for kind in ("status", "event")
        }
        everything = [total(r.requests, "controller") / count for r in runs]
        other = statistics.median(everything) - kinds["status"] - kinds["event"]
        controller.add(
            f"{point.nodes} ({point.nodes * GPUS_PER_NODE:,})",
            f"{count:,}",
            summary([r.seconds for r in runs], "s", 1),
            summary([count / r.seconds for r in runs], "", 1),
            summary([r.cpu_seconds for r in runs], "s", 1),
            summary(per_claim, "", 1),
            summary(rss, "MiB", 0),
            summary(everything, "", 2),
            f"{kinds['status']:.2f} / {kinds['event']:.2f} / {other:.2f}",
            ratio_text(statistics.median(per_claim), reference[0]),
            ratio_text(statistics.median(rss), reference[1]),
        )
        incremental.add(
            str(point.nodes),
            f"{count:,}",
            summary([1000 * r.inc_latency_median for r in runs], "ms", 0),
            summary([1000 * r.inc_latency_max for r in runs], "ms", 0),
            summary(inc_per_claim, "", 1),
            summary([total(r.inc_requests, "controller") / increment for r in runs], "", 2),
            ratio_text(statistics.median(inc_per_claim), reference[2]),
        )
    plugin = report.table(
        "plugin",
        f"One more node's plugin publishing its {GPUS_PER_NODE}x {GPU_MODEL} pool (SlicePublisher, default policy) "
        "to an API server holding the fleet's slices: wall time, the publisher's CPU (in-process), API requests "
        "(writes among them); ratios: the medians against the first row's",
        [
            "nodes present (slices)",
            *(f"{step}: time" for step in PUBLISH_STEPS),
            *(f"{step}: requests (writes)" for step in PUBLISH_STEPS),
            "publisher CPU, first publish",
            "first publish ÷ first row",
            "unchanged republish ÷ first row",
        ],
    )
    first_row: dict[str, float] = {}
    for published in bench.plugin_points:
        medians = {step: statistics.median(s.seconds for s in published.steps[step]) for step in PUBLISH_STEPS}
        first_row = first_row or medians
        plugin.add(
            f"{published.nodes} ({published.slices:,})",
            *(summary([1000 * s.seconds for s in published.steps[step]], "ms", 0) for step in PUBLISH_STEPS),
            *(
                f"{statistics.median(s.requests for s in published.steps[step]):.0f} "
                f"({statistics.median(s.writes for s in published.steps[step]):.0f})"
                for step in PUBLISH_STEPS
            ),
            summary([1000 * s.cpu_seconds for s in published.steps["first publish"]], "ms", 0),
            ratio_text(medians["first publish"], first_row["first publish"]),
            ratio_text(medians["unchanged republish"], first_row["unchanged republish"]),
        )
    cli = report.table(
        "cli",
        "The CLI as a user runs it (`.venv/bin/migdra`, its own process): wall time including start-up, the "
        "process's CPU and peak RSS (wait4), its API requests; ratios: the medians against the command's first row",
        [
            "command",
            "nodes",
            "claims",
            "wall time",
            "CPU",
            "peak RSS",
            "API requests",
            "time ÷ first row",
            "RSS ÷ first row",
        ],
    )
    for name in CLI_COMMANDS:
        rows = [p for p in bench.cli_points if p.command == name]
        base_time = statistics.median(r.seconds for r in rows[0].runs) if rows else 0.0
        base_rss = statistics.median(r.peak_rss_mib for r in rows[0].runs) if rows else 0.0
        for row in rows:
            cli.add(
                f"`{name}`",
                str(row.nodes),
                f"{row.claims:,}",
                summary([r.seconds for r in row.runs], "s", 2),
                summary([r.cpu_seconds for r in row.runs], "s", 2),
                summary([r.peak_rss_mib for r in row.runs], "MiB", 0),
                f"{statistics.median(row.requests):.0f}",
                ratio_text(statistics.median(r.seconds for r in row.runs), base_time),
                ratio_text(statistics.median(r.peak_rss_mib for r in row.runs), base_rss),
            )
    report.note(
        "Sizes are measured one after another in one run on one control plane (grown, never restarted); a ratio "
        "is the median at that size over the median at the first size, not a per-run ratio."
    )


# -- main ----------------------------------------------------------------------------------------


def int_list(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument(
        "--nodes", type=int_list, action="append", help=f"fleet sizes, nodes of {GPUS_PER_NODE}x {GPU_MODEL} (8,64,500)"
    )
    parser.add_argument(
        "--claims", type=int_list, action="append", help="allocated claims per size, where they fit (1000,10000)"
    )
    parser.add_argument("--increment", type=int, default=100, help="claims added once the controller caught up")
    parser.add_argument(
        "--increment-rate",
        type=float,
        default=10.0,
        help="the added claims are allocated at this many per second (about kube-scheduler's pace at 500 nodes)",
    )
    parser.add_argument("--write-qps", type=float, help="the controller's --write-qps (default: its own, 20)")
    parser.add_argument("--write-burst", type=int, help="the controller's --write-burst (default: its own, 50)")
    parser.add_argument(
        "--seconds-per-claim",
        type=float,
        default=0.5,
        help="the controller's catch-up times out after 300 s + this per claim",
    )
    parser.add_argument("--cli-timeout", type=float, default=1800.0, help="seconds a CLI command may take")
    parser.add_argument("--kube-version", help="a built version (default: the newest built)")
    parser.add_argument("--smoke", action="store_true", help="allow fewer than 5 runs (a quick check, not for docs)")
    args = parser.parse_args()
    check_runs(parser, args)
    args.nodes = sorted({n for group in args.nodes or [[8, 64, 500]] for n in group})
    args.claims = sorted({n for group in args.claims or [[1000, 10000]] for n in group})
    versions = built_versions()
    if not versions:
        raise SystemExit("components bench: no kube binaries; run `make kube` first")
    version = args.kube_version or versions[-1]
    params = {
        "nodes": args.nodes,
        "claims": args.claims,
        "increment": args.increment,
        "increment_rate": args.increment_rate,
        "gpus_per_node": f"{GPUS_PER_NODE}x {GPU_MODEL}",
        "claim_profile": PROFILE,
        "kube": version,
        "write_qps": args.write_qps,
        "write_burst": args.write_burst,
    }
    report = Report("components", args, params)
    with tempfile.TemporaryDirectory(prefix="migdra-components-", dir="/tmp") as scratch, report:
        workdir = Path(scratch)
        with control_plane(
            workdir, find_binaries(None, version), QPS_OF_SCHEDULER_PERF, QPS_OF_SCHEDULER_PERF
        ) as plane:
            bench = Bench(plane, workdir, args)
            try:
                for nodes in args.nodes:
                    bench.measure_size(nodes)
            finally:
                bench.close()
    write_tables(report, bench, args)
    report.finish()
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # control_plane sets the same once it starts
    raise SystemExit(main())
