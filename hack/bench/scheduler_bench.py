#!/usr/bin/env python3
"""Benchmark: kube-scheduler's throughput on migdra's ResourceSlices as the cluster grows, beside its
own rate for pods without claims on the same nodes (the floor of what a DRA pod can cost).

Why: MIG runs on big fleets, and kube-scheduler searches migdra's devices -- every legal (profile,
placement) of every GPU, with shared counters -- for every pod.  A cluster admin sizing a fleet wants
pods/s against nodes; a driver author wants to know which part is the scheduler's own and which part
the driver's slices add.

For each built Kubernetes version (``--kube-version``, repeatable; default every ``make kube`` built),
one control plane of etcd + kube-apiserver + kube-scheduler (``schedcluster``) and a fleet of Nodes of
8 H100-SXM5-80GB each, grown to each of ``--nodes`` in turn.  At each size, *empty* and then *half
full* (a 4g.40gb allocated at slice 0 of every GPU), each run measures two bursts in alternating order:

- **DRA**: ``--pods`` pods, each with its own pre-made claim for one MIG device of an inference mix
  (1g.10gb / 2g.20gb / 3g.40gb, seeded);
- **floor**: as many pods without any claim, on the same nodes.

From the first create until a watch has seen every pod bound: pods/s, kube-scheduler's own mean
scheduling attempt, and the CPU milliseconds per pod kube-scheduler, kube-apiserver and etcd spent;
after each size their resident memory (now and peak).  A burst that fills more than half of the room
left (half full on few nodes) is cut to fit, and a size whose previous rate would make a burst last
over ``--max-round-seconds`` (the 1.36 collapse) gets fewer pods: each table says how many.

``--profile-nodes N`` also takes kube-scheduler's CPU profile (``/debug/pprof/profile``) during one more
DRA burst at N nodes on the newest version, and reports each part's cumulative share of the samples
(``schedcluster.PROFILE_PARTS``).  Results go to ``docs/benchmarks.json`` through ``run_all.py``
(``make bench BENCH_ARGS="--only scheduler"``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib import CHART, Report, add_common_arguments, check_runs, ratios, summary
from schedcluster import (
    GPU_MODEL,
    GPUS_PER_NODE,
    MEMORY_SLICES_PER_GPU,
    PROCESSES,
    PROFILE_PARTS,
    QPS_OF_SCHEDULER_PERF,
    TOTAL_SAMPLES,
    Burst,
    ControlPlane,
    Fleet,
    Round,
    claim_profiles,
    control_plane,
    mean_memory_slices,
    profile_shares,
    progress,
    take_cpu_profile,
)

from migdra_devcluster.upstream.binaries import built_versions, find_binaries

WARM_UP_PODS = 16
SCALES_FROM_MINOR = 37  # kubernetes/kubernetes#138917: before it, a burst at 256 nodes would take many minutes
OLD_MAX_NODES = 64  # the largest size measured on an older minor unless --max-nodes says otherwise


def _minor(version: str) -> int:
    return int(version.lstrip("v").split(".")[1])


STATES = ("empty", "half full")


@dataclass
class Point:
    """One (version, nodes, state): its runs' bursts."""

    version: str
    nodes: int
    state: str
    pods: int
    dra: list[Round] = field(default_factory=list)
    floor: list[Round] = field(default_factory=list)
    memory: dict[str, tuple[float, float]] = field(default_factory=dict)  # process -> (RSS, peak) MiB


def burst_size(args: argparse.Namespace, nodes: int, state: str, previous: Point | None) -> int:
    """``--pods``, cut so a burst takes at most half the memory slices left, and so that it would not last
    over ``--max-round-seconds`` if the rate fell in proportion to the nodes from the previous size's
    (the pessimistic guess: each pod filters every node)."""
    free_slices = nodes * GPUS_PER_NODE * MEMORY_SLICES_PER_GPU * (0.5 if state == "half full" else 1.0)
    count: int = min(args.pods, int(free_slices / 2 / mean_memory_slices()))
    if previous is not None and previous.dra:
        expected = statistics.median(r.rate for r in previous.dra) * previous.nodes / nodes
        count = min(count, max(args.min_pods, int(expected * args.max_round_seconds)))
    return count


def measure_version(
    args: argparse.Namespace, version: str, profile_at: int | None, scratch: Path
) -> tuple[list[Point], dict[str, float]]:
    binaries = find_binaries(None, version)
    points: list[Point] = []
    shares: dict[str, float] = {}
    profiles = claim_profiles(args.pods, args.seed)
    serial = 0

    def namespace(kind: str) -> str:
        nonlocal serial
        serial += 1
        return f"{kind}-{serial}"

    with control_plane(scratch / version, binaries, args.kube_api_qps, args.kube_api_burst) as plane:
        fleet = Fleet(plane)
        previous: Point | None = None
        for nodes in sorted(args.nodes):
            limit = args.max_nodes.get(version, OLD_MAX_NODES if _minor(version) < SCALES_FROM_MINOR else None)
            if limit is not None and nodes > limit:
                progress(f"{version}: {nodes} nodes skipped (at most {limit} nodes on this version)")
                continue
            fleet.grow(nodes)
            if not points:
                warm = Burst(plane, namespace("warm-up"), min(WARM_UP_PODS, len(profiles)), profiles)
                warm.run(args.creators)
                warm.clean_up()
            for state in STATES:
                if state == "half full":
                    fleet.fill_half(args.creators)
                point = Point(version, nodes, state, burst_size(args, nodes, state, previous))
                progress(f"{version}, {nodes} nodes, {state}: {args.runs} runs of {point.pods} pods")
                for run in range(args.runs):
                    bursts = {
                        "dra": Burst(plane, namespace("dra"), point.pods, profiles),
                        "floor": Burst(plane, namespace("floor"), point.pods, None),
                    }
                    order = ("dra", "floor") if run % 2 == 0 else ("floor", "dra")
                    for kind in order:
                        measured = bursts[kind].run(args.creators)
                        bursts[kind].clean_up()
                        (point.dra if kind == "dra" else point.floor).append(measured)
                    progress(
                        f"  run {run + 1}: DRA {point.dra[-1].rate:.1f} pods/s "
                        f"(attempt {point.dra[-1].attempt_mean_ms:.0f} ms), floor {point.floor[-1].rate:.1f} pods/s"
                    )
                if profile_at == nodes and state == "empty":
                    shares = profile_burst(plane, point, namespace("profiled"), profiles, args, scratch)
                point.memory = {name: (s.rss_mib, s.peak_rss_mib) for name, s in plane.stats().items()}
                points.append(point)
                if state == "empty":
                    previous = point
                else:
                    fleet.empty()
    return points, shares


def profile_burst(
    plane: ControlPlane, point: Point, namespace: str, profiles: list[str], args: argparse.Namespace, scratch: Path
) -> dict[str, float]:
    """One more DRA burst (not in the tables) under kube-scheduler's CPU profiler; the profile covers the
    burst's expected time, so nearly every sample is the burst's."""
    burst = Burst(plane, namespace, point.pods, profiles)
    seconds = max(5, int(statistics.median(r.seconds for r in point.dra)))
    path = (args.profile_out or scratch) / f"kube-scheduler-{point.version}-{point.nodes}-nodes.pprof"
    path.parent.mkdir(parents=True, exist_ok=True)
    reader = take_cpu_profile(plane, seconds, path)
    burst.run(args.creators)
    reader.join(seconds + 120)
    burst.clean_up()
    progress(f"kube-scheduler's CPU profile: {path}")
    return profile_shares(path)


def parse_max_nodes(values: list[str]) -> dict[str, int]:
    limits: dict[str, int] = {}
    for value in values:
        version, _, count = value.partition("=")
        if not count.isdigit():
            raise SystemExit(f"--max-nodes {value!r}: expected VERSION=NODES, e.g. v1.36.5=64")
        limits[version] = int(count)
    return limits


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--pods", type=int, default=200, help="pods per burst (each with its own claim)")
    parser.add_argument("--min-pods", type=int, default=20, help="the fewest a burst is cut to")
    parser.add_argument("--max-round-seconds", type=float, default=30.0, help="cut bursts expected to last longer")
    parser.add_argument(
        "--nodes", type=int, action="append", help=f"cluster sizes, nodes of {GPUS_PER_NODE}x {GPU_MODEL}"
    )
    parser.add_argument(
        "--max-nodes",
        action="append",
        default=[],
        help=f"VERSION=NODES: stop that version there (default {OLD_MAX_NODES} before 1.{SCALES_FROM_MINOR})",
    )
    parser.add_argument("--creators", type=int, default=4, help="threads creating the pods")
    parser.add_argument("--kube-api-qps", type=int, default=QPS_OF_SCHEDULER_PERF, help="kube-scheduler's client QPS")
    parser.add_argument("--kube-api-burst", type=int, default=QPS_OF_SCHEDULER_PERF, help="and its burst")
    parser.add_argument("--seed", type=int, default=0, help="seeds the profile mix of the claims")
    parser.add_argument("--kube-version", action="append", help="a built version (default: every one built)")
    parser.add_argument("--profile-nodes", type=int, default=256, help="profile kube-scheduler at this size (0: not)")
    parser.add_argument("--profile-out", type=Path, help="keep the CPU profile here")
    args = parser.parse_args()
    check_runs(parser, args)
    args.nodes = args.nodes or [8, 64, 256, 500]
    args.max_nodes = parse_max_nodes(args.max_nodes)
    versions = args.kube_version or built_versions()
    if not versions:
        raise SystemExit("scheduler bench: no kube binaries; run `make kube` first")
    newest = max(versions, key=lambda v: tuple(int(p) for p in v.lstrip("v").split(".")))
    params = {
        "pods": args.pods,
        "nodes": args.nodes,
        "gpus_per_node": f"{GPUS_PER_NODE}x {GPU_MODEL}",
        "creators": args.creators,
        "kube": versions,
        "kube_api_qps": args.kube_api_qps,
        "kube_api_burst": args.kube_api_burst,
        "seed": args.seed,
    }
    report = Report("scheduler", args, params)
    points: list[Point] = []
    shares: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="migdra-sched-", dir="/tmp") as scratch, report:
        for version in versions:
            found, profiled = measure_version(
                args, version, args.profile_nodes if version == newest else None, Path(scratch)
            )
            points += found
            shares = shares or profiled
    write_tables(report, points, shares, newest, args)
    report.finish()
    return 0


def write_tables(
    report: Report, points: list[Point], shares: dict[str, float], newest: str, args: argparse.Namespace
) -> None:
    curve = report.table(
        "curve",
        f"kube-scheduler on migdra's slices: pods/s by cluster size (nodes of {GPUS_PER_NODE}x {GPU_MODEL}, "
        "one MIG claim per pod) beside the same scheduler's pods without claims on the same nodes",
        [
            "Kubernetes",
            "nodes (GPUs)",
            "state",
            "pods per burst",
            "DRA pods/s",
            "floor pods/s (no claim)",
            "DRA ÷ floor",
            "mean attempt, DRA",
            "mean attempt, floor",
        ],
    )
    cost = report.table(
        "cost",
        "What each DRA pod cost the control plane's processes (CPU ms per pod, the burst's CPU time divided "
        "by its pods) and what they held after each size (resident MiB, peak in brackets)",
        [
            "Kubernetes",
            "nodes",
            "state",
            *(f"{name} CPU ms/pod (floor)" for name in PROCESSES[1:][::-1]),
            *(f"{name} MiB" for name in PROCESSES[::-1]),
        ],
    )
    for point in points:
        dra_rate = [r.rate for r in point.dra]
        floor_rate = [r.rate for r in point.floor]
        curve.add(
            point.version,
            f"{point.nodes} ({point.nodes * GPUS_PER_NODE:,})",
            point.state,
            str(point.pods),
            summary(dra_rate, "", 1),
            summary(floor_rate, "", 1),
            summary(ratios(dra_rate, floor_rate), "x", 2),
            summary([r.attempt_mean_ms for r in point.dra], "ms", 1),
            summary([r.attempt_mean_ms for r in point.floor], "ms", 1),
        )
        cpu_cells: list[Any] = []
        for name in PROCESSES[1:][::-1]:
            dra = statistics.median(r.cpu_ms_per_pod[name] for r in point.dra)
            floor = statistics.median(r.cpu_ms_per_pod[name] for r in point.floor)
            cpu_cells.append(f"{dra:,.1f} ({floor:,.1f})")
        cost.add(
            point.version,
            str(point.nodes),
            point.state,
            *cpu_cells,
            *(f"{point.memory[name][0]:,.0f} ({point.memory[name][1]:,.0f})" for name in PROCESSES[::-1]),
        )
    newest_points = [p for p in points if p.version == newest]
    sizes = sorted({p.nodes for p in newest_points})
    if len(sizes) > 1:
        plot = report.table(
            "plot",
            f"kube-scheduler {newest}: pods/s by nodes (of {GPUS_PER_NODE}x {GPU_MODEL}), medians of the runs",
            [CHART, "one MIG claim per pod, empty nodes", "one MIG claim per pod, half full", "no claims, empty nodes"],
        )
        by_key = {(p.nodes, p.state): p for p in newest_points}
        for nodes in sizes:
            empty, half = by_key.get((nodes, "empty")), by_key.get((nodes, "half full"))
            plot.add(
                f"{nodes} nodes",
                summary([r.rate for r in empty.dra], "", 1) if empty else "0",
                summary([r.rate for r in half.dra], "", 1) if half else "0",
                summary([r.rate for r in empty.floor], "", 1) if empty else "0",
            )
    if shares:
        profile = report.table(
            "profile",
            f"Where kube-scheduler's CPU goes: a profile of one more DRA burst at {args.profile_nodes} nodes, "
            f"empty, on {newest} (cumulative share of the samples; parts overlap, each includes what it calls)",
            ["part", "upstream function", "share of samples"],
        )
        if TOTAL_SAMPLES in shares:
            profile.add(TOTAL_SAMPLES, "(the profile's samples over its duration)", f"{shares[TOTAL_SAMPLES]:.0f}%")
        for what, function in PROFILE_PARTS:
            profile.add(what, f"`{function}`", f"{shares[what]:.1f}%" if what in shares else "-")
    report.note(
        "Each burst is timed from its first pod create until a watch has seen every pod bound: the creates over "
        "HTTPS, kube-scheduler's queue, its filter and score over the nodes, the DRA allocation, the claim "
        "status write and the binding, on CPUs shared by etcd, kube-apiserver, kube-scheduler and the benchmark."
    )


if __name__ == "__main__":
    raise SystemExit(main())
