"""``migdra bench placement``: placement policies side by side against the repacking oracle.

Every workload is replayed once per seed: the same trace (arrivals, lifetimes, kinds, node orders)
for the oracle and for every policy, with the 1.36+ allocator order (slices sorted by name) and the
1.35 one (shuffled with a seeded rng).  Per seed we record acceptance, time-averaged memory-slice
utilisation, the share of time a 7g could have been served, slice writes per allocation, and the
policy's acceptance as a share of the oracle's in the same seed (a paired ratio); over the seeds, the
mean and its 95 % confidence interval (Student's t).  The seeds run in parallel processes (``jobs``),
each its own trace: nothing is shared between them but the code.

The JSON report (``-o json``) is ``{"schema": 1, "params": {...}, "workloads": {name: {policy:
{"acceptance": x, "ci95": [lo, hi], "of_oracle": ..., "utilisation": ..., "seven_g": ...,
"writes_per_allocation": ..., "seeds": n}}}}``; the 1.35 runs are under ``"<policy>@1.35"`` and the
oracle under ``"oracle"``.

The sharing workloads (:func:`~dra_driver.tools.packing.workloads.sharing_workloads`, ``--sharing``) are
pods with compute and memory needs filled until the first reject; they add ``pods_per_gpu`` (mean,
``pods_per_gpu_median``, ``pods_per_gpu_range`` [min, max] over the seeds), ``compute_use`` and
``of_bound`` to every run, and a ``"bound"`` run: the compute and memory upper bound
(:func:`~dra_driver.tools.packing.simulation.run_bound`).  The oracle runs only where it can model every kind:
exclusive devices, not shares.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from dra_driver.tools.packing.simulation import (
    ALLOCATOR_ORDERS,
    SHUFFLED,
    SORTED,
    Outcome,
    run_bound,
    run_oracle,
    run_policy,
)
from dra_driver.tools.packing.workloads import PodKind, Workload, all_workloads, standard_workloads, workload_named

SCHEMA = 1
COMPARED_POLICIES = ("dynamic", "static", "hami", "name-order")
ORACLE = "oracle"
BOUND = "bound"
METRICS = (
    "acceptance",
    "slice_acceptance",
    "utilisation",
    "seven_g",
    "writes_per_allocation",
    "of_oracle",
    "slices_of_oracle",
    "pods_per_gpu",
    "compute_use",
    "of_bound",
)
UNBOUNDED = ("writes_per_allocation", "pods_per_gpu", "of_oracle", "slices_of_oracle", "of_bound")  # not shares

# Two-sided 95 % Student's t quantiles by degrees of freedom; beyond the table, the normal 1.96.
_T95 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
    11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
    20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip


def t95(degrees: int) -> float:
    if degrees <= 0:
        return math.inf
    known = [d for d in _T95 if d <= degrees]
    return _T95[max(known)] if degrees <= 120 else 1.96


def mean_ci(samples: Sequence[float]) -> tuple[float, float, float]:
    """Mean and its 95 % confidence interval (a single sample: the interval is the point)."""
    mean = statistics.fmean(samples)
    if len(samples) < 2:
        return mean, mean, mean
    half = t95(len(samples) - 1) * statistics.stdev(samples) / math.sqrt(len(samples))
    return mean, mean - half, mean + half


@dataclass(frozen=True)
class BenchConfig:
    seeds: int = 10
    arrivals: int = 400
    load: float = 1.0
    lag: int = 0
    orders: tuple[str, ...] = ALLOCATOR_ORDERS
    policies: tuple[str, ...] = COMPARED_POLICIES
    workloads: tuple[str, ...] = ()  # empty: all standard workloads
    jobs: int = 0  # 0: one per CPU
    first_seed: int = 1
    extra: Mapping[str, Any] = field(default_factory=dict)

    def chosen(self) -> list[Workload]:
        """The named workloads (standard or sharing), or every standard one."""
        if not self.workloads:
            return standard_workloads(self.lag)
        every = all_workloads(self.lag)
        return [workload_named(name, every) for name in self.workloads]


def _metrics(outcome: Outcome, oracle: Outcome | None, bound: Outcome | None = None) -> dict[str, float]:
    values = {
        "acceptance": outcome.acceptance,
        "slice_acceptance": outcome.slice_acceptance,
        "utilisation": outcome.utilisation,
        "seven_g": outcome.seven_g,
        "writes_per_allocation": outcome.writes_per_allocation,
    }
    if outcome.fill:
        values["pods_per_gpu"] = outcome.pods_per_gpu
    if bound is not None:
        values["of_bound"] = outcome.allocations / bound.allocations if bound.allocations else 1.0
        if outcome.total_compute_slices:  # the oracle packs GPU instances: it has no compute count
            values["compute_use"] = outcome.compute_use
    if oracle is not None:
        denominator = oracle.utilisation if _is_fill(oracle) else oracle.acceptance
        numerator = outcome.utilisation if _is_fill(oracle) else outcome.acceptance
        values["slices_of_oracle"] = (
            outcome.slice_acceptance / oracle.slice_acceptance if oracle.slice_acceptance else 1.0
        )
        values["of_oracle"] = numerator / denominator if denominator else 1.0
    return values


def _is_fill(outcome: Outcome) -> bool:
    return outcome.fill


def run_seed(
    workload: Workload, seed: int, config: BenchConfig, classes: Sequence[Mapping[str, Any]]
) -> dict[str, dict[str, float]]:
    """One seed of one workload: the oracle and every (policy, order); metric values by run label."""
    trace = workload.trace(seed, config.arrivals, config.load)
    out: dict[str, dict[str, float]] = {}
    bound = None
    if workload.pods and workload.fill:
        pods = {name: kind for name, kind in workload.kinds.items() if isinstance(kind, PodKind)}
        bound = run_bound(trace, workload.cluster, pods)
        out[BOUND] = _metrics(bound, None, bound)
    oracle = None
    if workload.oracle_models_it:
        oracle = run_oracle(trace, workload.cluster, kinds=workload.kinds)
        out[ORACLE] = _metrics(oracle, None, bound)
    for policy in config.policies:
        for order in config.orders:
            label = policy if order == SORTED else f"{policy}@{SHUFFLED}"
            outcome = run_policy(
                trace, workload.cluster, policy, classes, order=order, seed=seed, lag=workload.lag, kinds=workload.kinds
            )
            out[label] = _metrics(outcome, oracle, bound)
    return out


def _task(args: tuple[Workload, int, BenchConfig, Sequence[Mapping[str, Any]]]) -> tuple[str, int, Any]:
    workload, seed, config, classes = args
    return workload.name, seed, run_seed(workload, seed, config, classes)


def summarise(per_seed: Sequence[Mapping[str, Mapping[str, float]]]) -> dict[str, dict[str, Any]]:
    """Mean and 95 % CI of every metric of every run label, over the seeds."""
    labels = list(per_seed[0])
    summary: dict[str, dict[str, Any]] = {}
    for label in labels:
        entry: dict[str, Any] = {"seeds": len(per_seed)}
        for metric in METRICS:
            samples = [seed[label][metric] for seed in per_seed if metric in seed[label]]
            if not samples:
                continue
            mean, low, high = mean_ci(samples)
            if metric not in UNBOUNDED:  # shares: the interval of a share stays within [0, 1]
                low, high = max(0.0, low), min(1.0, high)
            elif metric != "writes_per_allocation":
                low = max(0.0, low)
            entry[metric] = round(mean, 4)
            entry[f"{metric}_ci95" if metric != "acceptance" else "ci95"] = [round(low, 4), round(high, 4)]
            if metric == "pods_per_gpu":  # the spread the seeds give, beside the mean's interval
                entry["pods_per_gpu_median"] = round(statistics.median(samples), 4)
                entry["pods_per_gpu_range"] = [round(min(samples), 4), round(max(samples), 4)]
        summary[label] = entry
    return summary


def run_bench(
    config: BenchConfig,
    classes: Sequence[Mapping[str, Any]],
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The whole comparison as the JSON report (module docstring)."""
    workloads = config.chosen()
    tasks = [(w, config.first_seed + s, config, classes) for w in workloads for s in range(config.seeds)]
    jobs = config.jobs or os.cpu_count() or 1
    collected: dict[str, list[tuple[int, Any]]] = {w.name: [] for w in workloads}
    if jobs == 1:
        results = map(_task, tasks)
        for name, seed, values in results:
            collected[name].append((seed, values))
            if progress:
                progress(f"{name} seed {seed} done")
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            for name, seed, values in pool.map(_task, tasks):
                collected[name].append((seed, values))
                if progress:
                    progress(f"{name} seed {seed} done")
    report_workloads: dict[str, Any] = {}
    for workload in workloads:
        per_seed = [values for _, values in sorted(collected[workload.name], key=lambda item: item[0])]
        report_workloads[workload.name] = summarise(per_seed)
    return {
        "schema": SCHEMA,
        "params": {
            "seeds": config.seeds,
            "first_seed": config.first_seed,
            "arrivals": config.arrivals,
            "load": config.load,
            "lag": config.lag,
            "orders": list(config.orders),
            "policies": list(config.policies),
            "workloads": {
                w.name: {
                    "mix": w.mix.name,
                    "cluster": w.cluster.name,
                    "nodes": [list(node) for node in w.cluster.nodes],
                    "fill": w.fill,
                    "description": w.mix.description,
                    **_pods_params(w),
                }
                for w in workloads
            },
        },
        "workloads": report_workloads,
    }


def _pods_params(workload: Workload) -> dict[str, Any]:
    """A sharing workload's pods: per kind its compute slices, memory, how it asks and its weight."""
    if not workload.pods:
        return {}
    pods = {
        name: {
            "computeSlices": kind.compute_slices,
            "memoryGiB": kind.memory_gib,
            "asked": kind.asked.value,
            "weight": workload.mix.weights.get(name, 0),
        }
        for name, kind in workload.kinds.items()
        if isinstance(kind, PodKind)
    }
    return {"pods": pods, "oracle": workload.oracle_models_it}


def table_rows(report: Mapping[str, Any], order: str = SORTED) -> list[list[str]]:
    """Rows for a text/markdown table: workload, oracle, then each policy's acceptance (% of oracle)."""
    rows = []
    policies = report["params"]["policies"]
    for name, runs in report["workloads"].items():
        if ORACLE not in runs or BOUND in runs:
            continue  # the sharing workloads: pods_rows
        fill = report["params"]["workloads"][name]["fill"]
        metric = "utilisation" if fill else "acceptance"
        oracle = runs[ORACLE]
        row = [name, _pct(oracle[metric])]
        for policy in policies:
            label = policy if order == SORTED else f"{policy}@{SHUFFLED}"
            if label not in runs:
                row.append("-")
                continue
            run = runs[label]
            low, high = run["ci95"] if metric == "acceptance" else run["utilisation_ci95"]
            row.append(f"{_pct(run[metric])} ({_pct(low)}-{_pct(high)}), {run['of_oracle'] * 100:.1f}% of oracle")
        rows.append(row)
    return rows


def _pct(value: float) -> str:
    return f"{value * 100:.1f}%"


def pods_rows(report: Mapping[str, Any], order: str = SORTED) -> list[list[str]]:
    """Rows for the sharing workloads: workload, the bound, the oracle (exclusive only), then each
    policy's pods per GPU: median (min-max over the seeds)."""
    rows = []
    policies = report["params"]["policies"]
    for name, runs in report["workloads"].items():
        if BOUND not in runs:
            continue
        labels = [BOUND, ORACLE] + [policy if order == SORTED else f"{policy}@{SHUFFLED}" for policy in policies]
        rows.append([name, *(pods_cell(runs[label]) if label in runs else "-" for label in labels)])
    return rows


def pods_cell(run: Mapping[str, Any]) -> str:
    """Pods per GPU: the median over the seeds and their range."""
    low, high = run["pods_per_gpu_range"]
    return f"{run['pods_per_gpu_median']:.2f} ({low:.2f}-{high:.2f})"
