"""PCIe topology from sysfs: which root complex a GPU hangs off.

Kubernetes' standard attribute ``resource.kubernetes.io/pcieRoot`` lets claims ask for devices under
the same root (e.g. a GPU and a NIC).  sysfs resolves ``/sys/bus/pci/devices/<bdf>`` to a path under
``/sys/devices/pci<domain>:<bus>/...``; that first component is the root.  Read-only; returns None
when sysfs does not know the device (containers without /sys, the simulator).  Also the one spelling
of a PCI bus id that migdra publishes (:func:`normalise_pci_bus_id`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_ROOT = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")


def pcie_root(pci_bus_id: str, sysfs: Path = Path("/sys")) -> str | None:
    """``0000:1b:00.0`` -> ``pci0000:00`` (the root complex), or None if unknown."""
    device = sysfs / "bus" / "pci" / "devices" / pci_bus_id.lower()
    try:
        resolved = Path(os.path.realpath(device))
    except OSError:
        return None
    if not resolved.exists():
        return None
    try:
        parts = resolved.relative_to((sysfs / "devices").resolve()).parts
    except ValueError:
        return None
    return parts[0] if parts and _ROOT.match(parts[0]) else None


def normalise_pci_bus_id(bus_id: str) -> str:
    """NVML's ``00000000:1B:00.0`` -> Kubernetes' standard ``0000:1b:00.0`` (4-digit domain, lower case)."""
    text = bus_id.strip().lower()
    domain, sep, rest = text.partition(":")
    if not sep or rest.count(":") != 1:
        return text
    return f"{int(domain, 16):04x}:{rest}" if all(c in "0123456789abcdef" for c in domain) else text
