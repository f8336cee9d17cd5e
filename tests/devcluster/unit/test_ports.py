"""Ports picked for processes come from below the kernel's ephemeral range (which port 0 and every outgoing
connection draw from), and nobody listens on them."""

from __future__ import annotations

import socket

from migdra_devcluster.ports import LOWEST, PORT_RANGE_FILE, free_port


def test_a_free_port_is_below_the_ephemeral_range_and_bindable() -> None:
    ephemeral_start = int(PORT_RANGE_FILE.read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(LOWEST <= port < ephemeral_start for port in ports), ports
    assert len(ports) > 1  # spread, so two pickers rarely meet
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", ports.pop()))
