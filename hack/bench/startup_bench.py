#!/usr/bin/env python3
"""Benchmark: how long `migdra` takes to start and answer, as a user runs it.

Times, as subprocesses of the same interpreter, `migdra --help`, `migdra gpus --sim-gpus
H100-SXM5-80GB:8` and `migdra slices --sim-gpus H100-SXM5-80GB:8 -o yaml`, side by side with the
baseline `python -c pass` (the interpreter's own start-up, which no change to migdra can remove).
Runs are interleaved -- each round runs every command once, in a rotated order -- so a burst of
load on the machine falls on all of them alike.  Reports the median wall time with p10/p90, the
median CPU time (user + system, which load inflates far less than wall time), and the machine's
load average before and after.

By default the children may cache bytecode, in a temporary directory (``PYTHONPYCACHEPREFIX``)
warmed by one uncounted round: an installed migdra has its ``.pyc`` files.  ``--no-bytecode-cache``
instead compiles every module from source on each run (what ``PYTHONDONTWRITEBYTECODE=1`` does to a
source checkout).  ``--busy-loops N`` starts N ``while True: pass`` processes for the duration, to
measure a loaded node; they are always killed afterwards.

Prints Markdown; docs/benchmarks.md keeps the last run.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

SIM_GPUS = "H100-SXM5-80GB:8"


@dataclass
class Samples:
    """Wall and CPU seconds of every counted run of one command."""

    label: str
    argv: list[str]
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


def _migdra() -> list[str]:
    """The console script, run by this interpreter explicitly, so every command starts the same Python."""
    script = Path(sys.executable).parent / "migdra"
    if not script.exists():
        raise SystemExit(f"no migdra script beside {sys.executable}: `pip install -e .` first")
    return [sys.executable, str(script)]


def _commands() -> list[Samples]:
    migdra = _migdra()
    return [
        Samples("baseline: `python -c pass`", [sys.executable, "-c", "pass"]),
        Samples("`migdra --help`", [*migdra, "--help"]),
        Samples(f"`migdra gpus --sim-gpus {SIM_GPUS}`", [*migdra, "gpus", "--sim-gpus", SIM_GPUS]),
        Samples(
            f"`migdra slices --sim-gpus {SIM_GPUS} -o yaml`", [*migdra, "slices", "--sim-gpus", SIM_GPUS, "-o", "yaml"]
        ),
    ]


def _child_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run_once(samples: Samples, env: dict[str, str], count: bool) -> None:
    cpu_before = _child_cpu_seconds()
    started = time.perf_counter()
    result = subprocess.run(samples.argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    wall = time.perf_counter() - started
    cpu = _child_cpu_seconds() - cpu_before
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(samples.argv)} exited {result.returncode}:\n{result.stderr.decode()}")
    if count:
        samples.wall.append(wall)
        samples.cpu.append(cpu)


def _child_env(pycache: Path | None) -> dict[str, str]:
    """This environment without migdra's settings (the flags alone choose the node), bytecode as asked."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIGDRA_")}
    if pycache is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


@contextmanager
def _busy_loops(count: int) -> Iterator[None]:
    """``count`` processes spinning on a CPU each, for as long as the block runs; always stopped."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
        for loop in loops:
            loop.wait()


def _measure(commands: Sequence[Samples], rounds: int, env: dict[str, str]) -> None:
    for command in commands:  # warm-up: page cache, and the bytecode cache when there is one
        _run_once(command, env, count=False)
    for round_index in range(rounds):
        shift = round_index % len(commands)
        for command in [*commands[shift:], *commands[:shift]]:
            _run_once(command, env, count=True)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def _report(commands: Sequence[Samples], args: argparse.Namespace, load_before: str, load_after: str) -> None:
    bytecode = "compiled from source every run" if args.no_bytecode_cache else "bytecode cached (warmed, not counted)"
    print(
        f"{datetime.date.today().isoformat()}, {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; {args.rounds} interleaved rounds; {bytecode}; "
        f"{args.busy_loops} busy loop(s); load average (1/5/15 min) {load_before} before, {load_after} after"
    )
    print()
    print("| command | wall median ms | p10 | p90 | minus baseline (median) | CPU median ms |")
    print("|---|---:|---:|---:|---:|---:|")
    baseline = statistics.median(commands[0].wall)
    for command in commands:
        deciles = statistics.quantiles(command.wall, n=10, method="inclusive")
        median = statistics.median(command.wall)
        extra = "" if command is commands[0] else f"+{_ms(median - baseline)}"
        print(
            f"| {command.label} | {_ms(median)} | {_ms(deciles[0])} | {_ms(deciles[-1])} | {extra} | "
            f"{_ms(statistics.median(command.cpu))} |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="counted runs of each command")
    parser.add_argument("--busy-loops", type=int, default=0, help="CPU-spinning processes to run meanwhile")
    parser.add_argument("--no-bytecode-cache", action="store_true", help="compile migdra from source every run")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (for p10/p90)")
    commands = _commands()
    with tempfile.TemporaryDirectory(prefix="migdra-startup-pycache-") as pycache, _busy_loops(args.busy_loops):
        env = _child_env(None if args.no_bytecode_cache else Path(pycache))
        load_before = _load()
        _measure(commands, args.rounds, env)
        load_after = _load()
    _report(commands, args, load_before, load_after)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
