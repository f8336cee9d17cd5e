#!/usr/bin/env python3
"""Pods per H100 at full SM isolation: the same pods exclusive and as shares (``migdra bench placement --sharing``).

Runs :func:`dra_driver.tools.packing.bench.run_bench` on the sharing workloads -- the same code as ``migdra bench
placement --sharing`` -- and turns its JSON into the table of docs/benchmarks.md ("Sharing a GPU
instance") and the full JSON into ``docs/sharing-bench.json``.  Every pod gets its own compute instance;
pods arrive one after the other on one node of 8 H100 until the first does not fit.  The numbers are a
deterministic function of the seeds (``--runs`` is accepted for ``make bench`` and recorded, not used).
Only the 1.36 allocator order: shares need DRAConsumableCapacity, off by default before 1.36.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchlib import REPO, Report, add_common_arguments

from dra_driver.deviceclasses import DEVICECLASS_DIR, deviceclass_documents
from dra_driver.devicemodel.vocabulary import DEFAULT_DRIVER_NAME
from dra_driver.tools.packing.bench import BOUND, COMPARED_POLICIES, ORACLE, BenchConfig, pods_cell, run_bench
from dra_driver.tools.packing.workloads import sharing_workloads

FULL_JSON = REPO / "docs" / "sharing-bench.json"


def _label(policy: str, order: str) -> str:
    return policy if order == "1.36" else f"{policy}@1.35"


def _need(pods: dict[str, Any]) -> str:
    """The pods of a workload: per kind its compute slices, GiB and weight; how they ask."""
    asked = {pod["asked"] for pod in pods.values()}
    kinds = ", ".join(f"{name} {pod['weight'] * 100:.0f} %" for name, pod in pods.items())
    return f"{'/'.join(sorted(asked))}: {kinds}"


def add_tables(report: Report, result: dict[str, Any]) -> None:
    params = result["params"]
    for order in params["orders"]:
        suffix = order.replace(".", "")
        table = report.table(
            f"pods-{suffix}",
            f"Pods per H100 placed before the first pod that does not fit (one node of 8 H100), median "
            f"(min-max) over {params['seeds']} seeds, allocator order {order}; every pod its own compute instance",
            ["workload", BOUND, f"{ORACLE} (exclusive only)", *params["policies"], "compute slices in use (default)"],
        )
        for name, runs in result["workloads"].items():
            cells = [name, pods_cell(runs[BOUND]), pods_cell(runs[ORACLE]) if ORACLE in runs else "-"]
            cells += [pods_cell(runs[_label(policy, order)]) for policy in params["policies"]]
            cells.append(f"{runs[_label('dynamic', order)]['compute_use'] * 100:.1f} %")
            table.add(*cells)
    kinds = report.table(
        "pods",
        "The pods of each workload: kind = compute slices (c) and GiB of GPU memory (g), with its share of arrivals",
        ["workload", "how the pods ask, and the kinds"],
    )
    for name in result["workloads"]:
        kinds.add(name, _need(params["workloads"][name]["pods"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--arrivals", type=int, default=120)
    parser.add_argument("--jobs", type=int, default=0)
    parser.add_argument("--full-json", type=Path, default=FULL_JSON)
    args = parser.parse_args()
    config = BenchConfig(
        seeds=args.seeds,
        arrivals=args.arrivals,
        jobs=args.jobs,
        policies=COMPARED_POLICIES,
        workloads=tuple(w.name for w in sharing_workloads()),
        orders=("1.36",),  # shares need DRAConsumableCapacity: beta and on from 1.36 (off in 1.35)
    )
    classes = deviceclass_documents(DEVICECLASS_DIR, DEFAULT_DRIVER_NAME)
    report = Report("sharing", args, {"seeds": args.seeds, "arrivals": args.arrivals})
    with report:
        result = run_bench(config, classes, lambda line: print(f"sharing: {line}", flush=True))
    add_tables(report, result)
    full = args.full_json.relative_to(REPO) if args.full_json.is_relative_to(REPO) else args.full_json
    report.note(f"Quality, not speed: deterministic for the seeds. Full results: {full}.")
    args.full_json.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    report.finish()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
