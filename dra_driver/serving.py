"""What every long-running migdra process serves besides its own work: the Prometheus endpoint and the
signal-driven stop (the node plugin and the reservation controller share them).

Must never: decide what a process does on a stop; it only says that one was asked for.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, start_http_server

from dra_driver.errors import ConfigurationError

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

log = logging.getLogger(__name__)


def parse_metrics_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); ``:PORT`` and ``[::]:PORT`` work too; an empty host is every interface."""
    host, colon, port_text = address.rpartition(":")
    if not colon:
        raise ValueError("expected HOST:PORT, e.g. 0.0.0.0:9400 or :9400")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"the port {port_text!r} is not a number from 1 to 65535 (HOST:PORT, e.g. 0.0.0.0:9400)")
    host = host.removeprefix("[").removesuffix("]")
    if any(c.isspace() for c in host) or "/" in host:
        raise ValueError(f"{host!r} is not a host name or IP address (HOST:PORT, e.g. 0.0.0.0:9400)")
    return host or "0.0.0.0", int(port_text)


@contextmanager
def serving_metrics(
    address: str | None, registry: CollectorRegistry, flag: str = "--metrics-address (MIGDRA_METRICS_ADDRESS)"
) -> Iterator[WSGIServer | None]:
    """The Prometheus endpoint on ``HOST:PORT`` (``:PORT`` = all interfaces) while the block runs;
    ``flag`` names the setting in errors."""
    if not address:
        yield None
        return
    try:
        host, port = parse_metrics_address(address)
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except ValueError as exc:
        raise ConfigurationError(f"{flag} {address!r}: {exc}") from exc
    except OSError as exc:
        raise ConfigurationError(f"{flag} {address!r}: cannot listen there: {exc.strerror or exc}") from exc
    try:
        yield server
    finally:
        server.shutdown()


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT (graceful shutdown: instances and, by default, slices stay)."""
    stop = threading.Event()

    def handler(signum: int, _frame: object) -> None:
        log.info("received %s, shutting down", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop
