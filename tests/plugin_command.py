"""How the end-to-end tests start `migdra kubelet-plugin` (no tests here): one node layout, one command.

Every plugin process of a test node lives under one root: ``registry/``, ``plugin/`` (also the state
directory), ``cdi/``, ``proc/`` and the simulated machine ``nvml.json`` of two H100s.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

MIGDRA = str(Path(sys.executable).with_name("migdra"))
NODE = "node-a"  # the prepare harness allocates claims in this pool
DRIVER = "gpu.migdra.io"
SIM_GPUS = "H100-SXM5-80GB:2"


def kubelet_plugin_argv(
    root: Path, kubeconfig: Path, *args: str, verbose: bool = False, sim_gpus: str = SIM_GPUS
) -> list[str]:
    """``migdra [-v] kubelet-plugin`` for the node under ``root`` (GPUs ``sim_gpus``), plus ``args``."""
    return [
        MIGDRA,
        *(["-v"] if verbose else []),
        "kubelet-plugin",
        "--node-name",
        NODE,
        "--kubeconfig",
        str(kubeconfig),
        "--registry-dir",
        str(root / "registry"),
        "--plugin-dir",
        str(root / "plugin"),
        "--cdi-dir",
        str(root / "cdi"),
        "--nvml",
        "simulated",
        "--sim-state",
        str(root / "nvml.json"),
        "--sim-gpus",
        sim_gpus,
        *args,
    ]


def kubelet_plugin_env(root: Path, extra: Sequence[tuple[str, str]] = ()) -> dict[str, str]:
    """This process's environment without ``MIGDRA_*`` (a test sets its own), the node's proc root, ``extra``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MIGDRA_")}
    return {**base, "MIGDRA_PROC_ROOT": str(root / "proc"), **dict(extra)}
