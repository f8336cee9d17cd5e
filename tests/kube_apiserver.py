"""The real kube-apiserver (on its own etcd) for one test: what every claim status test writes against.

Why the real one: claim status is written by server-side apply (docs/claim-status.md), whose field
ownership, conflicts and validation only kube-apiserver decides; migdra's local API server once
accepted a status write that the real one refuses.  Built by ``make kube`` (``tests/kube`` says how
the tier finds the binaries); without them the test is skipped, and ``MIGDRA_REQUIRE_KUBE=1`` (CI)
makes that a failure.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from migdra_devcluster.apiserver.kubeconfig import write_kubeconfig
from migdra_devcluster.upstream.binaries import TOOLS_DIR, built_versions, find_binaries
from migdra_devcluster.upstream.components import KubeFiles, Ports, build_apiserver_argv, build_etcd_argv
from migdra_devcluster.upstream.controlplane import (
    ADMIN_GROUP,
    ADMIN_USER,
    UpstreamProcess,
    free_port,
    wait_healthy,
    write_audit_policy,
)
from migdra_devcluster.upstream.pki import write_cluster_pki

READY_TIMEOUT_SECONDS = 180.0
"""etcd and kube-apiserver each, on a machine whose two CPUs run other tests' servers too."""


@dataclass
class KubeApiServer:
    """One running kube-apiserver as a test reaches it: an admin (``system:masters``) kubeconfig; an
    outage is :meth:`stop` then :meth:`start` (the same port, the same etcd: nothing is lost)."""

    url: str
    kubeconfig_path: Path
    workdir: Path
    process: UpstreamProcess
    command: list[str]
    files: KubeFiles
    ca: ssl.SSLContext

    def stop(self) -> None:
        """kube-apiserver goes away (etcd stays): every request is refused until :meth:`start`."""
        self.process.stop()

    def start(self) -> None:
        """kube-apiserver again, on the same port, waited for until ready."""
        self.process = UpstreamProcess("kube-apiserver", self.command, self.files, lambda line: None)
        self.process.start()
        wait_healthy(self.process, f"{self.url}/readyz", self.ca, timeout=READY_TIMEOUT_SECONDS)

    def write_kubeconfig(self, path: Path) -> Path:
        """Another copy of the admin kubeconfig (a component's own file)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.kubeconfig_path.read_bytes())
        path.chmod(0o600)
        return path


def require_kube_binaries() -> None:
    """Skip the calling test without ``make kube``'s binaries (fail instead where CI requires them)."""
    if built_versions():
        return
    reason = f"no Kubernetes binaries in {TOOLS_DIR}: `make kube` builds them"
    if os.environ.get("MIGDRA_REQUIRE_KUBE") == "1":
        pytest.fail(f"MIGDRA_REQUIRE_KUBE=1 but {reason}")
    pytest.skip(reason)


@contextmanager
def kube_apiserver(workdir: Path) -> Iterator[KubeApiServer]:
    """etcd + kube-apiserver of the oldest built version (``MIGDRA_KUBE_VERSION`` picks another), with the
    development cluster's flags (every DRA gate it sets, Node+RBAC authorization), stopped afterwards."""
    binaries = find_binaries(None, os.environ.get("MIGDRA_KUBE_VERSION") or built_versions()[0])
    files = KubeFiles(workdir / "kube")
    files.directory.mkdir(parents=True)
    ports = Ports(free_port(), free_port(), free_port(), free_port(), free_port())
    pki = write_cluster_pki(files.pki.directory)
    write_audit_policy(files)
    url = f"https://127.0.0.1:{ports.apiserver}"
    kubeconfig = write_kubeconfig(
        workdir / "kubeconfig", url, None, pki.ca_pem(), pki.client_certificate(ADMIN_USER, (ADMIN_GROUP,))
    )
    processes: list[UpstreamProcess] = []
    server: KubeApiServer | None = None
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
            wait_healthy(process, health, context, timeout=READY_TIMEOUT_SECONDS)
        server = KubeApiServer(
            url, kubeconfig, workdir, processes[-1], command, files, ssl.create_default_context(cafile=str(pki.ca_cert))
        )
        yield server
    finally:
        if server is not None:
            processes[-1] = server.process  # the one running now, after any outage
        for process in reversed(processes):
            process.stop()
