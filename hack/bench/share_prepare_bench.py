#!/usr/bin/env python3
"""Benchmark: preparing a share of a GPU instance that exists, beside an exclusive prepare.

A share whose GPU instance another share already created costs one compute instance (NVML's
CreateComputeInstanceWithPlacement); an exclusive 1g.10gb costs a GPU instance and its compute
instance.  Measured side by side in each run on one simulated 8x H100 node with the real
PrepareService (the same path kubelet's NodePrepareResources takes, in process): GPU 0 holds a 4g.40gb
shared GPU instance created by a first share (2 compute slices, untimed), then each round prepares and
unprepares a 1-slice share of it and an exclusive 1g.10gb on GPUs 1-7.  Two NVML sides: the bare
simulator, and GI creation slowed to ``--create-latency`` seconds (what creating a GI costs on hardware
is not recorded; NVIDIA's driver logs about a second for a GI destroy), which only the exclusive
prepare pays.  Every figure is a median of ``--runs`` runs (min-max) of per-run p50s; ratios per run.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from benchlib import Report, add_common_arguments, check_runs, percentile, ratios, repeat, summary
from kubernetes import client
from prepare_bench import create_claim, device_name, expect_success, simulated_node

from dra_driver.kubelet.calls import ClaimRef

SHARED = "gpu-0-shared-4g40gb-5-0"  # H100 4g.40gb (GI profile ID 5) at memory slice 0


def create_share(api_client: client.ApiClient, name: str, slices: int) -> ClaimRef:
    """An allocated claim holding one share of ``slices`` compute slices of SHARED, as the scheduler leaves it."""
    return create_claim(
        api_client, name, SHARED, shareID=str(uuid.uuid4()), consumedCapacity={"computeSlices": str(slices)}
    )


def run(rounds: int, latency: dict[str, float]) -> dict[str, float]:
    """One run: ``rounds`` rounds of (share prepare+unprepare, exclusive prepare+unprepare); p50s."""
    samples: dict[str, list[float]] = {}
    with simulated_node(8, latency) as node:
        holder = create_share(node.api_client, "holder", 2)
        expect_success(node.service.prepare([holder]))  # creates the shared GPU instance: untimed
        for index in range(rounds + 3):  # the first 3 warm caches: not counted
            share = create_share(node.api_client, f"share-{index}", 1)
            exclusive = node.claim(device_name(1 + index % 7, index % 7))
            for kind, ref in (("share", share), ("exclusive", exclusive)):
                for operation, call in (("prepare", node.service.prepare), ("unprepare", node.service.unprepare)):
                    node.clock.reset()
                    started = time.perf_counter()
                    outcome = call([ref])
                    total = time.perf_counter() - started
                    expect_success(outcome)
                    if not node.service.flush_reports(timeout=30):
                        raise SystemExit("claim status writes did not finish within 30 s")
                    if index >= 3:
                        samples.setdefault(f"{kind}.{operation}", []).append(total)
                        samples.setdefault(f"{kind}.{operation}.calls", []).append(float(node.clock.calls))
    return {f"{name}.p50": percentile(values, 0.5) for name, values in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--rounds", type=int, default=30, help="rounds per run and NVML side")
    parser.add_argument("--create-latency", type=float, default=0.3, help="seconds per GI creation (second side)")
    parser.add_argument("--smoke", action="store_true", help="tiny rounds and 1 run: check the script works")
    args = parser.parse_args()
    check_runs(parser, args)
    if args.smoke:
        args.runs, args.rounds = 1, 2
    sides = {
        "bare simulator": {},
        f"GI creation {args.create_latency * 1000:.0f} ms": {
            "nvmlDeviceCreateGpuInstanceWithPlacement": args.create_latency
        },
    }
    params = {"rounds": args.rounds, "create_latency_s": args.create_latency}

    def one_run() -> dict[str, float]:
        return {
            f"{side}:{name}": value
            for side, latency in sides.items()
            for name, value in run(args.rounds, latency).items()
        }

    with Report("share-prepare", args, params) as report:
        runs = repeat(args.runs, one_run)

    table = report.table(
        "share-prepare",
        "A share of an existing GPU instance beside an exclusive 1g.10gb, per call (8x H100 node, in process)",
        ["call", "NVML side", "share p50", "exclusive p50", "share ÷ exclusive", "NVML calls: share / exclusive"],
    )
    for operation in ("prepare", "unprepare"):
        for side in sides:
            share, exclusive = runs[f"{side}:share.{operation}.p50"], runs[f"{side}:exclusive.{operation}.p50"]
            calls_share = runs[f"{side}:share.{operation}.calls.p50"]
            calls_exclusive = runs[f"{side}:exclusive.{operation}.calls.p50"]
            table.add(
                operation,
                side,
                summary([v * 1000 for v in share], "ms", 1),
                summary([v * 1000 for v in exclusive], "ms", 1),
                summary(ratios(share, exclusive), "x", 2),
                f"{statistics.median(calls_share):.0f} / {statistics.median(calls_exclusive):.0f}",
            )
    report.finish()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
