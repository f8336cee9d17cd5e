#!/usr/bin/env python3
"""`make demo` (foundation stage): a simulated node, its MIG profiles and placements, before and after
an administrator carves two instances by hand, and the ResourceSlices the node publishes.

Everything runs through the real code path: the `migdra` CLI and the NVML backend over the real
`pynvml`, with the simulated NVML library installed beneath it.  Later roadmap steps grow this into
the end-to-end demo (local control plane, scheduler, kubelet plugin, `kubectl describe resourceclaim`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from dra_driver.mig.catalog import load_catalog
from dra_driver.nvml.session import open_nvml
from dra_driver.nvml.settings import build_nvml_settings

GPUS = "H100-SXM5-80GB:2,A100-SXM4-40GB:1"


def migdra(*args: str, env: dict[str, str], keep: Callable[[str], bool] | None = None) -> None:
    """Run the real CLI; ``keep`` filters the lines shown (the command's full output is long)."""
    command = [str(Path(sys.executable).with_name("migdra")), *args]
    print(f"$ migdra {' '.join(args)}", flush=True)
    if keep is None:
        subprocess.run(command, check=True, env=env)
        return
    output = subprocess.run(command, check=True, env=env, capture_output=True, text=True).stdout
    print("\n".join(line for line in output.splitlines() if keep(line)) + "\n", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, required=True)
    args = parser.parse_args()
    state = (args.state_dir / "nvml-sim.json").absolute()
    env = {**os.environ, "MIGDRA_NVML": "simulated", "MIGDRA_SIM_STATE": str(state), "MIGDRA_SIM_GPUS": GPUS}

    print(f"== A simulated node: {GPUS} (state file {state})\n", flush=True)
    migdra("gpus", env=env)

    print("== An administrator creates a 3g.40gb at 4:4 and a 1g.10gb at 0:1 on GPU 0 (as with nvidia-smi)\n")
    settings = build_nvml_settings(nvml="simulated", sim_state=state)
    h100 = load_catalog().model("H100-SXM5-80GB")
    with open_nvml(settings) as nvml:
        gpu0 = nvml.list_gpus()[0]
        for name, start in (("3g.40gb", 4), ("1g.10gb", 0)):
            profile = h100.profile_by_name(name)
            placement = profile.placement_at(start)
            assert placement is not None
            gi = nvml.create_gpu_instance(gpu0.uuid, profile.profile_id, placement)
            ci = nvml.create_compute_instance(gpu0.uuid, gi.gpu_instance_id, profile.default_ci_profile_index)
            print(f"   GI {gi.gpu_instance_id} at {gi.placement}, CI {ci.compute_instance_id}: {ci.mig_uuid}")
    print()
    print("== What is still free on every GPU\n", flush=True)
    migdra("gpus", "--free-only", env=env)

    print("== The ResourceSlices this node publishes (one line per slice; per-device rows left out)\n")
    print("   The admin's instances are foreign to migdra: never touched, and every placement that")
    print("   overlaps them is withheld, so kube-scheduler cannot allocate what cannot be created.\n")
    migdra("slices", "--node-name", "demo-node", env=env, keep=lambda line: not line.startswith("  "))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
