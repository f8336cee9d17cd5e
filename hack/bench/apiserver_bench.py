"""Benchmark (not a test): sustained writes per second of the local API server with open watches.

Starts ``migdra sim apiserver`` as its own process, opens ``--watches`` watches on the written resource
in a second process (each reads and counts its events), and drives creates and updates (alternately:
create an object, then update it with its resourceVersion) over keep-alive HTTP from ``--writers``
threads in this process for ``--seconds``.  Then it waits until every watch has received every event
and prints a Markdown table row.  Everything runs on loopback and stops by itself.

    .venv/bin/python hack/bench/apiserver_bench.py --seconds 10 --watches 20
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--watches", type=int, default=20)
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--kind", choices=sorted(PATHS), default="configmaps")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="apiserver-bench-"))
    kubeconfig = workdir / "kubeconfig"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dra_driver.cli.main",
            "sim",
            "apiserver",
            "--port",
            "0",
            "--kubeconfig-out",
            str(kubeconfig),
        ],
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not kubeconfig.exists():
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("the API server did not start")
            time.sleep(0.05)
        url = urlsplit(yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"])
        host, port = url.hostname or "127.0.0.1", url.port or 80
        probe = http.client.HTTPConnection(host, port)
        probe.request("GET", PATHS[args.kind])
        since = json.loads(probe.getresponse().read())["metadata"]["resourceVersion"]
        probe.close()

        ready = multiprocessing.Semaphore(0)
        parent, child = multiprocessing.Pipe()
        watchers = multiprocessing.Process(
            target=watch_process, args=(host, port, PATHS[args.kind], args.watches, since, ready, child)
        )
        watchers.start()
        for _ in range(args.watches):
            if not ready.acquire(timeout=30):
                raise SystemExit("watches did not open")

        latencies: list[float] = []
        totals = [0] * args.writers
        end = time.monotonic() + args.seconds
        started = time.monotonic()

        def run(index: int) -> None:
            totals[index] = writer(host, port, args.kind, f"bench-{index}", end, latencies)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(args.writers)]
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

        latencies.sort()
        p50 = statistics.median(latencies) * 1000
        p99 = latencies[int(len(latencies) * 0.99) - 1] * 1000
        print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
        print()
        print(
            "| resource | writers | watches | seconds | writes | writes/s | p50 ms | p99 ms | events per watch (min) |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        print(
            f"| {args.kind} | {args.writers} | {args.watches} | {elapsed:.1f} | {writes} | {writes / elapsed:.0f} | "
            f"{p50:.2f} | {p99:.2f} | {min(delivered)} of {writes} (+{drain:.1f} s) |"
        )
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
