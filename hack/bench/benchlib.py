"""What every benchmark in ``hack/bench`` shares: repeated runs, their summaries, the machine, the report.

A figure a reader cannot reproduce or whose spread is hidden misleads, so every benchmark here

- repeats its measurement (``--runs``, at least 5) and reports the **median with min and max** of
  the runs, never one lucky run;
- measures migdra and its baseline **side by side in the same run**, and computes a ratio per run
  before summarizing it (the median of ratios, not the ratio of two medians taken at other moments);
- records **the machine**: date, commit, CPU model and count, Python, the load average before and
  after and sampled every second during the run, and how many ``--busy-loops`` it ran meanwhile;
- writes one JSON report (``--json PATH``) whose tables ``hack/bench/render.py`` turns into the
  tables of ``docs/benchmarks.md`` (``make bench`` runs them all; see ``hack/bench/run_all.py``).

A report is ``{"schema", "bench", "params", "machine", "tables": [{"id", "title", "columns",
"rows"}]}``; a cell is text or a summary ``{"median", "min", "max", "n", "unit", "digits"}``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SCHEMA = 1
MIN_RUNS = 5
REPO = Path(__file__).resolve().parents[2]

Cell = str | dict[str, Any]


def summary(samples: Sequence[float], unit: str, digits: int = 1) -> dict[str, Any]:
    """Median, min and max of ``samples`` (already in ``unit``), and how many there were."""
    if not samples:
        raise ValueError("a summary needs at least one sample")
    return {
        "median": statistics.median(samples),
        "min": min(samples),
        "max": max(samples),
        "n": len(samples),
        "unit": unit,
        "digits": digits,
    }


def percentile(samples: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` 0.99 = p99) of one run's samples."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Per-run ratios of two measurements taken side by side in the same runs."""
    if len(numerators) != len(denominators):
        raise ValueError("ratios need one denominator per numerator (the same runs)")
    return [n / d for n, d in zip(numerators, denominators, strict=True)]


def repeat(runs: int, measure: Callable[[], Mapping[str, float]]) -> dict[str, list[float]]:
    """Call ``measure`` ``runs`` times; each call returns named values of one run: collect them by name."""
    collected: dict[str, list[float]] = {}
    for _ in range(runs):
        for name, value in measure().items():
            collected.setdefault(name, []).append(value)
    return collected


def format_cell(cell: Cell) -> str:
    """``12.0 ms (11.2-14.0)``: the median, then the spread of the runs, in the cell's unit."""
    if isinstance(cell, str):
        return cell
    digits = int(cell.get("digits", 1))
    unit = str(cell.get("unit", ""))

    def number(value: float) -> str:
        return f"{value:,.{digits}f}"

    glue = "" if unit in ("x", "%", "") else " "
    text = f"{number(cell['median'])}{glue}{unit}"
    if cell.get("n", 1) > 1:
        text += f" ({number(cell['min'])}-{number(cell['max'])})"
    return text


class Table:
    """One table of a report; ``id`` must be unique across all benchmarks (``<bench>.<name>``)."""

    def __init__(self, table_id: str, title: str, columns: Sequence[str]) -> None:
        self.id = table_id
        self.title = title
        self.columns = list(columns)
        self.rows: list[list[Cell]] = []

    def add(self, *cells: Cell) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"table {self.id}: {len(cells)} cells for {len(self.columns)} columns")
        self.rows.append(list(cells))

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "columns": self.columns, "rows": self.rows}

    def markdown(self) -> str:
        if self.columns and self.columns[0] == CHART:
            return chart_markdown(self)
        header = "| " + " | ".join(self.columns) + " |"
        rule = "|" + "|".join(["---"] + ["---:"] * (len(self.columns) - 1)) + "|"
        body = ["| " + " | ".join(format_cell(cell) for cell in row) + " |" for row in self.rows]
        return "\n".join([header, rule, *body])


CHART = "chart: x"
"""First column of a table that renders as a line chart: one row per x value, one column per line, the
cells numbers or summaries (their medians are plotted)."""


def chart_markdown(table: Table) -> str:
    """A Mermaid ``xychart-beta`` line chart (GitHub renders it): x categories from the first column, one
    line per further column, in the order of the title's legend (Mermaid draws no legend of its own)."""

    def value(cell: Cell) -> float:
        return float(cell["median"]) if isinstance(cell, dict) else float(cell)

    categories = ", ".join(f'"{row[0]}"' for row in table.rows)
    top = max((value(cell) for row in table.rows for cell in row[1:]), default=1.0)
    legend = "; ".join(f"line {n}: {name}" for n, name in enumerate(table.columns[1:], 1))
    lines = [
        "```mermaid",
        "xychart-beta",
        f'    title "{table.title.split(" (")[0]}"',
        f"    x-axis [{categories}]",
        f'    y-axis "pods/s" 0 --> {top * 1.1:.0f}',
    ]
    for column in range(1, len(table.columns)):
        points = ", ".join(f"{value(row[column]):.1f}" for row in table.rows)
        lines.append(f"    line [{points}]")
    lines += ["```", "", f"_{legend}_"]
    return "\n".join(lines)


class LoadSampler:
    """The 1-minute load average, read every second in a thread while a benchmark runs."""

    def __init__(self, interval: float = 1.0) -> None:
        self.samples: list[float] = []
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load-sampler", daemon=True)

    def _run(self) -> None:
        while True:
            self.samples.append(os.getloadavg()[0])
            if self._stop.wait(self._interval):
                return

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


def _git(*argv: str) -> str:
    try:
        done = subprocess.run(["git", *argv], cwd=REPO, capture_output=True, text=True, check=False, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _load_text(values: tuple[float, float, float]) -> str:
    return " / ".join(f"{v:.2f}" for v in values)


@contextmanager
def busy_loops(count: int) -> Iterator[None]:
    """``count`` processes spinning on a CPU each while the block runs (a loaded node); always stopped."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
        for loop in loops:
            loop.wait()


def stop_process(process: subprocess.Popen[Any], timeout: float = 30) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``timeout`` seconds; always reaped."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextmanager
def api_server_process(root: Path) -> Iterator[tuple[str, Path]]:
    """kube-apiserver on its own etcd (``make kube``'s oldest build), processes of their own as a cluster's
    are (serving costs the measured process no CPU): its URL and an admin kubeconfig for it under ``root``."""
    from migdra_devcluster.upstream.binaries import built_versions, find_binaries  # noqa: PLC0415
    from migdra_devcluster.upstream.standalone import standalone_apiserver  # noqa: PLC0415

    versions = built_versions()
    if not versions:
        raise SystemExit("this benchmark runs kube-apiserver: build it with `make kube` first")
    with standalone_apiserver(root / "kube-apiserver", find_binaries(None, versions[0])) as server:
        yield server.url, server.kubeconfig_path


def add_common_arguments(parser: argparse.ArgumentParser, default_runs: int = MIN_RUNS) -> None:
    parser.add_argument("--runs", type=int, default=default_runs, help=f"repetitions (at least {MIN_RUNS})")
    parser.add_argument("--json", type=Path, help="write the report as JSON here (for hack/bench/render.py)")
    parser.add_argument("--busy-loops", type=int, default=0, help="CPU-spinning processes to run meanwhile")


def check_runs(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.runs < MIN_RUNS and not getattr(args, "smoke", False):
        parser.error(f"--runs must be at least {MIN_RUNS}: a figure is a median with its spread")


class Report:
    """A benchmark's run: its parameters, the machine while it ran, and its tables.

    Use as a context manager around the measurement: it starts ``--busy-loops`` and the load sampler
    on entry and records the load before and after.
    """

    def __init__(self, bench: str, args: argparse.Namespace, params: Mapping[str, Any] | None = None) -> None:
        # A loaded run is its own report (and its tables their own ids), shown beside the quiet one.
        self.bench = f"{bench}-busy" if args.busy_loops else bench
        self.runs: int = args.runs
        self.busy_loops: int = args.busy_loops
        self.json_path: Path | None = args.json
        self.params = {"runs": self.runs, "busy_loops": self.busy_loops, **(params or {})}
        self.tables: list[Table] = []
        self.notes: list[str] = []
        self._machine: dict[str, Any] = {}
        self._sampler = LoadSampler()
        self._loops: Any = None

    def __enter__(self) -> Report:
        commit = _git("rev-parse", "--short", "HEAD")
        # The results and the doc they are rendered into are this run's output, not what it measured.
        outputs = (":!docs/benchmarks.md", ":!docs/benchmarks.json")
        dirty = bool(_git("status", "--porcelain", "--untracked-files=no", "--", ".", *outputs))
        self._machine = {
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": commit + ("+changes" if dirty else ""),
            "cpu": _cpu_model(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": f"{platform.system()} {platform.machine()}",
            "load_before": _load_text(os.getloadavg()),
            "busy_loops": self.busy_loops,
        }
        self._loops = busy_loops(self.busy_loops)
        self._loops.__enter__()
        self._sampler.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._sampler.__exit__(*exc_info)
        self._loops.__exit__(*exc_info)
        self._machine["load_after"] = _load_text(os.getloadavg())
        samples = self._sampler.samples or [os.getloadavg()[0]]
        self._machine["load_1min_during"] = {"median": statistics.median(samples), "max": max(samples)}

    def table(self, name: str, title: str, columns: Sequence[str]) -> Table:
        table = Table(f"{self.bench}.{name}", title, columns)
        self.tables.append(table)
        return table

    def note(self, text: str) -> None:
        """A sentence the rendered doc shows under the tables (e.g. what a baseline is)."""
        self.notes.append(text)

    def as_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "bench": self.bench,
            "params": self.params,
            "machine": self._machine,
            "notes": self.notes,
            "tables": [table.as_json() for table in self.tables],
        }

    def finish(self) -> None:
        """Print the tables as Markdown and write the JSON report if ``--json`` was given."""
        print(describe_machine(self.as_json()))
        for table in self.tables:
            print()
            print(f"{table.title}:")
            print()
            print(table.markdown())
        if self.json_path is not None:
            self.json_path.parent.mkdir(parents=True, exist_ok=True)
            self.json_path.write_text(json.dumps(self.as_json(), indent=1) + "\n", encoding="utf-8")


def describe_machine(report: Mapping[str, Any]) -> str:
    """One line: when, where and under which load a report was measured."""
    m = report["machine"]
    during = m.get("load_1min_during", {})
    loops = m.get("busy_loops", 0)
    busy = f", {loops} busy loop(s) running" if loops else ""
    return (
        f"Measured {m['date']} at commit {m['commit']} on {m['cpus']} CPUs ({m['cpu']}), {m['platform']}, "
        f"Python {m['python']}; {report['params']['runs']} runs{busy}; load average (1/5/15 min) "
        f"{m['load_before']} before, {m.get('load_after', '?')} after, 1-min median "
        f"{during.get('median', 0):.2f} (max {during.get('max', 0):.2f}) during."
    )
