#!/usr/bin/env python3
"""Benchmark: kube-scheduler on alternative layouts of migdra's slices -- what each part of a node's
slices costs the scheduler, and which layout that keeps every guarantee costs it least.

Why: kube-scheduler's DRA Filter runs for (up to) every node per pod, and its cost per node grows with
what the node publishes (every slice is converted and validated on every Filter call) and with how far
into the node's device list the allocator walks before it finds a device that fits (every device on
the way has its class and request selectors evaluated).  Which of those dominates decides what a driver
can change; this benchmark measures it instead of guessing.

One control plane (``schedcluster``), ``--nodes`` nodes of 8 H100-SXM5-80GB, empty or half full
(``--state``).  Each run re-publishes every node in each layout in turn (the order rotated from run to
run; slices deleted first, so no two layouts mix) and times one burst of ``--pods`` one-MIG pods on it,
and one burst of pods without claims (the floor).  Per layout: pods/s, kube-scheduler's mean attempt
and its CPU milliseconds per pod, and the DRA part (its CPU per pod minus the floor's).

Layouts are of two kinds, said in the table: **candidates** keep every guarantee (no double booking,
exact placement, the placement quality of the policy, shares where enabled) and may become the default;
**probes** drop something a guarantee or a user needs (attributes, capacities, engine counters), only
to attribute the cost.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchlib import Report, add_common_arguments, check_runs, summary
from schedcluster import (
    DEFAULT_LAYOUT,
    GPU_MODEL,
    GPUS_PER_NODE,
    QPS_OF_SCHEDULER_PERF,
    Burst,
    Fleet,
    Layout,
    claim_profiles,
    control_plane,
    named_policy,
    progress,
)

from dra_driver.devicemodel.config import DeviceModelConfig, ProfileFilter
from dra_driver.devicemodel.policy import DynamicPlacementPolicy
from dra_driver.devicemodel.vocabulary import CAPACITIES
from dra_driver.jsontypes import MutableJSON
from migdra_devcluster.upstream.binaries import built_versions, find_binaries

# What every claim and class of the benchmark reads; a probe that strips attributes keeps these.
ATTRIBUTES_READ = frozenset({"type", "profile", "shared", "uuid", "parentUUID"})


def _devices(slices: list[MutableJSON]) -> list[MutableJSON]:
    return [device for body in slices for device in body["spec"].get("devices") or []]


def lean_attributes(slices: list[MutableJSON]) -> list[MutableJSON]:
    slices = copy.deepcopy(slices)
    for device in _devices(slices):
        device["attributes"] = {k: v for k, v in device.get("attributes", {}).items() if k in ATTRIBUTES_READ}
    return slices


def no_capacities(slices: list[MutableJSON]) -> list[MutableJSON]:
    slices = copy.deepcopy(slices)
    for device in _devices(slices):
        if not device.get("allowMultipleAllocations"):  # a share's computeSlices is what it requests
            device.pop("capacity", None)
    return slices


def every_aggregate_counter(slices: list[MutableJSON]) -> list[MutableJSON]:
    """Every device consumes its SM / engine / memory amounts again (read from its capacities) and every
    counter set meters them (the largest profile's amounts): the counters before implied ones were
    left out."""
    slices = copy.deepcopy(slices)
    budget: dict[str, dict[str, int]] = {}
    for device in _devices(slices):
        for consumed in device.get("consumesCounters") or []:
            for spec in CAPACITIES:
                amount = int((device.get("capacity") or {}).get(spec.name, {}).get("value", "0"))
                if amount:
                    consumed["counters"][spec.counter] = {"value": str(amount)}
                    known = budget.setdefault(consumed["counterSet"], {})
                    known[spec.counter] = max(known.get(spec.counter, 0), amount)
    for body in slices:
        for counter_set in body["spec"].get("sharedCounters") or []:
            for counter, amount in budget.get(counter_set["name"], {}).items():
                counter_set["counters"][counter] = {"value": str(amount)}
    return slices


def slices_of(size: int) -> Callable[[list[MutableJSON]], list[MutableJSON]]:
    """The same devices in the same order, cut into device slices of ``size``."""

    def cut(slices: list[MutableJSON]) -> list[MutableJSON]:
        counters = [copy.deepcopy(body) for body in slices if body["spec"].get("sharedCounters")]
        template = next(body for body in slices if body["spec"].get("devices"))
        devices = _devices(slices)
        cut_slices = []
        for index, start in enumerate(range(0, len(devices), size)):
            body = copy.deepcopy({**template, "spec": {**template["spec"], "devices": []}})
            body["metadata"]["name"] = template["metadata"]["name"].rsplit("-", 1)[0] + f"-{index:03d}"
            body["spec"]["devices"] = copy.deepcopy(devices[start : start + size])
            cut_slices.append(body)
        result = counters + cut_slices
        for body in result:
            body["spec"]["pool"]["resourceSliceCount"] = len(result)
        return result

    return cut


LAYOUTS: tuple[tuple[Layout, bool], ...] = (
    (DEFAULT_LAYOUT, True),
    (
        Layout(
            "dynamic in runs",
            "the dynamic policy in runs, one profile after the other (the default until 2026-12)",
            policy=lambda: DynamicPlacementPolicy(interleave=False),
        ),
        True,
    ),
    (Layout("static", "the static policy: GPUs in minor order, fixed", policy=named_policy("static")), True),
    (
        Layout(
            "shared devices",
            "sharedDevices: true: the 7 shared GPU-instance devices per GPU published too (the default until 2026-12)",
            config=DeviceModelConfig(shared_devices=True),
        ),
        True,
    ),
    (
        Layout(
            "no media extensions",
            "profiles: {'*': {deny: ['*+me*']}}: the media-extension profiles (1g.10gb+me, ...) not published",
            config=DeviceModelConfig(profiles={"*": ProfileFilter(deny=("*+me*",))}),
        ),
        True,
    ),
    (Layout("slices of 16", "probe: the same devices in slices of 16 instead of 64", transform=slices_of(16)), False),
    (
        Layout(
            "five attributes",
            "probe: only the attributes the claims and classes read (type, profile, shared, uuid, parentUUID)",
            transform=lean_attributes,
        ),
        False,
    ),
    (Layout("no capacities", "probe: no capacities on exclusive devices", transform=no_capacities), False),
    (
        Layout(
            "every aggregate counter",
            "every device consumes its SM, engine and memory counters too (the default until 2026-12)",
            transform=every_aggregate_counter,
        ),
        True,
    ),
)


@dataclass
class Measured:
    rate: list[float]
    attempt_ms: list[float]
    cpu_ms: list[float]
    dra_cpu_ms: list[float]
    devices: int = 0
    slices: int = 0


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--nodes", type=int, default=64, help=f"nodes of {GPUS_PER_NODE}x {GPU_MODEL}")
    parser.add_argument("--state", choices=("empty", "half full"), default="empty")
    parser.add_argument("--pods", type=int, default=200, help="pods per burst")
    parser.add_argument("--creators", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kube-version", help="a built version (default: the newest)")
    parser.add_argument("--only", action="append", help="only these layouts (by name; repeatable)")
    args = parser.parse_args()
    check_runs(parser, args)
    versions = built_versions()
    if not versions:
        raise SystemExit("scheduler layout bench: no kube binaries; run `make kube` first")
    version = args.kube_version or versions[-1]
    layouts = [(layout, keeps) for layout, keeps in LAYOUTS if not args.only or layout.name in args.only]
    params = {
        "nodes": args.nodes,
        "state": args.state,
        "pods": args.pods,
        "kube": version,
        "layouts": [layout.name for layout, _ in layouts],
    }
    report = Report("schedlayout", args, params)
    profiles = claim_profiles(args.pods, args.seed)
    results = {layout.name: Measured([], [], [], []) for layout, _ in layouts}
    serial = 0
    with tempfile.TemporaryDirectory(prefix="migdra-schedlayout-", dir="/tmp") as scratch, report:
        binaries = find_binaries(None, version)
        with control_plane(Path(scratch), binaries, QPS_OF_SCHEDULER_PERF, QPS_OF_SCHEDULER_PERF) as plane:
            fleet = Fleet(plane)
            fleet.grow(args.nodes)
            if args.state == "half full":
                fleet.fill_half(args.creators)
            warm = Burst(plane, "warm-up", min(16, len(profiles)), profiles)
            warm.run(args.creators)
            warm.clean_up()
            for run in range(args.runs):
                shift = run % len(layouts)
                for layout, _ in layouts[shift:] + layouts[:shift]:
                    fleet.use(layout)
                    found = results[layout.name]
                    found.devices, found.slices = fleet.devices_per_node, fleet.slices_per_node()
                    serial += 1
                    dra, floor = (
                        Burst(plane, f"dra-{serial}", args.pods, profiles),
                        Burst(plane, f"floor-{serial}", args.pods, None),
                    )
                    measured = dra.run(args.creators)
                    dra.clean_up()
                    baseline = floor.run(args.creators)
                    floor.clean_up()
                    found.rate.append(measured.rate)
                    found.attempt_ms.append(measured.attempt_mean_ms)
                    cpu = measured.cpu_ms_per_pod["kube-scheduler"]
                    found.cpu_ms.append(cpu)
                    found.dra_cpu_ms.append(cpu - baseline.cpu_ms_per_pod["kube-scheduler"])
                    progress(
                        f"run {run + 1}, {layout.name}: {measured.rate:.1f} pods/s, kube-scheduler {cpu:.1f} ms CPU/pod"
                    )
    table = report.table(
        "layouts",
        f"kube-scheduler {version} on {args.nodes} nodes of {GPUS_PER_NODE}x {GPU_MODEL}, {args.state}, "
        f"{args.pods} one-MIG pods per burst, by slice layout",
        [
            "layout",
            "kind",
            "devices / slices per node",
            "pods/s",
            "mean attempt",
            "kube-scheduler CPU ms/pod",
            "of it DRA (minus the floor's)",
            "vs default (CPU)",
            "what it is",
        ],
    )
    default_cpu = results[DEFAULT_LAYOUT.name].dra_cpu_ms if DEFAULT_LAYOUT.name in results else None
    for layout, keeps in layouts:
        found = results[layout.name]
        versus: Any = "-"
        if default_cpu:
            versus = summary([a / b for a, b in zip(found.dra_cpu_ms, default_cpu, strict=True)], "x", 2)
        table.add(
            layout.name,
            "candidate" if keeps else "probe",
            f"{found.devices} / {found.slices}",
            summary(found.rate, "", 1),
            summary(found.attempt_ms, "ms", 1),
            summary(found.cpu_ms, "", 1),
            summary(found.dra_cpu_ms, "", 1),
            versus,
            layout.description,
        )
    report.note(
        "kube-scheduler's CPU per pod is read from /proc over the burst; the floor is the same scheduler's CPU per "
        "pod for pods without claims on the same nodes in the same run, so the difference is what the DRA part "
        f"costs. Median of the runs: {statistics.median(results[layouts[0][0].name].rate):.1f} pods/s for "
        f"{layouts[0][0].name}."
    )
    report.finish()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
