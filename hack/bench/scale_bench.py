#!/usr/bin/env python3
"""Benchmark: how ``migdra slices`` scales with the number of GPUs, per GPU (flat = linear).

For N simulated H100s (MIG on, no instances: what ``migdra slices --sim-gpus H100-SXM5-80GB:N`` reads)
each run times, per GPU:

- **inventory**: :func:`~dra_driver.nvml.inventory.read_inventory` in a fresh NVML session (what one
  ``migdra slices`` does), and once more in the same session (what the plugin's republish does);
  baseline: the same facts read with plain pynvml calls against the same simulator, each NVML call
  made once, no migdra code around them -- so the ratio is migdra's own cost, redundant reads included;
- **build**: :func:`~dra_driver.devicemodel.pool.build_pool` plus
  :func:`~dra_driver.devicemodel.layout.render_slices` (the ResourceSlice dicts);
- **render**: the YAML ``migdra slices -o yaml`` prints; baseline: ``json.dumps`` of the same slices,
  the cost of merely serialising that much data;
- **cyclic GC**: the time CPython's garbage collector ran during them (``gc.callbacks``), and every
  piece once more with the collector paused: the per-GPU growth is the collector's (its full
  collections traverse every live ResourceSlice dict, and come more often the more there are), the
  pieces themselves are flat.

The simulator is installed in-process (``dra_driver.nvml.sim.install``): ``--sim-gpus`` stops at
``MAX_SIM_GPUS`` GPUs, the simulator itself does not.  Sizes run interleaved within each run, so load
on the machine spreads over all of them alike.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pynvml
from benchlib import Report, add_common_arguments, check_runs, ratios, summary

from dra_driver.cli import slices_view
from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.layout import render_slices
from dra_driver.devicemodel.pool import build_pool
from dra_driver.nvml import sim
from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.inventory import read_inventory

MODEL = "H100-SXM5-80GB"
SIZES = (8, 16, 32, 64, 128)


class GcClock:
    """Seconds the cyclic garbage collector ran since the last :meth:`take`."""

    def __init__(self) -> None:
        self._started = 0.0
        self._total = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self._total += time.perf_counter() - self._started

    def take(self) -> float:
        total, self._total = self._total, 0.0
        return total


def direct_inventory() -> int:
    """The facts ``read_inventory`` gathers, each NVML call made once, straight through pynvml.

    Per GPU: identity (UUID, name, minor, PCI, architecture, compute capability, memory, NUMA node),
    MIG mode, every GI profile with its placements, and the GPU instances of each profile; then the
    driver and CUDA versions.  Returns the number of profiles read (so nothing is optimised away).
    """
    profiles = 0
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        pynvml.nvmlDeviceGetUUID(handle)
        pynvml.nvmlDeviceGetName(handle)
        pynvml.nvmlDeviceGetMinorNumber(handle)
        pynvml.nvmlDeviceGetPciInfo(handle)
        pynvml.nvmlDeviceGetArchitecture(handle)
        pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        pynvml.nvmlDeviceGetMemoryInfo(handle)
        pynvml.nvmlDeviceGetNumaNodeId(handle)
        current, _ = pynvml.nvmlDeviceGetMigMode(handle)
        for profile_index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile_index, 2)
            except pynvml.NVMLError:
                continue
            profiles += 1
            count = ctypes.c_uint(0)
            pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, info.id, None, ctypes.byref(count))
            placements = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
            pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, info.id, placements, ctypes.byref(count))
            if current:
                instances = (pynvml.c_nvmlGpuInstance_t * info.instanceCount)()
                pynvml.nvmlDeviceGetGpuInstances(handle, info.id, instances, ctypes.byref(count))
    pynvml.nvmlSystemGetDriverVersion()
    pynvml.nvmlSystemGetCudaDriverVersion()
    return profiles


@contextmanager
def simulated_node(gpus: int) -> Iterator[None]:
    with tempfile.TemporaryDirectory(prefix="migdra-scale-") as directory:
        sim.install(Path(directory) / "state.json", gpus=[MODEL] * gpus, mig_enabled=True)
        try:
            yield
        finally:
            sim.uninstall()


def measure(gpus: int, gc_clock: GcClock, collector: bool) -> dict[str, float]:
    """One run at ``gpus`` GPUs: milliseconds per GPU of each piece; ``collector`` False pauses the
    cyclic GC for the run (reference counting still frees everything these pieces drop)."""
    per_gpu = 1000.0 / gpus
    with simulated_node(gpus):
        if not collector:
            gc.disable()
        try:
            gc_clock.take()
            with Nvml() as nvml:
                started = time.perf_counter()
                inventory = read_inventory(nvml)
                first = time.perf_counter() - started
                started = time.perf_counter()
                read_inventory(nvml)
                again = time.perf_counter() - started
            pynvml.nvmlInit()
            try:
                started = time.perf_counter()
                direct_inventory()
                direct = time.perf_counter() - started
            finally:
                pynvml.nvmlShutdown()
            reading = gc_clock.take()
            started = time.perf_counter()
            pool = build_pool(inventory, DeviceModelConfig())
            slices = render_slices(pool, "bench-node", generation=1)
            build = time.perf_counter() - started
            started = time.perf_counter()
            slices_view.render(slices, pool, "yaml")
            render = time.perf_counter() - started
            started = time.perf_counter()
            json.dumps(slices)
            dumps = time.perf_counter() - started
            building = gc_clock.take()
        finally:
            gc.enable()
    return {
        "inventory": first * per_gpu,
        "inventory_again": again * per_gpu,
        "direct": direct * per_gpu,
        "gc_reading": reading * per_gpu,
        "build": build * per_gpu,
        "render": render * per_gpu,
        "dumps": dumps * per_gpu,
        "gc_building": building * per_gpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="GPU counts, comma-separated [%(default)s]")
    parser.add_argument("--smoke", action="store_true", help="one run at 8 GPUs: does the script work (no figures)")
    args = parser.parse_args()
    check_runs(parser, args)
    if args.smoke:
        args.runs, args.sizes = 1, "8"
    sizes = [int(size) for size in args.sizes.split(",")]
    gc_clock = GcClock()
    gc.callbacks.append(gc_clock)
    with Report("scale", args, {"model": MODEL, "sizes": sizes}) as report:
        samples: dict[tuple[int, bool], dict[str, list[float]]] = {}
        for _ in range(args.runs):
            for size in sizes:
                for collector in (True, False):
                    for name, value in measure(size, gc_clock, collector).items():
                        samples.setdefault((size, collector), {}).setdefault(name, []).append(value)
    ms = "ms"
    inventory = report.table(
        "inventory",
        f"Inventory read per GPU, {MODEL} x N, MIG on (ms per GPU; flat = linear)",
        ["GPUs", "read_inventory", "again, same session", "pynvml direct (baseline)", "migdra / baseline", "cyclic GC"],
    )
    build = report.table(
        "build",
        "Device model, ResourceSlices and YAML per GPU (ms per GPU; flat = linear)",
        ["GPUs", "build + layout", "YAML render", "json.dumps (baseline)", "YAML / json.dumps", "cyclic GC"],
    )
    paused = report.table(
        "nogc",
        "The same with the cyclic GC paused (gc.disable) (ms per GPU)",
        ["GPUs", "read_inventory", "build + layout", "YAML render", "json.dumps"],
    )
    for size in sizes:
        s, p = samples[(size, True)], samples[(size, False)]
        inventory.add(
            str(size),
            summary(s["inventory"], ms, 2),
            summary(s["inventory_again"], ms, 2),
            summary(s["direct"], ms, 2),
            summary(ratios(s["inventory"], s["direct"]), "x", 2),
            summary(s["gc_reading"], ms, 2),
        )
        build.add(
            str(size),
            summary(s["build"], ms, 2),
            summary(s["render"], ms, 2),
            summary(s["dumps"], ms, 2),
            summary(ratios(s["render"], s["dumps"]), "x", 1),
            summary(s["gc_building"], ms, 2),
        )
        paused.add(
            str(size),
            summary(p["inventory"], ms, 2),
            summary(p["build"], ms, 2),
            summary(p["render"], ms, 2),
            summary(p["dumps"], ms, 2),
        )
    report.note(
        "Per GPU, so a linear cost is a flat column.  Inventory baseline: the same facts through plain pynvml "
        "calls against the same simulator, each call once.  Render baseline: json.dumps of the same slices.  "
        "Cyclic GC: time CPython's collector ran during those pieces; the last table runs them with it paused."
    )
    report.finish()


if __name__ == "__main__":
    main()
