#!/usr/bin/env python3
"""Placement quality: every policy against the repacking oracle (``migdra bench placement``), for the doc.

Runs :func:`dra_driver.tools.packing.bench.run_bench` -- the same code as ``migdra bench placement`` -- and
turns its JSON into the tables of docs/benchmarks.md and docs/placement.md, the full JSON into
``docs/placement-bench.json`` (every metric, every run label, for anyone to check), and a plot into
``docs/img/placement.png`` (needs matplotlib: ``pip install -e '.[bench]'``).

Unlike the speed benchmarks, the numbers are a deterministic function of the seeds: the seeds are the
repetitions (``--runs`` is accepted for ``make bench`` and recorded, not used), and the load of the
machine changes only how long it takes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchlib import REPO, Report, add_common_arguments

from dra_driver.deviceclasses import DEVICECLASS_DIR, deviceclass_documents
from dra_driver.devicemodel.policy import DEFAULT_POLICY
from dra_driver.devicemodel.vocabulary import DEFAULT_DRIVER_NAME
from dra_driver.tools.packing.bench import COMPARED_POLICIES, ORACLE, BenchConfig, run_bench

FULL_JSON = REPO / "docs" / "placement-bench.json"
PLOT = REPO / "docs" / "img" / "placement.png"


def _pct(value: float) -> str:
    return f"{value * 100:.1f}"


def _cell(run: dict[str, Any], metric: str, ci: str) -> str:
    low, high = run[ci]
    return f"{_pct(run[metric])} ({_pct(low)}-{_pct(high)})"


def _label(policy: str, order: str) -> str:
    return policy if order == "1.36" else f"{policy}@1.35"


def add_tables(report: Report, result: dict[str, Any]) -> None:
    params = result["params"]
    for order in params["orders"]:
        suffix = order.replace(".", "")
        table = report.table(
            f"acceptance-{suffix}",
            f"Acceptance, % of arrivals (95 % CI), allocator order {order}; fill-*: % of memory slices in use at "
            "the first rejected claim",
            ["workload", ORACLE, *params["policies"], "default ÷ oracle", "default - name-order"],
        )
        for name, runs in result["workloads"].items():
            fill = params["workloads"][name]["fill"]
            metric, ci = ("utilisation", "utilisation_ci95") if fill else ("acceptance", "ci95")
            cells = [name, _cell(runs[ORACLE], metric, ci)]
            cells += [_cell(runs[_label(p, order)], metric, ci) for p in params["policies"]]
            default = runs[_label(DEFAULT_POLICY, order)]
            baseline = runs[_label("name-order", order)]
            cells.append(f"{default['of_oracle'] * 100:.1f} %")
            cells.append(f"{(default[metric] - baseline[metric]) * 100:+.1f} pts")
            table.add(*cells)
        sized = report.table(
            f"slices-{suffix}",
            f"Size-weighted acceptance, % of the memory slices asked for (95 % CI), allocator order {order}; "
            "7g: % of the time a 7g could have been placed",
            ["workload", ORACLE, *params["policies"], "7g: oracle / default / name-order", "slice writes per alloc."],
        )
        for name, runs in result["workloads"].items():
            if params["workloads"][name]["fill"]:
                continue
            cells = [name, _cell(runs[ORACLE], "slice_acceptance", "slice_acceptance_ci95")]
            cells += [
                _cell(runs[_label(p, order)], "slice_acceptance", "slice_acceptance_ci95") for p in params["policies"]
            ]
            seven = [runs[ORACLE]["seven_g"], runs[_label(DEFAULT_POLICY, order)]["seven_g"]]
            seven.append(runs[_label("name-order", order)]["seven_g"])
            cells.append(" / ".join(_pct(v) for v in seven))
            cells.append(f"{runs[_label(DEFAULT_POLICY, order)]['writes_per_allocation']:.1f} ({DEFAULT_POLICY})")
            sized.add(*cells)


def plot(result: dict[str, Any], path: Path) -> bool:
    """Per allocator order, bars per workload: each policy's size-weighted acceptance as a share of the
    oracle's (fill-*: utilisation at the first reject as a share of the oracle's)."""
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        print("placement: matplotlib is not installed (pip install -e '.[bench]'): no plot written")
        return False
    names = list(result["workloads"])
    params = result["params"]
    policies = params["policies"]
    orders = params["orders"]
    figure, axes = plt.subplots(len(orders), 1, figsize=(12, 4.2 * len(orders)), squeeze=False)
    width = 0.8 / len(policies)
    for axis, order in zip((row[0] for row in axes), orders, strict=True):
        for index, policy in enumerate(policies):
            values = []
            for name in names:
                run = result["workloads"][name][_label(policy, order)]
                share = run["of_oracle"] if params["workloads"][name]["fill"] else run["slices_of_oracle"]
                values.append(share * 100)
            axis.bar([i + index * width for i in range(len(names))], values, width, label=policy)
        axis.set_xticks([i + 0.4 - width / 2 for i in range(len(names))])
        axis.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
        axis.set_ylabel("% of the repacking oracle")
        axis.set_ylim(50, 105)
        axis.axhline(97, color="grey", linestyle="--", linewidth=0.8)
        axis.legend(fontsize=8, ncol=len(policies), loc="lower left")
        axis.set_title(
            f"allocator order {order}: memory slices placed (fill-*: filled at the first reject), "
            f"mean of {params['seeds']} seeds",
            fontsize=10,
        )
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--arrivals", type=int, default=300)
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--jobs", type=int, default=0)
    parser.add_argument("--workload", action="append", default=[])
    parser.add_argument("--full-json", type=Path, default=FULL_JSON)
    parser.add_argument("--plot", type=Path, default=PLOT)
    parser.add_argument("--plot-only", type=Path, metavar="FULL_JSON", help="only draw the plot of earlier results")
    args = parser.parse_args()
    if args.plot_only is not None:
        return 0 if plot(json.loads(args.plot_only.read_text(encoding="utf-8")), args.plot) else 1
    config = BenchConfig(
        seeds=args.seeds,
        arrivals=args.arrivals,
        load=args.load,
        jobs=args.jobs,
        policies=COMPARED_POLICIES,
        workloads=tuple(args.workload),
    )
    classes = deviceclass_documents(DEVICECLASS_DIR, DEFAULT_DRIVER_NAME)
    report = Report("placement", args, {"seeds": args.seeds, "arrivals": args.arrivals, "load": args.load})
    with report:
        result = run_bench(config, classes, lambda line: print(f"placement: {line}", flush=True))
    add_tables(report, result)
    report.note(
        "Quality, not speed: deterministic for the seeds; the load only changed how long the run took. "
        f"Full results: {args.full_json.relative_to(REPO) if args.full_json.is_relative_to(REPO) else args.full_json}."
    )
    args.full_json.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    plot(result, args.plot)
    report.finish()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
