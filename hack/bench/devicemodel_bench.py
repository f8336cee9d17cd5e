#!/usr/bin/env python3
"""Benchmark: building a node's pool, and the API writes publishing costs.

1. Pool build (inventory -> devices, counters -> rendered ResourceSlices) for 8x H100 and 8x B200,
   timed against a baseline run side by side: a deep copy of the same rendered slices, i.e. the cost
   of merely producing that much data.  Target: < 20 ms per build.
2. API writes against the local API server for: the first publish, an unchanged republish (target 0),
   and one GPU changing MIG mode -- migdra's publisher vs a naive "delete everything, create
   everything" publisher, side by side.

Prints a Markdown table; docs/benchmarks.md keeps the last run.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from dra_driver.controlplane.apiserver import LocalAPIServer
from dra_driver.devicemodel import example_inventory
from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.layout import render_slices
from dra_driver.devicemodel.pool import build_pool
from dra_driver.nvml.types import NodeInventory
from kubeletplugin.publisher import SlicePublisher


def _median_ms(action: Callable[[], Any], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def bench_build(models: list[str], repeat: int) -> tuple[str, float, float, int]:
    inventory = example_inventory(models)
    config = DeviceModelConfig()

    def build() -> list[dict[str, Any]]:
        return render_slices(build_pool(inventory, config), "bench-node", generation=1)

    slices = build()
    build_ms = _median_ms(build, repeat)
    copy_ms = _median_ms(lambda: copy.deepcopy(slices), repeat)
    devices = sum(len(s["spec"].get("devices", [])) for s in slices)
    return f"{len(models)}x {models[0]}", build_ms, copy_ms, devices


class NaivePublisher:
    """The simple approach: delete every slice of the node, then create the new ones."""

    def __init__(self, api_client: client.ApiClient, node: str) -> None:
        self._api = client.ResourceV1Api(api_client)
        self._node = node
        self._generation = 0

    def publish(self, inventory: NodeInventory) -> None:
        for item in self._api.list_resource_slice(field_selector=f"spec.nodeName={self._node}").items:
            self._api.delete_resource_slice(item.metadata.name)
        self._generation += 1
        for body in render_slices(build_pool(inventory, DeviceModelConfig()), self._node, self._generation):
            self._api.create_resource_slice(client.V1ResourceSlice.from_dict(body))


def bench_writes() -> list[tuple[str, int, int]]:
    inventory = example_inventory(["H100-SXM5-80GB"] * 8)
    mig_off = example_inventory(["H100-SXM5-80GB"] * 8, mig_enabled=False).gpus[3]
    changed = dataclasses.replace(inventory, gpus=(*inventory.gpus[:3], mig_off, *inventory.gpus[4:]))
    steps = [("first publish", inventory), ("unchanged republish", inventory), ("GPU 3 MIG mode off", changed)]
    results: dict[str, list[int]] = {name: [] for name, _ in steps}
    for flavour in ("migdra", "naive"):
        with LocalAPIServer() as api, client.ApiClient(client.Configuration(host=api.url)) as api_client:
            client.CoreV1Api(api_client).create_node({"metadata": {"name": "bench-node"}})
            writes: list[Any] = []
            api.store.add_listener(writes.append)
            publisher = SlicePublisher(api_client, "bench-node", "gpu.migdra.io")
            naive = NaivePublisher(api_client, "bench-node")
            for name, step_inventory in steps:
                before = len(writes)
                if flavour == "migdra":
                    publisher.publish(build_pool(step_inventory, DeviceModelConfig()))
                else:
                    naive.publish(step_inventory)
                results[name].append(len(writes) - before)
    return [(name, counts[0], counts[1]) for name, counts in results.items()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    print("| pool | devices | build + render (median) | baseline: deep copy of the output | ratio |")
    print("|---|---:|---:|---:|---:|")
    for models in (["H100-SXM5-80GB"] * 8, ["B200"] * 8):
        label, build_ms, copy_ms, devices = bench_build(models, args.repeat)
        print(f"| {label} | {devices} | {build_ms:.2f} ms | {copy_ms:.2f} ms | {build_ms / copy_ms:.1f}x |")
    print()
    print("| 8x H100, API writes for | migdra publisher | naive delete-and-recreate |")
    print("|---|---:|---:|")
    for name, ours, naive in bench_writes():
        print(f"| {name} | {ours} | {naive} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
