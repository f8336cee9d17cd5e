#!/usr/bin/env python3
"""Benchmark: NodePrepareResources / NodeUnprepareResources, in-process and as kubelet sees them.

1. **One claim at a time** (1g.10gb on an 8x H100 node, ``--rounds`` prepare+unprepare pairs per
   run, the claim status writes each call queues flushed after it, untimed): migdra's own time (the
   call's wall time minus the time spent inside NVML calls) beside the NVML time of the same calls.
   NVML time is measured around every C-level call (``Nvml(observe_call=...)``, which never nests),
   so nothing is counted twice.  Two NVML sides: the bare simulator (its "NVML time" is mostly its
   own state-file lock, read and write -- not GPU time), and the simulator slowed by the per-call
   latencies **recorded on a real H200** (``tests/golden/recordings/``), which looks like
   hardware for the reads.  Creation and destruction of instances were not recorded (the
   recording's GPU had MIG off), so they add no latency there: the hardware side of a prepare is
   underestimated, never flattered.
2. **56 claims on 8 GPUs in one call** (7x 1g.10gb per GPU), with zero and with 300 ms simulated
   GI-creation latency, beside the same call for one GPU's 7 claims alone (the busiest GPU's share:
   the floor if the other GPUs cost nothing) and, for 300 ms, the busiest GPU's serial creation time.
3. **Disk work per prepare as the node fills**: checkpoint files written and their bytes (the store's
   own counters), the CDI spec's bytes, and every fsync under the state and CDI directories, for the
   1st, 28th and 56th one-claim prepare of a node (the simulator's own state file is not counted).
4. **Over the socket**: ``migdra kubelet-plugin`` as its own process, called over its unix socket with
   kubelet's gRPC stubs, one claim at a time (waiting, untimed, for the plugin's claim status write
   and Event after each call); beside an empty NodePrepareResources call over the
   same socket (the gRPC round trip any plugin pays) and the in-process prepare of part 1.

A run measures every part once (so the over-the-socket and in-process calls a ratio compares are
measured within a minute of each other); every figure is a median of ``--runs`` runs (min-max), and
ratios are taken per run.
"""

from __future__ import annotations

import argparse
import os
import stat
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib import (
    REPO,
    Report,
    add_common_arguments,
    api_server_process,
    check_runs,
    percentile,
    ratios,
    repeat,
    stop_process,
    summary,
)
from kubernetes import client

from dra_driver.kube.client import CLAIMS, EVENTS, Client
from dra_driver.kube.config import load_kubeconfig_file
from dra_driver.kubelet.calls import ClaimRef
from dra_driver.nvml import sim
from dra_driver.nvml.backend import Nvml
from kubeletplugin.prepare.service import PrepareService
from kubeletplugin.settings import PrepareSettings
from migdra_devcluster.ports import free_port

sys.path.insert(0, str(REPO))  # tests/kubelet_client.py: kubelet's side of the socket, as the e2e tests use it
from tests.kubelet_client import KubeletClient, short_socket_dir
from tests.plugin_command import NODE as PLUGIN_NODE
from tests.plugin_command import kubelet_plugin_argv, kubelet_plugin_env

NODE = "bench-node"
DRIVER = "gpu.migdra.io"
MODEL = "H100-SXM5-80GB"
RECORDINGS = REPO / "tests" / "golden" / "recordings"
H200_RECORDING = RECORDINGS / "h200-sxm-580.159.04-mig-disabled.json"


class NvmlClock:
    """Seconds spent inside NVML calls, summed from the backend's per-call observer (calls never nest).

    ``recorded_seconds``: the part of it the simulator slept for the recorded hardware latency (its
    replaceable ``sleep``), i.e. what the same calls took on the recorded H200.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.recorded_seconds = 0.0
        self.calls = 0
        self._lock = threading.Lock()

    def observe(self, _function: str, seconds: float, _result: str) -> None:
        with self._lock:
            self.seconds += seconds
            self.calls += 1

    def slept(self, seconds: float) -> None:
        time.sleep(seconds)
        with self._lock:
            self.recorded_seconds += seconds

    def reset(self) -> None:
        with self._lock:
            self.seconds = self.recorded_seconds = 0.0
            self.calls = 0


@dataclass
class DurableWrites:
    """fsyncs of regular files under the watched directories, and their sizes (bytes made durable)."""

    roots: dict[str, Path]
    bytes: dict[str, int] = field(default_factory=dict)
    fsyncs: dict[str, int] = field(default_factory=dict)

    def reset(self) -> None:
        self.bytes = dict.fromkeys(self.roots, 0)
        self.fsyncs = dict.fromkeys(self.roots, 0)

    def observe(self, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        for name, root in self.roots.items():
            if path.startswith(str(root) + os.sep) or path == str(root):
                self.fsyncs[name] += 1
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode):
                    self.bytes[name] += st.st_size
                return


@contextmanager
def counting_fsyncs(writes: DurableWrites) -> Iterator[None]:
    """Count every ``os.fsync`` of this process (migdra's durable writes all go through it)."""
    real_fsync = os.fsync

    def fsync(fd: Any) -> None:
        real_fsync(fd)
        writes.observe(fd if isinstance(fd, int) else fd.fileno())

    os.fsync = fsync
    try:
        yield
    finally:
        os.fsync = real_fsync


def recorded_latency() -> dict[str, float]:
    """Seconds per C symbol that the recorded H200 took (p50), for the simulator and for the tally."""
    return sim.recorded_latency(H200_RECORDING)


def create_claim(
    api_client: client.ApiClient, name: str, device: str, node: str = NODE, **result_fields: Any
) -> ClaimRef:
    """An allocated one-device claim in ``node``'s pool, as the scheduler leaves it; ``result_fields``
    are added to its allocation result (a share's ``shareID`` and ``consumedCapacity``)."""
    resource = client.ResourceV1Api(api_client)
    claim = client.ResourceV1ResourceClaim.from_dict(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "mig.gpu.migdra.io"}}]}},
        }
    )
    if claim is None:  # from_dict returns None only for None
        raise RuntimeError(f"claim {name}: the client built no ResourceClaim")
    created = resource.create_namespaced_resource_claim("default", claim)
    if created.metadata is None or created.metadata.uid is None:
        raise RuntimeError(f"claim {name}: the API server returned it without a UID")
    # the client leaves sanitize_for_serialization unannotated; for a model it returns the model's JSON object
    body: dict[str, Any] = api_client.sanitize_for_serialization(created)  # type: ignore[no-untyped-call]
    body["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": DRIVER, "pool": node, "device": device, **result_fields}]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            },
        }
    }
    resource.replace_namespaced_resource_claim_status(
        name, "default", client.ResourceV1ResourceClaim.model_validate(body)
    )
    return ClaimRef("default", name, created.metadata.uid)


def device_name(gpu: int, start: int) -> str:
    return f"gpu-{gpu}-mig-1g10gb-19-{start}"


@dataclass(frozen=True)
class ApiServer:
    url: str
    kubeconfig: Path

    def configuration(self) -> client.Configuration:
        return load_kubeconfig_file(self.kubeconfig, what="the benchmark's kubeconfig")


@contextmanager
def api_server(root: Path) -> Iterator[ApiServer]:
    with api_server_process(root) as (url, kubeconfig):
        yield ApiServer(url, kubeconfig)


@dataclass
class Node:
    service: PrepareService
    clock: NvmlClock
    api_client: client.ApiClient
    root: Path
    created: int = 0

    def claim(self, device: str) -> ClaimRef:
        self.created += 1
        return create_claim(self.api_client, f"claim-{self.created}", device)


@contextmanager
def simulated_node(gpus: int, latency: dict[str, float]) -> Iterator[Node]:
    """The real PrepareService on a simulated node, claims in an API server process; all torn down after."""
    with tempfile.TemporaryDirectory(prefix="prepare-bench-") as directory, ExitStack() as stack:
        root = Path(directory)
        api = stack.enter_context(api_server(root))
        library = sim.install(
            root / "nvml.json", gpus=[MODEL] * gpus, mig_enabled=True, faults=sim.FaultPlan(), latency=latency
        )
        stack.callback(sim.uninstall)
        clock = NvmlClock()
        library.sleep = clock.slept
        nvml = Nvml(observe_call=clock.observe)
        nvml.init()
        stack.callback(nvml.shutdown)
        api_client = stack.enter_context(
            client.ApiClient(load_kubeconfig_file(api.kubeconfig, what="the benchmark kubeconfig"))
        )
        service = PrepareService(
            nvml=nvml,
            client=Client(api_client=api_client),
            node_name=NODE,
            driver_name=DRIVER,
            cdi_dir=root / "cdi",
            state_dir=root / "state",
            proc_root=root / "proc",
            read_boot_id=lambda: "bench-boot",
            workers=PrepareSettings().prepare_workers,
        )
        service.start()
        stack.callback(service.close)
        yield Node(service, clock, api_client, root)


def timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def expect_success(outcome: dict[str, Any]) -> None:
    failures = [result.error for result in outcome.values() if result.error]
    if failures:
        raise SystemExit(f"a benchmark claim failed: {failures[:3]}")


def checked(call: Callable[[list[ClaimRef]], dict[str, Any]], ref: ClaimRef) -> Callable[[], None]:
    """``call([ref])`` (the plugin client's prepare or unprepare), failing unless the claim succeeded."""
    return lambda: expect_success(call([ref]))


def one_claim_run(rounds: int, latency: dict[str, float]) -> dict[str, float]:
    """One run of part 1: ``rounds`` prepare+unprepare pairs; p50/p99 of this run per operation."""
    samples: dict[str, list[float]] = {}
    with simulated_node(8, latency) as node:
        for index in range(rounds + 5):  # the first 5 warm caches (imports, CEL, connections): not counted
            ref = node.claim(device_name(index % 8, index % 7))
            for operation, call in (("prepare", node.service.prepare), ("unprepare", node.service.unprepare)):
                node.clock.reset()
                started = time.perf_counter()
                outcome = call([ref])
                total = time.perf_counter() - started
                expect_success(outcome)
                # The claim status write and Event this call queued run now, outside the timing: each call
                # is measured on an otherwise idle plugin, as kubelet's calls of one pod meet it.
                if not node.service.flush_reports(timeout=30):
                    raise SystemExit("claim status writes did not finish within 30 s")
                if index < 5:
                    continue
                for what, value in (
                    ("total", total),
                    ("migdra", total - node.clock.seconds),
                    ("nvml", node.clock.seconds),
                    ("recorded", node.clock.recorded_seconds),
                    ("calls", float(node.clock.calls)),
                ):
                    samples.setdefault(f"{operation}.{what}", []).append(value)
    result: dict[str, float] = {}
    for name, values in samples.items():
        result[f"{name}.p50"] = percentile(values, 0.5)
        result[f"{name}.p99"] = percentile(values, 0.99)
    return result


def parallel_run(create_latency: float) -> dict[str, float]:
    """One run of part 2: all 56 claims in one call; then one GPU's 7 claims alone on a fresh node."""
    latency = {"nvmlDeviceCreateGpuInstanceWithPlacement": create_latency} if create_latency else {}
    with simulated_node(8, latency) as node:
        refs = [node.claim(device_name(gpu, start)) for gpu in range(8) for start in range(7)]
        wall = timed(lambda: expect_success(node.service.prepare(refs)))
    with simulated_node(8, latency) as node:
        refs = [node.claim(device_name(0, start)) for start in range(7)]
        one_gpu = timed(lambda: expect_success(node.service.prepare(refs)))
    return {"wall": wall, "one_gpu": one_gpu}


def filling_run() -> dict[str, float]:
    """One run of part 3: 56 one-claim prepares in a row; disk work of the 1st, 28th and 56th.

    The checkpoint's by its store's own counters (files written, bytes); the CDI spec's by its size
    (one file per claim, written once); fsyncs by counting every ``os.fsync`` of a file or directory
    under the state or CDI directory (the simulator's state file lives elsewhere and is not counted).
    """
    result: dict[str, float] = {}
    with simulated_node(8, {}) as node:
        writes = DurableWrites({"state": node.root / "state", "cdi": node.root / "cdi"})
        refs = [node.claim(device_name(gpu, start)) for start in range(7) for gpu in range(8)]
        with counting_fsyncs(writes):
            for number, ref in enumerate(refs, start=1):
                writes.reset()
                before = node.service.checkpoint.write_stats()
                expect_success(node.service.prepare([ref]))
                after = node.service.checkpoint.write_stats()
                if number in (1, 28, 56):
                    specs = list((node.root / "cdi").glob(f"*{ref.uid}*.json"))
                    result[f"{number}.checkpoint.writes"] = float(after.writes - before.writes)
                    result[f"{number}.checkpoint.bytes"] = float(after.bytes - before.bytes)
                    result[f"{number}.cdi.bytes"] = float(sum(spec.stat().st_size for spec in specs))
                    result[f"{number}.fsyncs"] = float(sum(writes.fsyncs.values()))
    return result


@contextmanager
def plugin_process(root: Path, api: ApiServer, metrics_port: int) -> Iterator[KubeletClient]:
    """``migdra kubelet-plugin`` on a simulated 8x H100 node (the e2e tests' command), registered with a
    test kubelet, serving its metrics on ``metrics_port``."""
    argv = kubelet_plugin_argv(root, api.kubeconfig, sim_gpus=f"{MODEL}:8")
    env = kubelet_plugin_env(root, [("MIGDRA_METRICS_ADDRESS", f"127.0.0.1:{metrics_port}")])
    with (root / "plugin.log").open("wb") as log:
        process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            socket = root / "registry" / f"{DRIVER}-reg.sock"
            deadline = time.monotonic() + 120
            while not socket.exists():
                if process.poll() is not None:
                    raise SystemExit(f"the plugin exited {process.returncode}: {(root / 'plugin.log').read_text()}")
                if time.monotonic() > deadline:
                    raise SystemExit("the plugin did not create its registration socket within 120 s")
                time.sleep(0.05)
            with KubeletClient(socket) as kubelet:
                kubelet.register()
                yield kubelet
        finally:
            stop_process(process)


def wait_for_reports(api_client: client.ApiClient, ref: ClaimRef, *, ready: bool, events: int) -> None:
    """Until the plugin has written (``ready``) or cleared the claim's device status and posted ``events``
    Events on it (30 s at most): its background writes are done, as ``flush_reports`` waits in-process."""
    api = Client(api_client=api_client, timeout=10)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        devices = (api.read(CLAIMS, ref.namespace, ref.name).get("status") or {}).get("devices") or []
        posted = len(api.list(EVENTS, ref.namespace, field_selector=f"involvedObject.uid={ref.uid}")[0])
        if bool(devices) == ready and posted >= events:
            return
        time.sleep(0.005)
    raise SystemExit(f"the plugin did not finish writing the status and Events of claim {ref.name} in 30 s")


def claim_seconds(metrics_port: int) -> dict[str, tuple[float, float]]:
    """The plugin's own ``migdra_claim_duration_seconds`` (sum, count) per operation: the time from the
    service's start of a claim to its result, inside the plugin, without gRPC around it."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    found: dict[str, list[float]] = {}
    for line in text.splitlines():
        for suffix, position in (("_sum", 0), ("_count", 1)):
            prefix = f"migdra_claim_duration_seconds{suffix}{{"
            if line.startswith(prefix) and 'result="success"' in line:
                operation = line.split('operation="', 1)[1].split('"', 1)[0]
                found.setdefault(operation, [0.0, 0.0])[position] += float(line.rsplit(" ", 1)[1])
    return {operation: (values[0], values[1]) for operation, values in found.items()}


def socket_run(rounds: int) -> dict[str, float]:
    """One run of part 4: over the socket, p50/p99 of prepare, unprepare and an empty call, and the mean
    time the plugin itself measured for the same claims."""
    samples: dict[str, list[float]] = {"prepare": [], "unprepare": [], "empty": []}
    port = free_port()
    with (
        short_socket_dir() as root,
        api_server(root) as api,
        client.ApiClient(load_kubeconfig_file(api.kubeconfig, what="the benchmark kubeconfig")) as api_client,
    ):
        client.CoreV1Api(api_client).create_node(client.V1Node.model_validate({"metadata": {"name": PLUGIN_NODE}}))
        with plugin_process(root, api, port) as kubelet:
            for index in range(rounds + 5):
                if index == 5:
                    before = claim_seconds(port)
                ref = create_claim(api_client, f"sock-{index}", device_name(index % 8, index % 7), PLUGIN_NODE)
                values = {"empty": timed(lambda: kubelet.prepare([]))}
                values["prepare"] = timed(checked(kubelet.prepare, ref))
                wait_for_reports(api_client, ref, ready=True, events=1)  # the plugin's writes, untimed
                values["unprepare"] = timed(checked(kubelet.unprepare, ref))
                wait_for_reports(api_client, ref, ready=False, events=2)
                if index >= 5:
                    for name, value in values.items():
                        samples[name].append(value)
            after = claim_seconds(port)
    result: dict[str, float] = {}
    for name, series in samples.items():
        result[f"{name}.p50"] = percentile(series, 0.5)
        result[f"{name}.p99"] = percentile(series, 0.99)
        result[f"{name}.mean"] = statistics.fmean(series)
    for operation in ("prepare", "unprepare"):
        (sum_after, count_after), (sum_before, count_before) = after[operation], before[operation]
        result[f"{operation}.inside.mean"] = (sum_after - sum_before) / (count_after - count_before)
    return result


def ms(values: Sequence[float]) -> dict[str, Any]:
    return summary([v * 1000 for v in values], "ms", 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--rounds", type=int, default=100, help="prepare+unprepare pairs per run (part 1)")
    parser.add_argument("--socket-rounds", type=int, default=50, help="calls per run over the socket (part 4)")
    parser.add_argument("--create-latency", type=float, default=0.3, help="seconds per GI creation (part 2)")
    parser.add_argument("--smoke", action="store_true", help="tiny rounds and 1 run: check the script works")
    args = parser.parse_args()
    check_runs(parser, args)
    if args.smoke:
        args.runs, args.rounds, args.socket_rounds = 1, 3, 3
    recorded = recorded_latency()
    params = {"rounds": args.rounds, "socket_rounds": args.socket_rounds, "create_latency_s": args.create_latency}
    latencies = (0.0, args.create_latency)

    def one_run() -> dict[str, float]:
        """Every part once, so that the parts a ratio compares (over the socket and in-process) are
        measured side by side in the same run, within a minute of each other."""
        parts: list[tuple[str, dict[str, float]]] = [
            ("bare", one_claim_run(args.rounds, {})),
            ("hardware", one_claim_run(args.rounds, recorded)),
            *((f"parallel-{latency}", parallel_run(latency)) for latency in latencies),
            ("filling", filling_run()),
            ("socket", socket_run(args.socket_rounds)),
        ]
        return {f"{part}:{name}": value for part, values in parts for name, value in values.items()}

    with Report("prepare", args, params) as report:
        runs = repeat(args.runs, one_run)

    def part(name: str) -> dict[str, list[float]]:
        prefix = f"{name}:"
        return {key[len(prefix) :]: values for key, values in runs.items() if key.startswith(prefix)}

    bare, hardware, filling, socket = part("bare"), part("hardware"), part("filling"), part("socket")
    parallel = {latency: part(f"parallel-{latency}") for latency in latencies}

    one = report.table(
        "one_claim",
        "One claim (1g.10gb, 8x H100 node): migdra's own time beside NVML's, per call",
        [
            "call",
            "NVML side",
            "migdra p50",
            "migdra p99",
            "NVML p50",
            "NVML p99",
            "NVML calls",
            "migdra ÷ NVML (p50)",
        ],
    )
    for operation in ("prepare", "unprepare"):
        for label, runs in (
            ("bare simulator (state file, no GPU time)", bare),
            ("H200-recorded read latency", hardware),
        ):
            one.add(
                operation,
                label,
                ms(runs[f"{operation}.migdra.p50"]),
                ms(runs[f"{operation}.migdra.p99"]),
                ms(runs[f"{operation}.nvml.p50"]),
                ms(runs[f"{operation}.nvml.p99"]),
                summary(runs[f"{operation}.calls.p50"], "", 0),
                summary(ratios(runs[f"{operation}.migdra.p50"], runs[f"{operation}.nvml.p50"]), "x", 2),
            )
    one.add(
        "prepare",
        "H200-recorded part of the NVML time alone",
        ms(hardware["prepare.migdra.p50"]),
        ms(hardware["prepare.migdra.p99"]),
        ms(hardware["prepare.recorded.p50"]),
        ms(hardware["prepare.recorded.p99"]),
        summary(hardware["prepare.calls.p50"], "", 0),
        summary(ratios(hardware["prepare.migdra.p50"], hardware["prepare.recorded.p50"]), "x", 2),
    )

    par = report.table(
        "parallel",
        "56 one-device claims on 8 GPUs in one call, beside the busiest GPU's 7 claims alone",
        [
            "GI creation latency",
            "56 claims, one call",
            "GPU 0's 7 claims alone",
            "ratio",
            "busiest GPU's serial GI creation",
            "ratio",
        ],
    )
    for latency, runs in parallel.items():
        serial = 7 * latency
        par.add(
            f"{latency * 1000:.0f} ms",
            summary(runs["wall"], "s", 2),
            summary(runs["one_gpu"], "s", 2),
            summary(ratios(runs["wall"], runs["one_gpu"]), "x", 2),
            f"{serial:.2f} s" if serial else "-",
            summary([w / serial for w in runs["wall"]], "x", 2) if serial else "-",
        )

    fill = report.table(
        "filling",
        "Disk work of one prepare as the node fills (56 one-claim prepares in a row)",
        ["prepare number", "checkpoint files written", "checkpoint bytes", "CDI spec bytes", "fsyncs"],
    )
    for number in (1, 28, 56):
        fill.add(
            f"{number}",
            summary(filling[f"{number}.checkpoint.writes"], "", 0),
            summary(filling[f"{number}.checkpoint.bytes"], "B", 0),
            summary(filling[f"{number}.cdi.bytes"], "B", 0),
            summary(filling[f"{number}.fsyncs"], "", 0),
        )

    sock = report.table(
        "socket",
        "As kubelet sees it: over the plugin's unix socket (plugin in its own process), beside in-process",
        [
            "call",
            "over the socket p50",
            "p99",
            "in-process p50 (part 1, bare)",
            "socket ÷ in-process (p50)",
            "over the socket, mean",
            "inside the plugin, mean (its metric)",
        ],
    )
    for operation in ("prepare", "unprepare"):
        sock.add(
            operation,
            ms(socket[f"{operation}.p50"]),
            ms(socket[f"{operation}.p99"]),
            ms(bare[f"{operation}.total.p50"]),
            summary(ratios(socket[f"{operation}.p50"], bare[f"{operation}.total.p50"]), "x", 2),
            ms(socket[f"{operation}.mean"]),
            ms(socket[f"{operation}.inside.mean"]),
        )
    sock.add(
        "empty NodePrepareResources (gRPC round trip)",
        ms(socket["empty.p50"]),
        ms(socket["empty.p99"]),
        "-",
        "-",
        ms(socket["empty.mean"]),
        "-",
    )
    report.finish()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
