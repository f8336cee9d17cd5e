"""The ``/dev/nvidia*`` device nodes of a real node's simulated GPUs, made with mknod in a directory of the
node's own (the plugin's ``--dev-root``), so the container runtime finds every node a CDI spec names and
the container sees them, as on a host with NVIDIA's driver.  No driver answers behind them: opening one
fails (ENXIO), which nothing in the simulated flow does.

Numbers as NVIDIA's driver gives them: character major 195 for ``nvidia<minor>`` (the GPU's minor number,
its NVML index on a simulated node) and ``nvidiactl`` (minor 255).  ``nvidia-uvm`` and ``nvidia-caps`` get a
dynamic major on a real host (``/proc/devices``); here the fixed :data:`UVM_MAJOR` and :data:`CAPS_MAJOR`.
The capability nodes of every GPU instance and compute instance a GPU can have are made up front, by the
driver's documented layout (minor ``3 + 135 * gpu + 9 * gi`` for a GI, ``+ 1 + ci`` for its CIs), the same
formula the plugin uses when it has no capability files to read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

NVIDIA_MAJOR = 195
NVIDIACTL_MINOR = 255
UVM_MAJOR = 510
CAPS_MAJOR = 509
_CAPS_FIRST = 3
_CAPS_PER_GPU = 135


def make_device_nodes(dev_root: Path, gpu_minors: list[int]) -> int:
    """Make ``<dev_root>/dev/nvidia*`` for GPUs of those minors; returns how many nodes were made."""
    dev = dev_root / "dev"
    (dev / "nvidia-caps").mkdir(parents=True, exist_ok=True)
    nodes = [
        ("nvidiactl", NVIDIA_MAJOR, NVIDIACTL_MINOR),
        ("nvidia-uvm", UVM_MAJOR, 0),
        ("nvidia-uvm-tools", UVM_MAJOR, 1),
    ]
    for minor in gpu_minors:
        nodes.append((f"nvidia{minor}", NVIDIA_MAJOR, minor))
        first = _CAPS_FIRST + _CAPS_PER_GPU * minor
        nodes.extend((f"nvidia-caps/nvidia-cap{cap}", CAPS_MAJOR, cap) for cap in range(first, first + _CAPS_PER_GPU))
    for name, major, minor in nodes:
        path = dev / name
        if not path.exists():
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    return len(nodes)
