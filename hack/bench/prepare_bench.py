#!/usr/bin/env python3
"""Benchmark: NodePrepareResources / NodeUnprepareResources.

1. Latency of one-claim prepare and unprepare calls (simulated NVML with zero latency), p50/p99,
   split into migdra's own time (claim read, checkpoint writes, CDI spec, status queueing) and the
   NVML time measured around every backend call, side by side.
2. 56 one-device claims across 8 GPUs (7x 1g.10gb each) in ONE prepare call with 300 ms simulated
   GPU-instance creation, against the baseline that cannot be beaten without parallelism across
   GPUs: the serial NVML time of the busiest GPU (7 creations there, one after the other).

Prints Markdown tables; docs/benchmarks.md keeps the last run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kubernetes import client

from dra_driver.controlplane.apiserver import LocalAPIServer
from dra_driver.nvml import sim
from dra_driver.nvml.backend import Nvml
from kubeletplugin.draservice import ClaimRef
from kubeletplugin.prepare import PrepareService, PrepareSettings

NODE = "bench-node"
DRIVER = "gpu.migdra.io"


class TimedNvml(Nvml):
    """The real backend, with the wall time spent inside it summed per thread-independent total."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds = 0.0
        self._timer_lock = threading.Lock()
        for name in (
            "create_gpu_instance",
            "create_compute_instance",
            "destroy_compute_instance",
            "destroy_gpu_instance",
            "compute_instance_profiles",
            "gpu_instances",
            "list_gpus",
            "gpu_instance_profiles",
            "gpu_instance",
            "compute_instances",
        ):
            setattr(self, name, self._timed(getattr(self, name)))

    def _timed(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                with self._timer_lock:
                    self.seconds += time.perf_counter() - start

        return timed


def _claim(api_client: client.ApiClient, name: str, device: str) -> ClaimRef:
    resource = client.ResourceV1Api(api_client)
    created = resource.create_namespaced_resource_claim(
        "default",
        client.ResourceV1ResourceClaim.from_dict(
            {
                "metadata": {"name": name, "namespace": "default"},
                "spec": {
                    "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "mig.gpu.migdra.io"}}]}
                },
            }
        ),
    )
    body = api_client.sanitize_for_serialization(created)
    body["status"] = {
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": NODE, "device": device}]},
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}]
            },
        }
    }
    resource.replace_namespaced_resource_claim_status(name, "default", body)
    return ClaimRef("default", name, created.metadata.uid)


@contextmanager
def _service(gpus: int, latency: dict[str, float]) -> Iterator[tuple[PrepareService, TimedNvml, client.ApiClient]]:
    with tempfile.TemporaryDirectory(prefix="prepare-bench-") as directory, LocalAPIServer() as api:
        root = Path(directory)
        sim.install(
            root / "nvml.json",
            gpus=["H100-SXM5-80GB"] * gpus,
            mig_enabled=True,
            faults=sim.FaultPlan(),
            latency=latency,
        )
        nvml = TimedNvml()
        nvml.init()
        try:
            with client.ApiClient(client.Configuration(host=api.url)) as api_client:
                service = PrepareService(
                    nvml=nvml,
                    api_client=api_client,
                    node_name=NODE,
                    driver_name=DRIVER,
                    cdi_dir=root / "cdi",
                    state_dir=root / "state",
                    proc_root=root / "proc",
                    read_boot_id=lambda: "bench-boot",
                    workers=PrepareSettings().prepare_workers,
                )
                service.start()
                try:
                    yield service, nvml, api_client
                finally:
                    service.close()
        finally:
            nvml.shutdown()
            sim.uninstall()


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def bench_latency(rounds: int) -> dict[str, tuple[list[float], list[float]]]:
    devices = [f"gpu-0-mig-1g10gb-19-{start}" for start in range(7)]
    results: dict[str, tuple[list[float], list[float]]] = {"prepare": ([], []), "unprepare": ([], [])}
    with _service(1, {}) as (service, nvml, api_client):
        for index in range(rounds):
            ref = _claim(api_client, f"lat-{index}", devices[index % len(devices)])
            for operation, call in (("prepare", service.prepare), ("unprepare", service.unprepare)):
                nvml.seconds = 0.0
                start = time.perf_counter()
                outcome = call([ref])
                total = time.perf_counter() - start
                assert not outcome[ref.uid].error, outcome[ref.uid].error
                ours, theirs = results[operation]
                ours.append((total - nvml.seconds) * 1000)
                theirs.append(nvml.seconds * 1000)
    return results


def bench_parallel(create_latency: float) -> tuple[float, float, int]:
    with _service(8, {"nvmlDeviceCreateGpuInstanceWithPlacement": create_latency}) as (service, _nvml, api_client):
        refs = [
            _claim(api_client, f"par-{gpu}-{start}", f"gpu-{gpu}-mig-1g10gb-19-{start}")
            for gpu in range(8)
            for start in range(7)
        ]
        start_time = time.perf_counter()
        outcome = service.prepare(refs)
        wall = time.perf_counter() - start_time
        failures = [r.error for r in outcome.values() if r.error]
        assert not failures, failures[:3]
        busiest_gpu_serial = 7 * create_latency  # the floor without cross-GPU parallelism
        return wall, busiest_gpu_serial, len(refs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--create-latency", type=float, default=0.3)
    args = parser.parse_args()
    print("| one claim, 1g.10gb, zero NVML latency | migdra p50 | migdra p99 | NVML p50 (baseline) | NVML p99 |")
    print("|---|---:|---:|---:|---:|")
    for operation, (ours, theirs) in bench_latency(args.rounds).items():
        ours_p50, ours_p99 = _percentiles(ours)
        nvml_p50, nvml_p99 = _percentiles(theirs)
        print(f"| {operation} | {ours_p50:.1f} ms | {ours_p99:.1f} ms | {nvml_p50:.1f} ms | {nvml_p99:.1f} ms |")
    wall, serial, claims = bench_parallel(args.create_latency)
    print()
    print("| parallel prepare | claims | wall time | baseline: busiest GPU's serial GI creation | ratio |")
    print("|---|---:|---:|---:|---:|")
    print(
        f"| 8 GPUs x 7 1g.10gb, {args.create_latency * 1000:.0f} ms per GI creation | {claims} | {wall:.2f} s | "
        f"{serial:.2f} s | {wall / serial:.2f}x |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
