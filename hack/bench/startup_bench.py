#!/usr/bin/env python3
"""Benchmark: how long `migdra` takes to start and answer, as a user runs it.

Times, as subprocesses of the same interpreter, `migdra --help`, `migdra gpus --sim-gpus
H100-SXM5-80GB:8` and `migdra slices --sim-gpus H100-SXM5-80GB:8 -o yaml`, side by side with the
baseline `python -c pass` (the interpreter's own start-up, which no change to migdra can remove).
Every run is ``--rounds-per-run`` interleaved rounds -- each round runs every command once, in an
order rotated from round to round -- so a burst of load falls on all of them alike; a run's figure
for a command is the median of its rounds, and "minus baseline" is taken per run (the command's
median minus the baseline's median of the same run) before it is summarized.  Wall time and CPU time
(user + system of the child, which load inflates far less than wall time) are both reported.

By default the children may cache bytecode, in a temporary directory (``PYTHONPYCACHEPREFIX``)
warmed by one uncounted round: an installed migdra has its ``.pyc`` files.  ``--no-bytecode-cache``
instead compiles every module from source on each run (what ``PYTHONDONTWRITEBYTECODE=1`` does to a
source checkout).  ``--busy-loops N`` (from benchlib) keeps N CPUs spinning meanwhile: a loaded node.

Results go to ``docs/benchmarks.md`` ("Start-up of the `migdra` command") through ``run_all.py``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from benchlib import Report, add_common_arguments, check_runs, summary

SIM_GPUS = "H100-SXM5-80GB:8"


@dataclass
class Samples:
    """Wall and CPU seconds of one command: every round of the current run, and each run's median."""

    label: str
    argv: list[str]
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    run_wall: list[float] = field(default_factory=list)
    run_cpu: list[float] = field(default_factory=list)

    def close_run(self) -> None:
        """Keep the medians of the run's rounds and start the next run."""
        self.run_wall.append(statistics.median(self.wall))
        self.run_cpu.append(statistics.median(self.cpu))
        self.wall.clear()
        self.cpu.clear()


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


def _measure(commands: Sequence[Samples], runs: int, rounds: int, env: dict[str, str]) -> None:
    for command in commands:  # warm-up: page cache, and the bytecode cache when there is one
        _run_once(command, env, count=False)
    for run_index in range(runs):
        for round_index in range(rounds):
            shift = (run_index * rounds + round_index) % len(commands)
            for command in [*commands[shift:], *commands[:shift]]:
                _run_once(command, env, count=True)
        for command in commands:
            command.close_run()


def _minus(values: Sequence[float], baseline: Sequence[float]) -> list[float]:
    """Per-run differences in milliseconds (the same runs)."""
    return [(value - base) * 1000 for value, base in zip(values, baseline, strict=True)]


def _ms(values: Sequence[float]) -> list[float]:
    return [value * 1000 for value in values]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--rounds-per-run", type=int, default=3, help="interleaved rounds per run (median kept)")
    parser.add_argument("--no-bytecode-cache", action="store_true", help="compile migdra from source every run")
    args = parser.parse_args()
    check_runs(parser, args)
    if args.rounds_per_run < 1:
        parser.error("--rounds-per-run must be at least 1")
    commands = _commands()
    bytecode = "compiled from source every run" if args.no_bytecode_cache else "bytecode cached (warmed, not counted)"
    report = Report("startup", args, {"rounds_per_run": args.rounds_per_run, "bytecode": bytecode})
    with tempfile.TemporaryDirectory(prefix="migdra-startup-pycache-") as pycache, report:
        env = _child_env(None if args.no_bytecode_cache else Path(pycache))
        _measure(commands, args.runs, args.rounds_per_run, env)

    baseline = commands[0]
    loaded = f", {args.busy_loops} CPU(s) kept busy" if args.busy_loops else ""
    table = report.table(
        "commands",
        f"Start-up, interleaved rounds per run: {args.rounds_per_run}{loaded}; {bytecode}",
        ["command", "wall", "wall minus baseline", "CPU", "CPU minus baseline"],
    )
    for command in commands:
        is_baseline = command is baseline
        table.add(
            command.label,
            summary(_ms(command.run_wall), "ms", 0),
            "" if is_baseline else summary(_minus(command.run_wall, baseline.run_wall), "ms", 0),
            summary(_ms(command.run_cpu), "ms", 0),
            "" if is_baseline else summary(_minus(command.run_cpu, baseline.run_cpu), "ms", 0),
        )
    report.note("The baseline is `python -c pass`, the interpreter's own start-up; minus baseline is taken per run.")
    report.finish()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
