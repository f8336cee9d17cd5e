"""``migdra sim``: start pieces of the local control plane as processes (for the demo and tests).

Only presentation and start-up live here; the servers are library code in ``dra_driver.controlplane``.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import click


@click.group()
def sim() -> None:
    """Local stand-ins for cluster components (never for production)."""


@sim.command()
@click.option("--host", default=None, help="address to listen on (default 127.0.0.1) [env MIGDRA_APISERVER_HOST]")
@click.option("--port", type=int, default=None, help="TCP port; 0 picks a free one [env MIGDRA_APISERVER_PORT]")
@click.option(
    "--kubeconfig-out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="write a kubeconfig for this server here once it listens",
)
@click.option(
    "--snapshot",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="JSON state file, loaded at start and written periodically and at exit [env MIGDRA_APISERVER_SNAPSHOT]",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="static token file 'token,user,uid[,groups]' turning authentication on [env MIGDRA_APISERVER_TOKEN_FILE]",
)
def apiserver(
    host: str | None, port: int | None, kubeconfig_out: Path, snapshot: Path | None, token_file: Path | None
) -> None:
    """Run the local Kubernetes API server until SIGINT or SIGTERM."""
    from dra_driver.controlplane.apiserver import LocalAPIServer  # noqa: PLC0415 -- keep `migdra --help` light
    from dra_driver.controlplane.apiserver.settings import ApiServerSettings  # noqa: PLC0415

    given: dict[str, Any] = {"host": host, "port": port, "snapshot": snapshot, "token_file": token_file}
    settings = ApiServerSettings(**{k: v for k, v in given.items() if v is not None})
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with LocalAPIServer(settings) as api:
        api.write_kubeconfig(kubeconfig_out)
        click.echo(f"migdra local API server listening on {api.url}; kubeconfig: {kubeconfig_out}", err=True)
        stop.wait()
