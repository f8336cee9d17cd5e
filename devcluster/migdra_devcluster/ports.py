"""Loopback ports for the processes a development cluster or a test starts, chosen before they bind.

Why not bind port 0 and hand the number on: the kernel gives that number from the ephemeral range
(``net.ipv4.ip_local_port_range``, 32768-60999 by default), the range every outgoing connection and every
process binding port 0 draws from -- the kubelet's and containerd's streaming servers do -- so between
the probe and the process's own bind, any of them may take it ("Address already in use": seen when a
real node ran beside the chart's tests).  The kernel never hands out a port below that range: only
another picker could choose the same one, and a random pick among thousands, checked by a probe bind,
makes that rare.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

PORT_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 20000
"""Below this are well-known and registered services' ports a developer's machine may run."""
_TRIES = 200


def _ephemeral_start() -> int:
    try:
        return int(PORT_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port below the ephemeral range that nobody listens on now (its user binds it a moment
    later); a port from the kernel when the ephemeral range leaves no room below it."""
    ceiling = _ephemeral_start()
    if ceiling - LOWEST >= 1000:
        for _ in range(_TRIES):
            port = random.randrange(LOWEST, ceiling)
            if _bindable(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
