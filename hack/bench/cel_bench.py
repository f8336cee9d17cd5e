#!/usr/bin/env python3
"""Benchmark: one DeviceClass selector over 10,000 devices, with and without migdra's caches.

1. Compile time: the first compile in a process (it builds the Lark parser), a fresh compile of the
   selector, and a compile-cache hit, for celpy's compiled and interpreted runners.
2. Per-device evaluation time over 10,000 devices published by the device model (H100, A100 and B200
   nodes, MIG on and off): with device activations built once and reused, rebuilt for every
   evaluation, or found through the ActivationCache, on both runners; beside a baseline run that
   compiles the selector and converts the device for every evaluation (no cache of either kind).

Times are the best of two passes over all devices (one pass for the baseline).  Prints Markdown
tables; docs/benchmarks.md (section "CEL selectors") keeps the last run.
"""

from __future__ import annotations

import argparse
import functools
import gc
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from dra_driver.cel import (
    ActivationCache,
    CompiledSelector,
    DeviceActivation,
    RunnerKind,
    build_device_activation,
    compile_selector,
)
from dra_driver.cel.environment import celpy_version
from dra_driver.devicemodel import example_slices

CLASS_FILE = Path(__file__).resolve().parents[2] / "deviceclasses" / "examples" / "capabilities.yaml"
NODES = [
    (["H100-SXM5-80GB"] * 8, True),
    (["A100-SXM4-40GB"] * 8, True),
    (["B200"] * 8, True),
    (["H100-SXM5-80GB"] * 8, False),
]


def selector_of(class_name: str) -> str:
    for body in yaml.safe_load_all(CLASS_FILE.read_text()):
        if body["metadata"]["name"] == class_name:
            expression: str = body["spec"]["selectors"][0]["cel"]["expression"]
            return expression
    raise SystemExit(f"no DeviceClass {class_name} in {CLASS_FILE}")


def devices(count: int) -> list[tuple[str, dict[str, Any]]]:
    """(driver, device) pairs from as many example nodes as it takes; every dict is its own object."""
    found: list[tuple[str, dict[str, Any]]] = []
    node = 0
    while len(found) < count:
        gpus, mig_enabled = NODES[node % len(NODES)]
        for body in example_slices(gpus, mig_enabled=mig_enabled):
            found += [(body["spec"]["driver"], device) for device in body["spec"].get("devices") or []]
        node += 1
    return found[:count]


def per_device_us(
    action: Callable[[tuple[str, dict[str, Any]]], Any], items: list[Any], passes: int = 2
) -> tuple[float, int]:
    """Microseconds per device, best of ``passes`` (the machine is shared), and the number matched."""
    best = float("inf")
    matched = 0
    for _ in range(passes):
        gc.collect()
        start = time.perf_counter()
        matched = sum(1 for item in items if action(item))
        best = min(best, (time.perf_counter() - start) / len(items) * 1e6)
    return best, matched


def median_ms(action: Callable[[], Any], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def bench_runner(
    kind: RunnerKind,
    expression: str,
    items: list[tuple[str, dict[str, Any]]],
    activations: list[DeviceActivation],
    baseline_devices: int,
) -> dict[str, tuple[float, int]]:
    """Per-device microseconds (and matches) of each way of evaluating, on one runner."""
    program = compile_selector(expression, runner=kind)
    program.matches(activations[0])  # warm-up
    by_item = {id(item): activation for item, activation in zip(items, activations, strict=True)}
    cache = ActivationCache(maxsize=len(items) + 1)
    for driver, device in items:
        program.matches(device, driver=driver, activations=cache)  # first pass fills the cache

    def reused(item: tuple[str, dict[str, Any]]) -> bool:
        return program.matches(by_item[id(item)])

    def cached(item: tuple[str, dict[str, Any]]) -> bool:
        return program.matches(item[1], driver=item[0], activations=cache)

    def rebuilt(item: tuple[str, dict[str, Any]]) -> bool:
        return program.matches(DeviceActivation(item[1], item[0]))

    def naive(item: tuple[str, dict[str, Any]]) -> bool:
        return CompiledSelector(expression, runner=kind).matches(DeviceActivation(item[1], item[0]))

    return {
        "activations built once and reused": per_device_us(reused, items),
        "device dicts via ActivationCache (second pass)": per_device_us(cached, items),
        "activation rebuilt for every evaluation": per_device_us(rebuilt, items),
        "**baseline**: compile + convert for every evaluation": per_device_us(naive, items[:baseline_devices], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=10_000)
    parser.add_argument("--class-name", default="mig-20gi-40sm.migdra.io", help="a class of " + CLASS_FILE.name)
    parser.add_argument("--baseline-devices", type=int, default=300, help="devices for the slow baseline")
    args = parser.parse_args()

    expression = selector_of(args.class_name)
    start = time.perf_counter()
    compile_selector(expression)
    first_compile_ms = (time.perf_counter() - start) * 1000
    compile_ms: dict[RunnerKind, float] = {}
    hit_us: dict[RunnerKind, float] = {}
    for kind in RunnerKind:
        compile_ms[kind] = median_ms(functools.partial(CompiledSelector, expression, runner=kind), 50)
        hit_us[kind] = median_ms(functools.partial(compile_selector, expression, runner=kind), 200) * 1000

    items = devices(args.devices)
    start = time.perf_counter()
    activations = [build_device_activation(device, driver) for driver, device in items]
    build_us = (time.perf_counter() - start) / len(items) * 1e6
    # 10,000 long-lived activations are what a scheduler holds too; keep the collector off them.
    gc.collect()
    gc.freeze()
    results = {kind: bench_runner(kind, expression, items, activations, args.baseline_devices) for kind in RunnerKind}

    print(f"Python {platform.python_version()}, celpy {celpy_version()}, {platform.machine()}")
    print(f"Selector ({args.class_name}): `{' '.join(expression.split())}`\n")
    print("| compile | compiled runner | interpreted runner |")
    print("|---|---:|---:|")
    print(f"| first compile in the process (builds the Lark parser) | {first_compile_ms:.0f} ms | |")
    print(
        f"| compile (median of 50) | {compile_ms[RunnerKind.COMPILED]:.2f} ms "
        f"| {compile_ms[RunnerKind.INTERPRETED]:.2f} ms |"
    )
    print(
        f"| `compile_selector` cache hit | {hit_us[RunnerKind.COMPILED]:.1f} µs "
        f"| {hit_us[RunnerKind.INTERPRETED]:.1f} µs |\n"
    )
    compiled = results[RunnerKind.COMPILED]
    matches = compiled["activations built once and reused"][1]
    print(f"| per device, {len(items):,} devices ({matches:,} match) | compiled runner | interpreted runner |")
    print("|---|---:|---:|")
    for label in compiled:
        cells = " | ".join(f"{results[kind][label][0]:.1f} µs" for kind in RunnerKind)
        scope = f" ({args.baseline_devices} devices)" if "baseline" in label else ""
        print(f"| {label}{scope} | {cells} |")
    print(f"| converting one device (first time: cold parse caches) | {build_us:.1f} µs | |")
    for label in compiled:
        counts = {results[kind][label][1] for kind in RunnerKind}
        if "baseline" not in label and counts != {matches}:
            raise SystemExit(f"runners disagree on {label}: {counts}")


if __name__ == "__main__":
    main()
