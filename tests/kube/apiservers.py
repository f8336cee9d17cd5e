"""Two API servers side by side for the differential test: the real kube-apiserver (on its etcd, started
with the upstream module's parts, no controllers: nothing but the test writes to the objects it
compares) and migdra's :class:`LocalAPIServer`, each reached with the same raw HTTP requests.

Why raw HTTP and not the official client: the test compares what each server *answers* -- status
codes, ``Status`` reasons, causes -- for bodies a client library would refuse to send (bad types,
stale versions, patches of every content type).
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3

from migdra_devcluster.apiserver import LocalAPIServer
from migdra_devcluster.apiserver.kubeconfig import write_kubeconfig
from migdra_devcluster.upstream.binaries import find_binaries
from migdra_devcluster.upstream.components import (
    KubeFiles,
    Ports,
    build_apiserver_argv,
    build_etcd_argv,
)
from migdra_devcluster.upstream.controlplane import (
    ADMIN_GROUP,
    ADMIN_USER,
    UpstreamProcess,
    free_port,
    wait_healthy,
    write_audit_policy,
)
from migdra_devcluster.upstream.pki import write_cluster_pki
from tests.kube.cluster import READY_TIMEOUT, kube_version


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: the status code and the body (JSON when it is JSON, else the text)."""

    status: int
    body: Any


class ApiEndpoint:
    """One API server as the test reaches it: a base URL, a TLS context and a kubeconfig for kubectl."""

    def __init__(self, name: str, url: str, kubeconfig: Path, pool: urllib3.PoolManager) -> None:
        self.name = name
        self.url = url
        self.kubeconfig = kubeconfig
        self._pool = pool

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json", timeout: float = 30
    ) -> Answer:
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        answer = self._pool.request(method, self.url + path, body=data, headers=headers, timeout=timeout, retries=False)
        text = answer.data.decode(errors="replace")
        try:
            return Answer(answer.status, json.loads(text))
        except ValueError:
            return Answer(answer.status, text)

    def watch(self, path: str, seconds: float) -> list[dict[str, Any]]:
        """The events of a watch that the server ends after ``seconds`` (``timeoutSeconds``)."""
        joiner = "&" if "?" in path else "?"
        answer = self._pool.request(
            "GET",
            f"{self.url}{path}{joiner}watch=true&timeoutSeconds={int(seconds)}",
            headers={"Accept": "application/json"},
            timeout=seconds + 30,
            retries=False,
            preload_content=True,
        )
        lines = answer.data.decode().splitlines()
        return [json.loads(line) for line in lines if line.strip()]


@contextmanager
def real_apiserver(workdir: Path) -> Iterator[ApiEndpoint]:
    """etcd + kube-apiserver of the built version, with the components module's flags; an admin
    (``system:masters``) client certificate."""
    binaries = find_binaries(None, kube_version())
    files = KubeFiles(workdir / "kube")
    files.directory.mkdir(parents=True)
    ports = Ports(free_port(), free_port(), free_port(), free_port(), free_port())
    pki = write_cluster_pki(files.pki.directory)
    write_audit_policy(files)
    admin = pki.client_certificate(ADMIN_USER, (ADMIN_GROUP,))
    url = f"https://127.0.0.1:{ports.apiserver}"
    kubeconfig = write_kubeconfig(workdir / "kubeconfig", url, None, pki.ca_pem(), admin)
    (workdir / "admin.crt").write_bytes(admin.cert_pem)
    (workdir / "admin.key").write_bytes(admin.key_pem)
    processes: list[UpstreamProcess] = []
    try:
        for name, command, health, context in (
            (
                "etcd",
                build_etcd_argv(binaries.path("etcd"), files, ports),
                f"http://127.0.0.1:{ports.etcd_client}/health",
                None,
            ),
            (
                "kube-apiserver",
                build_apiserver_argv(binaries.path("kube-apiserver"), files, ports),
                f"{url}/readyz",
                ssl.create_default_context(cafile=str(pki.ca_cert)),
            ),
        ):
            process = UpstreamProcess(name, command, files, lambda line: None)
            process.start()
            processes.append(process)
            wait_healthy(process, health, context, timeout=READY_TIMEOUT)
        pool = urllib3.PoolManager(
            ca_certs=str(pki.ca_cert), cert_file=str(workdir / "admin.crt"), key_file=str(workdir / "admin.key")
        )
        yield ApiEndpoint("kube-apiserver", url, kubeconfig, pool)
    finally:
        for process in reversed(processes):
            process.stop()


@contextmanager
def local_apiserver() -> Iterator[ApiEndpoint]:
    """migdra's server with its defaults (no authentication, every request allowed: as the admin)."""
    with LocalAPIServer() as api:
        assert api.kubeconfig_path is not None
        pool = urllib3.PoolManager()
        try:
            yield ApiEndpoint("local", api.url, api.kubeconfig_path, pool)
        finally:
            pool.clear()
