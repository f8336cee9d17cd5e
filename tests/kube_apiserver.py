"""The real kube-apiserver (on its own etcd) for one test: what every claim status test writes against.

Why the real one: claim status is written by server-side apply (docs/claim-status.md), whose field
ownership, conflicts and validation only kube-apiserver decides; migdra's local API server once
accepted a status write that the real one refuses.  Built by ``make kube`` (``tests/kube`` says how
the tier finds the binaries); without them the test is skipped, and ``MIGDRA_REQUIRE_KUBE=1`` (CI)
makes that a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from migdra_devcluster.apiserver.kubeconfig import write_kubeconfig
from migdra_devcluster.upstream.binaries import TOOLS_DIR, built_versions, find_binaries
from migdra_devcluster.upstream.components import KubeFiles, Ports
from migdra_devcluster.upstream.controlplane import (
    ADMIN_GROUP,
    ADMIN_USER,
    Component,
    UpstreamProcess,
    build_store_and_apiserver,
    free_port,
    running,
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
    component: Component
    files: KubeFiles

    def stop(self) -> None:
        """kube-apiserver goes away (etcd stays): every request is refused until :meth:`start`."""
        self.process.stop()

    def start(self) -> None:
        """kube-apiserver again, on the same port, waited for until ready."""
        component = self.component
        self.process = UpstreamProcess(component.name, component.argv, self.files, _quiet)
        self.process.start()
        wait_healthy(self.process, component.health_url, component.context, timeout=READY_TIMEOUT_SECONDS)

    def write_kubeconfig(self, path: Path) -> Path:
        """Another copy of the admin kubeconfig (a component's own file)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.kubeconfig_path.read_bytes())
        path.chmod(0o600)
        return path


REQUIRE = "MIGDRA_REQUIRE_KUBE"
"""Set to 1 (as CI does after ``make kube``), a missing binary fails what needs it instead of skipping it."""


def missing_kube_binaries() -> str | None:
    """Why the upstream binaries cannot run here, or None when ``make kube`` built them."""
    return None if built_versions() else f"no Kubernetes binaries in {TOOLS_DIR}: `make kube` builds them"


def require_kube_binaries() -> None:
    """Skip the calling test without ``make kube``'s binaries, so ``make test`` runs on a machine without
    Go; fail it instead where ``MIGDRA_REQUIRE_KUBE=1`` (CI), so it can never silently stop running there."""
    reason = missing_kube_binaries()
    if reason is None:
        return
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{REQUIRE}=1 but {reason}")
    pytest.skip(reason)


@contextmanager
def kube_apiserver(workdir: Path) -> Iterator[KubeApiServer]:
    """etcd + kube-apiserver of the oldest built version (``MIGDRA_KUBE_VERSION`` picks another), started
    as the development cluster starts them (every DRA gate it sets, Node+RBAC authorization), stopped
    afterwards.  The admin's certificate and key are also written as ``admin.crt``/``admin.key`` in
    ``workdir``, for a test that speaks raw HTTP."""
    binaries = find_binaries(None, os.environ.get("MIGDRA_KUBE_VERSION") or built_versions()[0])
    files = KubeFiles(workdir / "kube")
    files.directory.mkdir(parents=True)
    ports = Ports(free_port(), free_port(), free_port(), free_port(), free_port())
    pki = write_cluster_pki(files.pki.directory)
    write_audit_policy(files)
    url = f"https://127.0.0.1:{ports.apiserver}"
    admin = pki.client_certificate(ADMIN_USER, (ADMIN_GROUP,))
    kubeconfig = write_kubeconfig(workdir / "kubeconfig", url, None, pki.ca_pem(), admin)
    (workdir / "admin.crt").write_bytes(admin.cert_pem)
    (workdir / "admin.key").write_bytes(admin.key_pem)
    etcd, apiserver = build_store_and_apiserver(binaries, files, ports, pki.ca_cert)
    with running([etcd], files, _quiet, READY_TIMEOUT_SECONDS):
        server: KubeApiServer | None = None
        try:
            with running([apiserver], files, _quiet, READY_TIMEOUT_SECONDS) as (process,):
                server = KubeApiServer(url, kubeconfig, workdir, process, apiserver, files)
                yield server
        finally:
            if server is not None:
                server.process.stop()  # the one running now, after any outage (stopping twice is safe)


def _quiet(line: str) -> None:
    """The processes' progress lines: a test reads their logs when it fails, not their chatter."""
