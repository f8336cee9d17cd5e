#!/usr/bin/env python3
"""Benchmark: one DeviceClass selector over the devices a few nodes publish, migdra beside plain celpy.

A ratio against a baseline only means something when both sides do the same work, so the two are
compared twice, like with like, in the same runs:

(a) **devices converted once beforehand**: migdra's cached activations (``DeviceActivation`` built
    once and reused) beside plain celpy evaluating with devices converted to celpy values once
    beforehand (a ``celtypes.MapType`` per device, reused);
(b) **device converted for every evaluation**: migdra building a ``DeviceActivation`` per evaluation
    beside plain celpy converting the device per evaluation.

Plain celpy is the straightforward use of the library: the selector compiled once with celpy's own
API (``celpy.Environment``, ``compile``, ``program`` with ``quantity`` and ``compareTo`` registered).
It lacks migdra's semantics (no unknown-domain map, no short-circuit, no cost budget), which only
flatters it.  Also shown, as information and not as a ratio: migdra through its ``ActivationCache``,
and with no caches at all (compiling the selector and converting the device for every evaluation).

Every run makes one pass over the same ``--devices`` devices per way on the interpreted runner and
``--passes`` passes on the compiled runner (whose passes are short enough for one preemption to show;
the run keeps their median), all interleaved in an order rotated from run to run; every pass counts
the matches, and every way must agree.  Compile times are per run too (the median of 50 compiles;
the first compile of a process in a fresh process per run).  Results go to ``docs/benchmarks.md``
("CEL selectors") through ``hack/bench/run_all.py``.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import celpy
import yaml
from benchlib import Report, add_common_arguments, check_runs, ratios, summary
from celpy import celtypes
from celpy.celparser import CELParser

import dra_driver
from dra_driver.devicemodel import example_slices
from dra_driver.quantity import Quantity
from dra_driver.tools.cel import (
    ActivationCache,
    CompiledSelector,
    DeviceActivation,
    RunnerKind,
    build_device_activation,
    compile_selector,
)
from dra_driver.tools.cel.environment import celpy_version
from dra_driver.tools.cel.functions import kube
from dra_driver.tools.cel.semver import Semver

CLASS_FILE = Path(__file__).resolve().parents[2] / "deviceclasses" / "examples" / "capabilities.yaml"
NODES = [
    (["H100-SXM5-80GB"] * 8, True),
    (["A100-SXM4-40GB"] * 8, True),
    (["B200"] * 8, True),
    (["H100-SXM5-80GB"] * 8, False),
]
KINDS = (RunnerKind.COMPILED, RunnerKind.INTERPRETED)
Item = tuple[str, dict[str, Any]]  # (driver, device) as a ResourceSlice publishes it

# The first compile of a process builds the Lark parser: measured in a fresh process per run, after
# the imports (which are start-up, measured by startup_bench.py), so the parser build is all it adds.
FIRST_COMPILE = """
import sys, time
import dra_driver.tools.cel.environment, dra_driver.tools.cel.program, dra_driver.tools.cel.device
from dra_driver.tools.cel import compile_selector
started = time.perf_counter()
compile_selector(sys.argv[1])
print((time.perf_counter() - started) * 1000)
"""


def selector_of(class_name: str) -> str:
    for body in yaml.safe_load_all(CLASS_FILE.read_text()):
        if body["metadata"]["name"] == class_name:
            expression: str = body["spec"]["selectors"][0]["cel"]["expression"]
            return expression
    raise SystemExit(f"no DeviceClass {class_name} in {CLASS_FILE}")


def devices(count: int) -> list[Item]:
    """(driver, device) pairs from as many example nodes as it takes; every dict is its own object."""
    found: list[Item] = []
    node = 0
    while len(found) < count:
        gpus, mig_enabled = NODES[node % len(NODES)]
        for body in example_slices(gpus, mig_enabled=mig_enabled):
            found += [(body["spec"]["driver"], device) for device in body["spec"].get("devices") or []]
        node += 1
    return found[:count]


def pass_us(action: Callable[[Any], Any], items: Sequence[Any]) -> tuple[float, int]:
    """One pass of ``action`` over ``items``: microseconds per item, and how many it matched."""
    gc.collect()
    started = time.perf_counter()
    matched = sum(1 for item in items if action(item))
    return (time.perf_counter() - started) / len(items) * 1e6, matched


def median_ms(action: Callable[[], Any], repeat: int) -> float:
    """The median of ``repeat`` timings of ``action``, in milliseconds (one run's figure)."""
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def fresh_compile(expression: str, kind: RunnerKind) -> Callable[[], CompiledSelector]:
    """Compiling ``expression`` for ``kind``'s runner without the cache, each call."""
    return lambda: CompiledSelector(expression, runner=kind)


def cached_compile(expression: str, kind: RunnerKind) -> Callable[[], CompiledSelector]:
    """``compile_selector`` of ``expression`` for ``kind``'s runner (a cache hit once it has run)."""
    return lambda: compile_selector(expression, runner=kind)


def first_compile_ms(expression: str) -> float:
    """The first ``compile_selector`` of a fresh process (it builds migdra's Lark parser)."""
    done = subprocess.run(
        [sys.executable, "-c", FIRST_COMPILE, expression], capture_output=True, text=True, check=True, timeout=120
    )
    return float(done.stdout.strip())


# -- plain celpy -----------------------------------------------------------------------------------

# The Kubernetes functions the selectors call, registered by name as celpy's API expects.  celpy's
# CompiledRunner names them in its generated code as ``dra_driver.tools.cel.functions.kube.<name>`` and
# looks that up in ``celpy.evaluation``'s globals.
PLAIN_FUNCTIONS = {"quantity": kube.quantity, "compareTo": kube.compare_to}
_VALUE: dict[str, Callable[[Any], Any]] = {
    "int": celtypes.IntType,
    "bool": celtypes.BoolType,
    "string": celtypes.StringType,
    "version": Semver.parse,
}


def plain_environment(kind: RunnerKind) -> Any:
    """celpy's Environment for one runner (a fresh parser: celpy's is fixed by the first runner kind).

    celpy keeps one process-wide parser, so after this only ``kind``'s environment can compile;
    programs already compiled for the other runner keep working (evaluation does not parse).
    """
    CELParser.CEL_PARSER = None
    evaluation_globals: Any = celpy.evaluation
    evaluation_globals.dra_driver = dra_driver
    return celpy.Environment(
        runner_class=celpy.CompiledRunner if kind is RunnerKind.COMPILED else celpy.InterpretedRunner
    )


def plain_program(env: Any, expression: str) -> Any:
    """One compile with celpy's own API."""
    return env.program(env.compile(expression), functions=PLAIN_FUNCTIONS)


def plain_compile(env: Any, expression: str) -> Callable[[], Any]:
    """``plain_program(env, expression)``, each call."""
    return lambda: plain_program(env, expression)


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


# -- the ways of evaluating, per runner ------------------------------------------------------------

MIGDRA_ONCE = "migdra: activation built once and reused"
PLAIN_ONCE = "plain celpy: device converted once, celpy values reused"
MIGDRA_CACHE = "migdra: device dicts through `ActivationCache` (every lookup a hit)"
MIGDRA_EACH = "migdra: activation built for every evaluation"
PLAIN_EACH = "plain celpy: device converted for every evaluation"
NO_CACHES = "migdra with no caches: compile + convert for every evaluation"
WAYS = (MIGDRA_ONCE, PLAIN_ONCE, MIGDRA_CACHE, MIGDRA_EACH, PLAIN_EACH)


class Runner:
    """Every way of evaluating the selector on one celpy runner, over the same devices."""

    def __init__(
        self,
        kind: RunnerKind,
        expression: str,
        items: list[Item],
        prepared: tuple[list[DeviceActivation], list[dict[str, Any]], ActivationCache],
    ) -> None:
        self.kind = kind
        self.expression = expression
        self.items = items
        program = compile_selector(expression, runner=kind)
        plain = plain_program(plain_environment(kind), expression)
        activations, contexts, cache = prepared
        # Name -> one pass over all devices, returning (µs per device, matches).
        self.ways: dict[str, Callable[[], tuple[float, int]]] = {
            MIGDRA_ONCE: lambda: pass_us(program.matches, activations),
            PLAIN_ONCE: lambda: pass_us(lambda context: bool(plain.evaluate(context)), contexts),
            MIGDRA_CACHE: lambda: pass_us(
                lambda item: program.matches(item[1], driver=item[0], activations=cache), items
            ),
            MIGDRA_EACH: lambda: pass_us(lambda item: program.matches(DeviceActivation(item[1], item[0])), items),
            PLAIN_EACH: lambda: pass_us(
                lambda item: bool(plain.evaluate({"device": plain_device(item[1], item[0])})), items
            ),
        }

    def no_caches(self, count: int) -> tuple[float, int]:
        """One pass over the first ``count`` devices, compiling the selector for every evaluation."""
        kind, expression = self.kind, self.expression
        return pass_us(
            lambda item: CompiledSelector(expression, runner=kind).matches(DeviceActivation(item[1], item[0])),
            self.items[:count],
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--devices", type=int, default=2000, help="devices per pass (every way, both runners)")
    parser.add_argument("--class-name", default="mig-20gi-40sm.migdra.io", help="a class of " + CLASS_FILE.name)
    parser.add_argument("--no-caches-devices", type=int, default=200, help="devices for the no-caches pass")
    parser.add_argument(
        "--passes", type=int, default=3, help="passes per way and run on the compiled runner (median kept)"
    )
    args = parser.parse_args()
    check_runs(parser, args)

    expression = selector_of(args.class_name)
    items = devices(args.devices)
    no_caches_count = min(args.no_caches_devices, len(items))
    params = {
        "devices": len(items),
        "no_caches_devices": no_caches_count,
        "compiled_runner_passes_per_run": args.passes,
        "class": args.class_name,
        "selector": " ".join(expression.split()),
        "celpy": celpy_version(),
    }
    report = Report("cel", args, params)
    with report:
        # Converted once, before any run, by each side in its own way; kept out of the collector's way
        # (``gc.freeze``) as a long-lived scheduler's would be.
        activations = [build_device_activation(device, driver) for driver, device in items]
        contexts = [{"device": plain_device(device, driver)} for driver, device in items]
        cache = ActivationCache(maxsize=len(items) + 1)
        program = compile_selector(expression)
        for driver, device in items:  # fills the cache; its activations are shared by both runners
            program.matches(device, driver=driver, activations=cache)
        expected = sum(1 for activation in activations if program.matches(activation))
        expected_no_caches = sum(1 for activation in activations[:no_caches_count] if program.matches(activation))
        runners = {kind: Runner(kind, expression, items, (activations, contexts, cache)) for kind in KINDS}
        gc.collect()
        gc.freeze()

        per_device: dict[tuple[RunnerKind, str], list[float]] = {}
        conversions: dict[str, list[float]] = {"migdra": [], "plain": []}
        compile_times: dict[str, list[float]] = {}

        def record(key: str, value: float) -> None:
            compile_times.setdefault(key, []).append(value)

        for run in range(args.runs):
            record("first", first_compile_ms(expression))
            for kind in KINDS:
                record(f"compile {kind.value}", median_ms(fresh_compile(expression, kind), 50))
                record(f"hit {kind.value}", median_ms(cached_compile(expression, kind), 200) * 1000)
                env = plain_environment(kind)
                record(f"plain {kind.value}", median_ms(plain_compile(env, expression), 50))
            # Every way on both runners, in an order rotated from run to run, so that load that
            # comes and goes does not always fall on the same one.  A compiled-runner pass lasts a
            # tenth of a second, where one preemption shows: it makes ``--passes`` passes, interleaved,
            # and the run keeps their median.
            plan = [(RunnerKind.COMPILED, way) for _ in range(args.passes) for way in WAYS]
            plan += [(RunnerKind.INTERPRETED, way) for way in WAYS]
            shift = run * 3 % len(plan)
            passes: dict[tuple[RunnerKind, str], list[float]] = {}
            for kind, way in plan[shift:] + plan[:shift]:
                micros, matched = runners[kind].ways[way]()
                if matched != expected:
                    raise SystemExit(f"{way} ({kind.value}) matched {matched} devices, not {expected}")
                passes.setdefault((kind, way), []).append(micros)
            for key, values in passes.items():
                per_device.setdefault(key, []).append(statistics.median(values))
            for kind in KINDS:
                micros, matched = runners[kind].no_caches(no_caches_count)
                if matched != expected_no_caches:
                    raise SystemExit(f"no caches ({kind.value}) matched {matched}, not {expected_no_caches}")
                per_device.setdefault((kind, NO_CACHES), []).append(micros)
            conversions["migdra"].append(pass_us(lambda item: build_device_activation(item[1], item[0]), items)[0])
            conversions["plain"].append(pass_us(lambda item: plain_device(item[1], item[0]), items)[0])
        gc.unfreeze()

    compile_table = report.table(
        "compile", "Compiling the selector", ["compile", "compiled runner", "interpreted runner"]
    )
    compile_table.add(
        "first compile in a fresh process (builds the Lark parser)", summary(compile_times["first"], "ms", 0), ""
    )
    compile_table.add(
        "migdra: compile (median of 50 per run)",
        *(summary(compile_times[f"compile {kind.value}"], "ms", 2) for kind in KINDS),
    )
    compile_table.add(
        "migdra: `compile_selector` cache hit (median of 200 per run)",
        *(summary(compile_times[f"hit {kind.value}"], "µs", 1) for kind in KINDS),
    )
    compile_table.add(
        "plain celpy: `env.compile` + `env.program` (median of 50 per run)",
        *(summary(compile_times[f"plain {kind.value}"], "ms", 2) for kind in KINDS),
    )

    table = report.table(
        "per_device",
        f"Per device, {len(items):,} devices ({expected:,} match)",
        ["per device", "compiled runner", "interpreted runner"],
    )
    for way in WAYS:
        table.add(way, *(summary(per_device[(kind, way)], "µs", 1) for kind in KINDS))
    table.add(
        f"{NO_CACHES} (first {no_caches_count} devices)",
        *(summary(per_device[(kind, NO_CACHES)], "µs", 0) for kind in KINDS),
    )
    table.add("converting one device, no evaluation: migdra", summary(conversions["migdra"], "µs", 1), "")
    table.add("converting one device, no evaluation: plain celpy", summary(conversions["plain"], "µs", 1), "")

    ratio_table = report.table(
        "ratios",
        "plain celpy ÷ migdra per device, like with like (per-run ratios, same runs)",
        ["both sides", "compiled runner", "interpreted runner"],
    )
    ratio_table.add(
        "(a) devices converted once beforehand",
        *(summary(ratios(per_device[(kind, PLAIN_ONCE)], per_device[(kind, MIGDRA_ONCE)]), "x", 1) for kind in KINDS),
    )
    ratio_table.add(
        "(b) device converted for every evaluation",
        *(summary(ratios(per_device[(kind, PLAIN_EACH)], per_device[(kind, MIGDRA_EACH)]), "x", 1) for kind in KINDS),
    )
    report.note(
        "plain celpy is celpy's own API (Environment, compile, program) with devices as celtypes maps; "
        "(a) compares migdra's reused activations with plain celpy's reused celpy values, (b) both converting "
        "every device for every evaluation."
    )
    report.finish()


if __name__ == "__main__":
    main()
