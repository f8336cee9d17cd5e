"""etcd and kube-apiserver alone, with an admin kubeconfig: the API server of the tests that need one and
of the benchmarks, started exactly as ``sim up`` starts it (every DRA gate, Node+RBAC authorization,
the audit log), without the controllers, the scheduler or any node.

Why no controllers: a test of one component wants the API server's answers, not other writers beside
it.  What kube-controller-manager would have created (a namespace's ``default`` ServiceAccount, say) is
the caller's to create.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client

from dra_driver.kube.config import load_kubeconfig_file
from migdra_devcluster.kubeconfig import write_kubeconfig
from migdra_devcluster.upstream.binaries import KubeBinaries
from migdra_devcluster.upstream.components import KubeFiles
from migdra_devcluster.upstream.controlplane import ControlPlaneShape, UpstreamControlPlane

READY_TIMEOUT_SECONDS = 180.0
"""etcd and kube-apiserver each, on a machine whose two CPUs run other servers too."""


def _quiet(line: str) -> None:
    """The processes' progress lines: their logs are in the work directory for whoever needs them."""


APISERVER = "kube-apiserver"


@dataclass
class KubeApiServer:
    """One running kube-apiserver, reached with an admin (``system:masters``) kubeconfig; an outage is
    :meth:`stop` then :meth:`start` (the same port, the same etcd: nothing is lost)."""

    plane: UpstreamControlPlane

    @property
    def url(self) -> str:
        return self.plane.url

    @property
    def kubeconfig_path(self) -> Path:
        return self.plane.kubeconfig

    @property
    def workdir(self) -> Path:
        return self.plane.workdir

    @property
    def files(self) -> KubeFiles:
        return self.plane.files

    def stop(self) -> None:
        """kube-apiserver goes away (etcd stays): every request is refused until :meth:`start`."""
        self.plane.stop_component(APISERVER)

    def start(self) -> None:
        """kube-apiserver again, on the same port, waited for until ready."""
        self.plane.start_component(APISERVER)

    def configuration(self) -> client.Configuration:
        """A client configuration of the admin kubeconfig (a new one each call: callers may change it)."""
        return load_kubeconfig_file(self.kubeconfig_path, what="the admin kubeconfig")

    def api_client(self) -> client.ApiClient:
        """A new admin API client; the caller closes it."""
        return client.ApiClient(self.configuration())

    def write_token_kubeconfig(self, path: Path, token: str) -> Path:
        """A kubeconfig that logs in with ``token`` (a ServiceAccount's, from a TokenRequest)."""
        return write_kubeconfig(path, self.url, token, self.files.pki.ca_cert.read_bytes())

    def write_kubeconfig(self, path: Path) -> Path:
        """Another copy of the admin kubeconfig (a component's own file)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.kubeconfig_path.read_bytes())
        path.chmod(0o600)
        return path


@contextmanager
def standalone_apiserver(
    workdir: Path, binaries: KubeBinaries, progress: Callable[[str], None] = _quiet
) -> Iterator[KubeApiServer]:
    """etcd + kube-apiserver of ``binaries`` in ``workdir``, stopped afterwards.  The admin's certificate
    and key are also written as ``admin.crt``/``admin.key`` in ``workdir``, for raw HTTP."""
    workdir.mkdir(parents=True, exist_ok=True)
    shape = ControlPlaneShape(controller_manager=False, scheduler=False)
    plane = UpstreamControlPlane(workdir, binaries, shape, progress, timeout=READY_TIMEOUT_SECONDS)
    try:
        plane.start()
        yield KubeApiServer(plane)
    finally:
        plane.stop()
