"""Benchmark (not a test): sustained writes per second of the local API server with open watches.

One trial starts ``migdra sim apiserver`` as its own process, opens ``--watches`` watches on the written
resource in a second process (each reads and counts its events), and drives creates and updates
(alternately: create an object, then update it with its resourceVersion) over keep-alive HTTP from
the configuration's writer threads in this process for ``--seconds``.  Then it waits until every
watch has received every event (or 60 s passed) and stops the server.  Everything runs on loopback.

Every run makes one trial of each configuration (``--config KIND:WRITERS``, repeatable), in an order
rotated from run to run, each against a fresh server, so one trial's objects do not slow the next.
A figure is the median of the runs' figures with their min and max.

    .venv/bin/python hack/bench/apiserver_bench.py --seconds 5 --watches 20 --runs 5
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from benchlib import Report, add_common_arguments, check_runs, percentile, summary

PATHS = {
    "configmaps": "/api/v1/namespaces/default/configmaps",
    "resourceclaims": "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims",
}


def body(kind: str, name: str, generation: int) -> dict[str, Any]:
    labels = {"bench": "yes", "round": str(generation)}
    if kind == "configmaps":
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "labels": labels},
            "data": {"n": str(generation)},
        }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "labels": labels},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "mig.nvidia.com"}}]}},
    }


def watch_process(host: str, port: int, path: str, watches: int, since: str, ready: Any, conn: Connection) -> None:
    """Open ``watches`` watches from ``since``; answer each "report" with the counts, until "stop"."""
    counts = [0] * watches
    stop = threading.Event()

    def run(index: int) -> None:
        connection = http.client.HTTPConnection(host, port, timeout=120)
        connection.request("GET", f"{path}?watch=true&resourceVersion={since}&timeoutSeconds=600")
        response = connection.getresponse()
        ready.release()
        while not stop.is_set():
            line = response.readline()
            if not line:
                break
            if b'"type":"ADDED"' in line[:20] or b'"type":"MODIFIED"' in line[:20]:
                counts[index] += 1
        connection.close()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(watches)]
    for thread in threads:
        thread.start()
    while conn.recv() == "report":
        conn.send(list(counts))
    stop.set()


def writer(host: str, port: int, kind: str, prefix: str, deadline: float, latencies: list[float]) -> int:
    connection = http.client.HTTPConnection(host, port, timeout=30)
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    path = PATHS[kind]
    writes, index = 0, 0
    while time.monotonic() < deadline:
        name = f"{prefix}-{index}"
        started = time.perf_counter()
        connection.request("POST", path, json.dumps(body(kind, name, 0)), headers)
        response = connection.getresponse()
        created = json.loads(response.read())
        assert response.status == 201, created
        latencies.append(time.perf_counter() - started)
        update = body(kind, name, 1)
        update["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
        started = time.perf_counter()
        connection.request("PUT", f"{path}/{name}", json.dumps(update), headers)
        response = connection.getresponse()
        response.read()
        assert response.status == 200, response.status
        latencies.append(time.perf_counter() - started)
        writes += 2
        index += 1
    connection.close()
    return writes


DEFAULT_CONFIGS = ("configmaps:2", "resourceclaims:2", "configmaps:1")


@dataclass(frozen=True)
class Trial:
    """What one trial of one configuration measured."""

    writes: int
    elapsed: float
    p50_ms: float
    p99_ms: float
    complete_watches: int  # watches that received every event
    drain_s: float  # how long after the last write the slowest watch had every event


def _start_server(workdir: Path) -> tuple[subprocess.Popen[bytes], str, int]:
    kubeconfig = workdir / "kubeconfig"
    argv = [sys.executable, "-m", "dra_driver.cli.main", "sim", "apiserver", "--port", "0"]
    server = subprocess.Popen([*argv, "--kubeconfig-out", str(kubeconfig)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not kubeconfig.exists():
        if time.monotonic() > deadline or server.poll() is not None:
            server.kill()
            raise SystemExit("the API server did not start")
        time.sleep(0.05)
    url = urlsplit(yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"])
    return server, url.hostname or "127.0.0.1", url.port or 80


def trial(kind: str, writers: int, watches: int, seconds: float) -> Trial:
    """One fresh server, ``watches`` watches, ``writers`` writer threads for ``seconds``; then drain."""
    with tempfile.TemporaryDirectory(prefix="apiserver-bench-") as workdir:
        server, host, port = _start_server(Path(workdir))
        try:
            probe = http.client.HTTPConnection(host, port)
            probe.request("GET", PATHS[kind])
            since = json.loads(probe.getresponse().read())["metadata"]["resourceVersion"]
            probe.close()

            ready = multiprocessing.Semaphore(0)
            parent, child = multiprocessing.Pipe()
            watchers = multiprocessing.Process(
                target=watch_process, args=(host, port, PATHS[kind], watches, since, ready, child)
            )
            watchers.start()
            for _ in range(watches):
                if not ready.acquire(timeout=30):
                    raise SystemExit("watches did not open")

            latencies: list[float] = []
            totals = [0] * writers
            end = time.monotonic() + seconds
            started = time.monotonic()

            def run(index: int) -> None:
                totals[index] = writer(host, port, kind, f"bench-{index}", end, latencies)

            threads = [threading.Thread(target=run, args=(i,)) for i in range(writers)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            elapsed = time.monotonic() - started
            writes = sum(totals)

            drain_started = time.monotonic()
            delivered: list[int] = []
            while time.monotonic() - drain_started < 60:
                parent.send("report")
                delivered = parent.recv()
                if min(delivered) >= writes:
                    break
                time.sleep(0.1)
            drain = time.monotonic() - drain_started
            parent.send("stop")
            watchers.join(timeout=5)
            if watchers.is_alive():
                watchers.kill()
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
    return Trial(
        writes=writes,
        elapsed=elapsed,
        p50_ms=percentile(latencies, 0.5) * 1000,
        p99_ms=percentile(latencies, 0.99) * 1000,
        complete_watches=sum(1 for count in delivered if count >= writes),
        drain_s=drain,
    )


def _config(text: str) -> tuple[str, int]:
    kind, _, writers = text.partition(":")
    if kind not in PATHS or not writers.isdigit() or int(writers) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: want KIND:WRITERS, KIND one of {', '.join(sorted(PATHS))}")
    return kind, int(writers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser)
    parser.add_argument("--seconds", type=float, default=5.0, help="writing time of one trial")
    parser.add_argument("--watches", type=int, default=20)
    parser.add_argument(
        "--config",
        type=_config,
        action="append",
        help=f"KIND:WRITERS, repeatable (default {' '.join(DEFAULT_CONFIGS)})",
    )
    args = parser.parse_args()
    check_runs(parser, args)
    configs: list[tuple[str, int]] = args.config or [_config(text) for text in DEFAULT_CONFIGS]
    report = Report(
        "apiserver",
        args,
        {"seconds": args.seconds, "watches": args.watches, "configs": [f"{k}:{w}" for k, w in configs]},
    )
    trials: dict[tuple[str, int], list[Trial]] = {config: [] for config in configs}
    with report:
        for run in range(args.runs):
            shift = run % len(configs)
            for kind, writers in configs[shift:] + configs[:shift]:
                trials[(kind, writers)].append(trial(kind, writers, args.watches, args.seconds))

    table = report.table(
        "throughput",
        f"Writes against the local API server with {args.watches} open watches, {args.seconds:g} s per trial",
        ["resource", "writers", "writes/s", "p50", "p99", "watches with every event (worst run)", "drain"],
    )
    for (kind, writers), runs in trials.items():
        table.add(
            kind,
            str(writers),
            summary([t.writes / t.elapsed for t in runs], "", 0),
            summary([t.p50_ms for t in runs], "ms", 2),
            summary([t.p99_ms for t in runs], "ms", 2),
            f"{min(t.complete_watches for t in runs)} of {args.watches}",
            summary([t.drain_s for t in runs], "s", 1),
        )
    report.note(
        "A write is one create or one update; p50/p99 are per-request latencies seen by the writers in a run; "
        "drain is how long after the last write the slowest watch had received every event."
    )
    report.finish()


if __name__ == "__main__":
    main()
