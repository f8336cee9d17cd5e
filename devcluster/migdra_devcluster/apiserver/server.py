"""``LocalAPIServer``: the store, the garbage collector, the snapshot writer and the HTTP server, started
and stopped together.

    with LocalAPIServer() as api:
        api.url, api.kubeconfig_path
        api.write_kubeconfig(path)

With a token file the server speaks HTTPS (client-go sends bearer tokens only over TLS) with a CA made
at start; the kubeconfig it writes carries that CA.  Start-up creates the ``default``, ``kube-system``,
``kube-public`` and ``kube-node-lease`` namespaces (unless a snapshot already has them).  Stop ends
every watch and connection and joins every thread it started, so tests that check for leaked threads
stay green.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

from migdra_devcluster.apiserver.auth import TokenAuthenticator
from migdra_devcluster.apiserver.authz import RbacAuthorizer
from migdra_devcluster.apiserver.errors import ListenError
from migdra_devcluster.apiserver.gc import GarbageCollector
from migdra_devcluster.apiserver.http import ApiContext, ApiHTTPServer
from migdra_devcluster.apiserver.kubeconfig import write_kubeconfig
from migdra_devcluster.apiserver.operations import Operations, WriteOptions
from migdra_devcluster.apiserver.registry import Registry
from migdra_devcluster.apiserver.settings import ApiServerSettings
from migdra_devcluster.apiserver.snapshot import SnapshotWriter, load_snapshot
from migdra_devcluster.apiserver.store import Store
from migdra_devcluster.apiserver.tls import ServingCertificate, write_serving_certificate

log = logging.getLogger(__name__)
BOOTSTRAP_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class LocalAPIServer:
    """An in-process API server; keyword arguments are :class:`ApiServerSettings` fields."""

    def __init__(self, settings: ApiServerSettings | None = None, **fields: Any) -> None:
        self.settings = settings or ApiServerSettings(**fields)
        self.registry = Registry()
        self.store = Store(self.settings.history_limit)
        self.operations = Operations(self.store, self.registry)
        self.authenticator = (
            TokenAuthenticator.from_file(self.settings.token_file) if self.settings.token_file else None
        )
        self.authorizer = (
            RbacAuthorizer(self.operations, self.registry) if self.settings.authorization == "RBAC" else None
        )
        self._gc = GarbageCollector(self.operations, self.settings.gc_interval)
        self._snapshots = (
            SnapshotWriter(self.store, self.settings.snapshot, self.settings.snapshot_interval)
            if self.settings.snapshot
            else None
        )
        self._httpd: ApiHTTPServer | None = None
        self._serve_thread: threading.Thread | None = None
        self._tmpdir: Path | None = None
        self.kubeconfig_path: Path | None = None
        self.certificate: ServingCertificate | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` once started."""
        if self._httpd is None:
            raise RuntimeError("the API server is not started")
        host, port = self._httpd.server_address[:2]
        scheme = "https" if self._httpd.tls is not None else "http"
        return f"{scheme}://{host!s}:{port}"

    @property
    def ca_cert_path(self) -> Path | None:
        """The CA that signed the serving certificate (HTTPS only), e.g. for ``Configuration.ssl_ca_cert``."""
        return self.certificate.ca_path if self.certificate else None

    @property
    def port(self) -> int:
        """The TCP port actually bound."""
        return int(self.url.rsplit(":", 1)[1])

    def start(self) -> LocalAPIServer:
        """Load the snapshot, bootstrap namespaces, start the threads and listen."""
        if self.settings.snapshot:
            load_snapshot(self.store, self.settings.snapshot)
        self._bootstrap()
        context = ApiContext(
            registry=self.registry,
            operations=self.operations,
            authenticator=self.authenticator,
            authorizer=self.authorizer,
            bookmark_interval=self.settings.bookmark_interval,
            watch_max_pending=self.settings.watch_max_pending,
        )
        self._tmpdir = Path(tempfile.mkdtemp(prefix="migdra-apiserver-"))
        tls = self.settings.tls if self.settings.tls is not None else self.settings.token_file is not None
        try:
            if tls:
                self.certificate = write_serving_certificate(self._tmpdir, self.settings.host)
            self._httpd = ApiHTTPServer(
                (self.settings.host, self.settings.port),
                context,
                self.certificate.server_context() if self.certificate else None,
            )
        except (OSError, ValueError) as exc:  # the port is taken, the host is unknown or not this machine's
            shutil.rmtree(self._tmpdir, ignore_errors=True)  # nothing else has started yet
            self._tmpdir, self.certificate = None, None
            raise ListenError(
                f"cannot listen on {self.settings.host}:{self.settings.port}: {getattr(exc, 'strerror', None) or exc}"
            ) from exc
        self._serve_thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="apiserver-http"
        )
        self._serve_thread.start()
        self._gc.start()
        if self._snapshots:
            self._snapshots.start()
        self.kubeconfig_path = self.write_kubeconfig(self._tmpdir / "kubeconfig")
        log.info("local API server listening on %s", self.url)
        return self

    def _bootstrap(self) -> None:
        namespaces = self.registry.namespaces
        for name in BOOTSTRAP_NAMESPACES:
            if self.store.get(namespaces.key, "", name) is None:
                self.operations.create(namespaces, None, {"metadata": {"name": name}}, WriteOptions())

    def write_kubeconfig(self, path: Path | str, token: str | None = None) -> Path:
        """Write a kubeconfig for this server (with ``token``, or the token file's first one) to ``path``."""
        if token is None and self.authenticator is not None:
            token = self.authenticator.first_token()
        ca_pem = self.certificate.ca_path.read_bytes() if self.certificate else None
        return write_kubeconfig(Path(path), self.url, token, ca_pem)

    def stop(self) -> None:
        """End watches and connections, stop every thread, write the final snapshot."""
        if self._httpd is not None:
            self._httpd.context.stopping.set()
            self.store.close_all_watches()
            self._httpd.shutdown()
            self._httpd.close_connections()
            self._httpd.server_close()
            if self._serve_thread is not None:
                self._serve_thread.join()
            self._httpd = None
        self._gc.stop()
        if self._snapshots:
            self._snapshots.stop()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None
            self.certificate = None

    def __enter__(self) -> LocalAPIServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
