"""``migdra slices``: the ResourceSlices this node would publish, computed without a cluster.

Reads the inventory through NVML (real or simulated), runs the pure device model and layout, and
prints the result as YAML / JSON (exactly what would be sent to the API server) or a table, where a
shared GPU-instance device's row ends with its computeSlices and share sizes.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from dra_driver.devicemodel.pool import NodePool
from dra_driver.devicemodel.vocabulary import COMPUTE_SLICES_CAPACITY


def render(slices: list[dict[str, Any]], pool: NodePool, output: str) -> str:
    if output == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": slices}, indent=2) + "\n"
    if output == "yaml":
        # Eight GPUs' slices are ~270 KB of YAML: libyaml's dumper writes the same text in a quarter of
        # the time of PyYAML's pure-Python one (the fallback where PyYAML lacks libyaml).
        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        text: str = yaml.dump_all(slices, Dumper=dumper, sort_keys=False)
        return text
    return _table(slices, pool)


def _shared_marker(device: dict[str, Any]) -> str:
    """``  shared: computeSlices 4 (shares of 1,2,4)`` after a shared device's row; nothing after any other,
    so the table of exclusive devices reads as it always has."""
    if not device.get("allowMultipleAllocations"):
        return ""
    slices = device["capacity"].get(COMPUTE_SLICES_CAPACITY) or {}
    sizes = ",".join((slices.get("requestPolicy") or {}).get("validValues") or ())
    return f"  shared: {COMPUTE_SLICES_CAPACITY} {slices.get('value', '-')} (shares of {sizes or '-'})"


def _table(slices: list[dict[str, Any]], pool: NodePool) -> str:
    lines = []
    for item in slices:
        spec = item["spec"]
        heading = f"{item['metadata']['name']}  (pool {spec['pool']['name']} gen {spec['pool']['generation']})"
        if "sharedCounters" in spec:
            lines.append(f"{heading}: {', '.join(cs['name'] for cs in spec['sharedCounters'])}")
            continue
        lines.append(f"{heading}: {len(spec['devices'])} devices")
        lines.append(f"  {'DEVICE':<30}{'TYPE':<6}{'PROFILE':<16}{'PLACEMENT':>10}{'SMS':>6}{'MEMORY':>12}")
        for device in spec["devices"]:
            attributes, capacity = device["attributes"], device["capacity"]
            kind = attributes["type"]["string"]
            profile = attributes.get("profile", {}).get("string", "-")
            placement = (
                f"{attributes['placementStart']['int']}:{attributes['placementSize']['int']}" if kind == "mig" else "-"
            )
            memory = f"{int(capacity['memory']['value']) // 2**20} MiB"
            sms = capacity.get("multiprocessors", {}).get("value", "-")
            line = f"  {device['name']:<30}{kind:<6}{profile:<16}{placement:>10}{sms:>6}{memory:>12}"
            lines.append(line + _shared_marker(device))
    for foreign in pool.foreign_instances:
        lines.append(
            f"withheld: GPU {foreign.gpu_minor} holds GI {foreign.gpu_instance_id} ({foreign.profile_name} at "
            f"{foreign.placement}) that migdra did not create; overlapping placements are not published"
        )
    for uuid in pool.excluded_gpus:
        lines.append(f"excluded by configuration: {uuid}")
    return "\n".join(lines) + "\n"
