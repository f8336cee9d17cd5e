"""Two API servers side by side for the differential test: the real kube-apiserver (on its etcd, started
with the upstream module's parts, no controllers: nothing but the test writes to the objects it
compares) and migdra's :class:`LocalAPIServer`, each reached with the same raw HTTP requests.

Why raw HTTP and not the official client: the test compares what each server *answers* -- status
codes, ``Status`` reasons, causes -- for bodies a client library would refuse to send (bad types,
stale versions, patches of every content type).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3

from migdra_devcluster.apiserver import LocalAPIServer
from tests.kube_apiserver import kube_apiserver


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
    """etcd + kube-apiserver of the built version (:func:`tests.kube_apiserver.kube_apiserver`), reached
    with an admin (``system:masters``) client certificate."""
    with kube_apiserver(workdir) as server:
        ca = server.files.pki.ca_cert
        pool = urllib3.PoolManager(
            ca_certs=str(ca), cert_file=str(workdir / "admin.crt"), key_file=str(workdir / "admin.key")
        )
        try:
            yield ApiEndpoint("kube-apiserver", server.url, server.kubeconfig_path, pool)
        finally:
            pool.clear()


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
