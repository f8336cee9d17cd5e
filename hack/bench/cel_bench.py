#!/usr/bin/env python3
"""Benchmark: one DeviceClass selector over 10,000 devices, with and without migdra's caches.

1. Compile time: the first compile in a process (it builds the Lark parser), a fresh compile of the
   selector, and a compile-cache hit, for celpy's compiled and interpreted runners.
2. Per-device evaluation time over 10,000 devices published by the device model (H100, A100 and B200
   nodes, MIG on and off): with device activations built once and reused, rebuilt for every
   evaluation, or found through the ActivationCache, on both runners; beside two baselines:
   - plain celpy: the selector compiled once with celpy's own API (``celpy.Environment``, ``compile``,
     ``program`` with the quantity functions registered) and each device converted to celpy values
     for its evaluation, the straightforward use of the library;
   - no caches: migdra compiling the selector and converting the device for every evaluation.

Times are the best of two passes over all devices (plain celpy: over ``--plain-devices``; the
no-caches run: one pass over ``--baseline-devices``).  Prints Markdown tables;
docs/benchmarks.md (section "CEL selectors") keeps the last run.
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

import celpy
import yaml
from celpy import celtypes
from celpy.celparser import CELParser

import dra_driver
from dra_driver.cel import (
    ActivationCache,
    CompiledSelector,
    DeviceActivation,
    RunnerKind,
    build_device_activation,
    compile_selector,
)
from dra_driver.cel.environment import celpy_version
from dra_driver.cel.functions import kube
from dra_driver.cel.quantity import Quantity
from dra_driver.cel.semver import Semver
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


# -- plain celpy -----------------------------------------------------------------------------------

# The Kubernetes functions the selectors call, registered by name as celpy's API expects.  celpy's
# CompiledRunner names them in its generated code as ``dra_driver.cel.functions.kube.<name>`` and
# looks that up in ``celpy.evaluation``'s globals.
PLAIN_FUNCTIONS = {"quantity": kube.quantity, "compareTo": kube.compare_to}
_VALUE: dict[str, Callable[[Any], Any]] = {
    "int": celtypes.IntType,
    "bool": celtypes.BoolType,
    "string": celtypes.StringType,
    "version": Semver.parse,
}


def plain_environment(kind: RunnerKind) -> Any:
    """celpy's Environment for one runner (a fresh parser: celpy's is fixed by the first runner kind)."""
    CELParser.CEL_PARSER = None
    evaluation_globals: Any = celpy.evaluation
    evaluation_globals.dra_driver = dra_driver
    return celpy.Environment(
        runner_class=celpy.CompiledRunner if kind is RunnerKind.COMPILED else celpy.InterpretedRunner
    )


def plain_program(env: Any, expression: str) -> Any:
    """One compile with celpy's own API."""
    return env.program(env.compile(expression), functions=PLAIN_FUNCTIONS)


def plain_device(device: dict[str, Any], driver: str) -> celtypes.MapType:
    """The device as celpy values, the straightforward way (no unknown-domain map: these are all
    migdra's devices, so every domain a selector names exists)."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, attribute in (device.get("attributes") or {}).items():
        domain, _, ident = name.rpartition("/")
        ((kind, value),) = attribute.items()
        attributes.setdefault(domain or driver, {})[ident] = _VALUE[kind](value)
    capacity: dict[str, dict[str, Any]] = {}
    for name, entry in (device.get("capacity") or {}).items():
        domain, _, ident = name.rpartition("/")
        capacity.setdefault(domain or driver, {})[ident] = Quantity.parse(str(entry["value"]))

    def domains(by_domain: dict[str, dict[str, Any]]) -> celtypes.MapType:
        return celtypes.MapType(
            {
                celtypes.StringType(d): celtypes.MapType({celtypes.StringType(k): v for k, v in ids.items()})
                for d, ids in by_domain.items()
            }
        )

    return celtypes.MapType(
        {
            celtypes.StringType("driver"): celtypes.StringType(driver),
            celtypes.StringType("attributes"): domains(attributes),
            celtypes.StringType("capacity"): domains(capacity),
        }
    )


def bench_plain(
    kind: RunnerKind, expression: str, items: list[tuple[str, dict[str, Any]]]
) -> tuple[float, tuple[float, int]]:
    """(median compile ms, (per-device µs, matches)) for plain celpy on one runner."""
    env = plain_environment(kind)
    compile_ms = median_ms(functools.partial(plain_program, env, expression), 50)
    program = plain_program(env, expression)

    def evaluate(item: tuple[str, dict[str, Any]]) -> bool:
        return bool(program.evaluate({"device": plain_device(item[1], item[0])}))

    return compile_ms, per_device_us(evaluate, items)


NO_CACHES = "**no caches**: compile + convert for every evaluation"


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
        NO_CACHES: per_device_us(naive, items[:baseline_devices], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=10_000)
    parser.add_argument("--class-name", default="mig-20gi-40sm.migdra.io", help="a class of " + CLASS_FILE.name)
    parser.add_argument("--baseline-devices", type=int, default=300, help="devices for the slow baseline")
    parser.add_argument("--plain-devices", type=int, default=2000, help="devices for the plain celpy baseline")
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
    plain = {kind: bench_plain(kind, expression, items[: args.plain_devices]) for kind in RunnerKind}
    plain_label = "**plain celpy**: compiled once, device converted per evaluation"

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
        f"| {hit_us[RunnerKind.INTERPRETED]:.1f} µs |"
    )
    print(
        f"| plain celpy: `env.compile` + `env.program` (median of 50) | {plain[RunnerKind.COMPILED][0]:.2f} ms "
        f"| {plain[RunnerKind.INTERPRETED][0]:.2f} ms |\n"
    )
    compiled = results[RunnerKind.COMPILED]
    matches = compiled["activations built once and reused"][1]
    print(f"| per device, {len(items):,} devices ({matches:,} match) | compiled runner | interpreted runner |")
    print("|---|---:|---:|")
    for label in compiled:
        if label == NO_CACHES:
            cells = " | ".join(f"{plain[kind][1][0]:.1f} µs" for kind in RunnerKind)
            print(f"| {plain_label} ({min(args.plain_devices, len(items)):,} devices) | {cells} |")
        cells = " | ".join(f"{results[kind][label][0]:.1f} µs" for kind in RunnerKind)
        scope = f" ({args.baseline_devices} devices)" if label == NO_CACHES else ""
        print(f"| {label}{scope} | {cells} |")
    print(f"| converting one device (first time: cold parse caches) | {build_us:.1f} µs | |\n")

    print("| plain celpy ÷ migdra, per device | compiled runner | interpreted runner |")
    print("|---|---:|---:|")
    for label in ("activations built once and reused", "activation rebuilt for every evaluation"):
        ratios = " | ".join(f"{plain[kind][1][0] / results[kind][label][0]:.1f}x" for kind in RunnerKind)
        print(f"| migdra, {label} | {ratios} |")

    for label in compiled:
        counts = {results[kind][label][1] for kind in RunnerKind}
        if label != NO_CACHES and counts != {matches}:
            raise SystemExit(f"runners disagree on {label}: {counts}")
    subset = items[: args.plain_devices]
    expected = sum(1 for item in subset if compile_selector(expression).matches(item[1], driver=item[0]))
    for kind in RunnerKind:
        if plain[kind][1][1] != expected:
            raise SystemExit(f"plain celpy ({kind.value}) disagrees: {plain[kind][1][1]} matches, not {expected}")


if __name__ == "__main__":
    main()
