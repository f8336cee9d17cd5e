#!/usr/bin/env python3
"""Benchmark: building a node's pool, and the API writes publishing costs.

1. Pool build (inventory -> devices, counters -> rendered ResourceSlices) for 8x H100 and 8x B200,
   beside two baselines measured interleaved with it in the same runs: ``json.loads`` and
   ``pickle.loads`` of the same rendered slices -- the cheapest ways we know to produce that much
   data in Python, so a ratio above 1 is what building costs beyond merely materializing its output.
   Each run times every one of them ``--repeat`` times (interleaved, rotated) and keeps the median;
   the ratios are per run.  Target: < 20 ms per build.
2. API writes against kube-apiserver (``make kube``'s, alone on its etcd) for: the first publish, an
   unchanged republish (target 0), and one GPU changing MIG mode -- migdra's publisher vs a naive "delete
   everything, create everything" publisher, side by side.  These are counts, deterministic, asserted on every run.

Results go to ``docs/benchmarks.md`` ("Device model and slice publishing") through ``run_all.py``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pickle
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

from benchlib import Report, add_common_arguments, check_runs, ratios, summary
from kubernetes import client

from dra_driver.devicemodel import example_inventory
from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.layout import render_slices
from dra_driver.devicemodel.pool import build_pool
from dra_driver.kube.client import Client
from dra_driver.nvml.types import NodeInventory
from kubeletplugin.publisher import SlicePublisher
from migdra_devcluster.upstream.binaries import built_versions, find_binaries
from migdra_devcluster.upstream.standalone import standalone_apiserver

POOLS = (["H100-SXM5-80GB"] * 8, ["B200"] * 8)
WAYS = ("build", "json", "pickle")


class BuildCase:
    """One pool: building and rendering it, and the two baselines that produce the same slices."""

    def __init__(self, models: list[str]) -> None:
        inventory = example_inventory(models)
        config = DeviceModelConfig()
        self.label = f"{len(models)}x {models[0]}"
        slices = render_slices(build_pool(inventory, config), "bench-node", generation=1)
        self.devices = sum(len(s["spec"].get("devices", [])) for s in slices)
        text = json.dumps(slices)
        data = pickle.dumps(slices, protocol=pickle.HIGHEST_PROTOCOL)
        # The baselines must produce exactly what the build produces, or the comparison is void.
        if json.loads(text) != slices or pickle.loads(data) != slices:
            raise SystemExit(f"{self.label}: the baselines do not reproduce the rendered slices")
        self.actions: dict[str, Callable[[], Any]] = {
            "build": lambda: render_slices(build_pool(inventory, config), "bench-node", generation=1),
            "json": lambda: json.loads(text),
            "pickle": lambda: pickle.loads(data),
        }

    def run(self, repeat: int) -> dict[str, float]:
        """One run: each action ``repeat`` times, interleaved in a rotating order; medians in ms."""
        samples: dict[str, list[float]] = {way: [] for way in WAYS}
        for index in range(repeat):
            shift = index % len(WAYS)
            for way in WAYS[shift:] + WAYS[:shift]:
                started = time.perf_counter()
                self.actions[way]()
                samples[way].append((time.perf_counter() - started) * 1000)
        return {way: median(values) for way, values in samples.items()}


class NaivePublisher:
    """The simple approach: delete every slice of the node, then create the new ones."""

    def __init__(self, api_client: client.ApiClient, node: str) -> None:
        self._api = client.ResourceV1Api(api_client)
        self._node = node
        self._generation = 0

    def publish(self, inventory: NodeInventory) -> None:
        for item in self._api.list_resource_slice(field_selector=f"spec.nodeName={self._node}").items:
            if item.metadata is None or item.metadata.name is None:
                raise RuntimeError(f"the API server listed a ResourceSlice of {self._node} without a name")
            self._api.delete_resource_slice(item.metadata.name)
        self._generation += 1
        for body in render_slices(build_pool(inventory, DeviceModelConfig()), self._node, self._generation):
            resource_slice = client.V1ResourceSlice.from_dict(body)
            if resource_slice is None:  # from_dict returns None only for None
                raise RuntimeError(f"render_slices gave {self._node} an empty ResourceSlice")
            self._api.create_resource_slice(resource_slice)


def _count_writes(api_client: client.ApiClient) -> list[str]:
    """Every write request the client sends from now on (method and path), as sent: each is one write the
    API server makes or refuses, and a refusal would fail the publish."""
    writes: list[str] = []
    send = api_client.call_api

    def counting(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method not in ("GET", "HEAD"):
            writes.append(f"{method} {url}")
        return send(method, url, *args, **kwargs)

    api_client.call_api = counting  # type: ignore[method-assign]
    return writes


def bench_writes() -> list[tuple[str, int, int]]:
    """(step, migdra's writes, naive writes) for the three steps; asserts what each count must be.

    The expected counts follow from the slice counts: migdra writes a slice only when it changed (a
    MIG mode change bumps the generation, so every slice of the pool is updated, none recreated); the
    naive publisher deletes every slice it finds and creates every slice anew.
    """
    inventory = example_inventory(["H100-SXM5-80GB"] * 8)
    mig_off = example_inventory(["H100-SXM5-80GB"] * 8, mig_enabled=False).gpus[3]
    changed = dataclasses.replace(inventory, gpus=(*inventory.gpus[:3], mig_off, *inventory.gpus[4:]))
    before = len(render_slices(build_pool(inventory, DeviceModelConfig()), "bench-node", 1))
    after = len(render_slices(build_pool(changed, DeviceModelConfig()), "bench-node", 1))
    steps = [("first publish", inventory), ("unchanged republish", inventory), ("GPU 3 MIG mode off", changed)]
    expected = {
        "migdra": [before, 0, max(before, after)],
        "naive": [before, 2 * before, before + after],
    }
    results: dict[str, list[int]] = {}
    versions = built_versions()
    if not versions:
        raise SystemExit("the write counts need kube-apiserver: run `make kube` first")
    binaries = find_binaries(None, versions[0])
    for flavour in ("migdra", "naive"):
        with (
            tempfile.TemporaryDirectory(prefix="migdra-bench-") as workdir,
            standalone_apiserver(Path(workdir), binaries) as api,
            api.api_client() as api_client,
        ):
            client.CoreV1Api(api_client).create_node(client.V1Node.model_validate({"metadata": {"name": "bench-node"}}))
            writes = _count_writes(api_client)
            publisher = SlicePublisher(Client(api_client=api_client), "bench-node", "gpu.migdra.io")
            naive = NaivePublisher(api_client, "bench-node")
            for _, step_inventory in steps:
                start = len(writes)
                if flavour == "migdra":
                    publisher.publish(build_pool(step_inventory, DeviceModelConfig()))
                else:
                    naive.publish(step_inventory)
                results.setdefault(flavour, []).append(len(writes) - start)
    if results != expected:
        raise SystemExit(f"API writes {results}, expected {expected}")
    return [(name, results["migdra"][i], results["naive"][i]) for i, (name, _) in enumerate(steps)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--repeat", type=int, default=20, help="timings of each action per run (median kept)")
    args = parser.parse_args()
    check_runs(parser, args)
    report = Report("devicemodel", args, {"repeat": args.repeat})
    with report:
        cases = [BuildCase(models) for models in POOLS]
        for case in cases:  # warm-up, not counted (imports, catalog caches)
            case.run(2)
        times: dict[tuple[str, str], list[float]] = {}
        writes: list[list[tuple[str, int, int]]] = []
        for run in range(args.runs):
            ordered = cases[run % 2 :] + cases[: run % 2]
            for case in ordered:
                for way, value in case.run(args.repeat).items():
                    times.setdefault((case.label, way), []).append(value)
            writes.append(bench_writes())
        if any(counts != writes[0] for counts in writes):
            raise SystemExit(f"API write counts differ between runs: {writes}")

    table = report.table(
        "build",
        "Building a node's pool and rendering its slices, beside producing the same slices by deserializing",
        [
            "pool",
            "devices",
            "build + render",
            "json.loads of the output",
            "pickle.loads of the output",
            "build ÷ json.loads",
            "build ÷ pickle.loads",
        ],
    )
    for case in cases:
        build, loads, unpickle = (times[(case.label, way)] for way in WAYS)
        table.add(
            case.label,
            str(case.devices),
            summary(build, "ms", 2),
            summary(loads, "ms", 2),
            summary(unpickle, "ms", 2),
            summary(ratios(build, loads), "x", 1),
            summary(ratios(build, unpickle), "x", 1),
        )
    write_table = report.table(
        "writes",
        f"API writes publishing 8x H100 (counts, the same in all {args.runs} runs)",
        ["8x H100, API writes for", "migdra publisher", "naive delete-and-recreate"],
    )
    for name, ours, naive in writes[0]:
        write_table.add(name, str(ours), str(naive))
    report.note(
        "The baselines json.loads and pickle.loads produce the same rendered slices from serialized bytes; "
        "a ratio is build time over baseline time in the same run."
    )
    report.finish()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
