"""What every long-running migdra process serves besides its own work: the Prometheus endpoint (with,
optionally, ``/healthz`` beside it) and the signal-driven stop (the node plugin and the reservation
controller share them).

Must never: decide what a process does on a stop; it only says that one was asked for.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from dra_driver.errors import ConfigurationError

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

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


HEALTHZ_PATH = "/healthz"


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Every probe and scrape is a request: not a log line each."""


def _metrics_app(registry: CollectorRegistry, healthz: Callable[[], str | None] | None) -> WSGIApplication:
    """The metrics app; with ``healthz`` also ``/healthz``: 200 ``ok``, or 503 with what it says is wrong."""
    metrics = make_wsgi_app(registry)
    if healthz is None:
        return metrics
    problem = healthz

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != HEALTHZ_PATH:
            exposition: Iterable[bytes] = metrics(environ, start_response)
            return exposition
        wrong = problem()
        start_response("200 OK" if wrong is None else "503 Service Unavailable", [("Content-Type", "text/plain")])
        return [f"{wrong or 'ok'}\n".encode()]

    return app


def _start_server(host: str, port: int, app: WSGIApplication) -> WSGIServer:
    """``app`` on ``host:port`` (IPv4 or IPv6), one thread per request, on a daemon thread."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    server_class: type[WSGIServer] = type("_Server", (_ThreadingServer,), {"address_family": family})
    server: WSGIServer = make_server(host, port, app, server_class, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server


@contextmanager
def serving_metrics(
    address: str | None,
    registry: CollectorRegistry,
    flag: str = "--metrics-address (MIGDRA_METRICS_ADDRESS)",
    healthz: Callable[[], str | None] | None = None,
) -> Iterator[WSGIServer | None]:
    """The Prometheus endpoint on ``HOST:PORT`` (``:PORT`` = all interfaces) while the block runs;
    ``flag`` names the setting in errors.  With ``healthz``, ``/healthz`` answers 200 while it
    returns None and 503 with its reason otherwise (an ``httpGet`` liveness probe)."""
    if not address:
        yield None
        return
    try:
        host, port = parse_metrics_address(address)
        server = _start_server(host, port, _metrics_app(registry, healthz))
    except ValueError as exc:
        raise ConfigurationError(f"{flag} {address!r}: {exc}") from exc
    except OSError as exc:
        raise ConfigurationError(f"{flag} {address!r}: cannot listen there: {exc.strerror or exc}") from exc
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT (graceful shutdown: instances and, by default, slices stay)."""
    stop = threading.Event()

    def handler(signum: int, _frame: object) -> None:
        log.info("received %s, shutting down", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop
