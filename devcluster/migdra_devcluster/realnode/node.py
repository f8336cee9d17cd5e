"""One real node: containerd and the upstream kubelet as supervised processes, the host restored after.

The order matters.  Starting: record the host (so a stop, or ``sim down`` after ``kill -9``, can undo
everything), build and import the images, start containerd and wait until it serves, then the kubelet.
Stopping: the kubelet first (it would restart what is stopped under it), then every pod sandbox through
the CRI (containerd stops its containers and tears their networks down), containerd, and finally what
is left on the host (:func:`~migdra_devcluster.realnode.host.restore_host`).  The plugin is not started
here: the cluster starts it as it does for a simulated node, pointed at this kubelet's directories.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dra_driver.errors import MigdraError
from dra_driver.nvml.sim import DEFAULT_DRIVER_VERSION
from migdra_devcluster.ports import free_port
from migdra_devcluster.realnode.containerd import (
    ContainerdFiles,
    NodeNetwork,
    find_runc,
    import_images,
    wait_until_serving,
    write_containerd_files,
)
from migdra_devcluster.realnode.devices import make_device_nodes
from migdra_devcluster.realnode.driver_root import build_fake_driver_root
from migdra_devcluster.realnode.host import record_host, restore_host
from migdra_devcluster.realnode.images import write_node_images
from migdra_devcluster.realnode.kubelet import (
    KubeletFiles,
    KubeletPorts,
    build_kubelet_argv,
    node_address,
    write_kubelet_config,
)
from migdra_devcluster.supervision import SupervisedProcess

REAL_NODE_DIR = "real"
"""A real node's files are under ``<workdir>/nodes/<node>/real`` (its pid files: ``REAL_NODE_PID_GLOB``)."""
NODE_TOOLS_DIR = Path(__file__).resolve().parents[3] / ".tools" / "node" / "bin"
NODE_PROGRAMS = ("containerd", "containerd-shim-runc-v2", "ctr", "crictl")


class RealNodeError(MigdraError):
    """A real node cannot start here (another one runs): one line, as every expected failure of migdra."""


HOST_CLAIM_NAME = b"\0migdra-real-node"
"""The abstract unix socket a running real node holds: one per host (two kubelets would share
``/var/lib/kubelet/device-plugins``).  Abstract: no file is left behind, and the kernel releases it when
the holding process dies, also after ``kill -9``."""


def claim_host() -> socket.socket:
    """Hold this host's one real node for as long as the returned socket is open."""
    claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        claim.bind(HOST_CLAIM_NAME)
    except OSError as exc:
        claim.close()
        raise RealNodeError(
            "another real node runs on this host (a migdra sim up with --real-node): one per host, as two "
            "kubelets would share /var/lib/kubelet/device-plugins; stop it first (migdra sim down)"
        ) from exc
    return claim


@dataclass(frozen=True, slots=True)
class RealNodeSpec:
    name: str
    directory: Path  # <workdir>/nodes/<name>/real
    kubelet: Path
    node_bin: Path
    client_ca: Path
    kubelet_kubeconfig_writer: Callable[[Path], None]  # writes the kubelet's kubeconfig (system:node:<name>)
    network: NodeNetwork
    gpu_count: int  # simulated GPUs, minors 0 … gpu_count - 1: their device nodes are made

    @property
    def cgroup_root(self) -> str:
        return f"/migdra-{self.name}"


def real_node_problem(node_bin: Path = NODE_TOOLS_DIR) -> str | None:
    """Why a real node cannot run here, or None."""
    if os.geteuid() != 0:
        return "a real node needs root (the kubelet and runc manage cgroups, mounts and network namespaces)"
    missing = [name for name in NODE_PROGRAMS if not (node_bin / name).is_file()]
    if missing:
        return f"no {', '.join(missing)} in {node_bin}; build them with `make node`"
    return None


class _NodeProcess(SupervisedProcess):
    def __init__(
        self, name: str, argv: list[str], directory: Path, node_bin: Path, progress: Callable[[str], None]
    ) -> None:
        program = name.split(maxsplit=1)[0]
        super().__init__(name, directory / f"{program}.log", directory / f"{program}.pid", progress)
        self._argv = argv
        self._node_bin = node_bin

    def argv(self) -> list[str]:
        return self._argv

    def env(self) -> dict[str, str]:
        env = super().env()
        env["PATH"] = f"{self._node_bin}:{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"  # containerd's shim
        return env


class RealNode:
    """containerd and the kubelet of one node, on this host."""

    def __init__(self, spec: RealNodeSpec, progress: Callable[[str], None]) -> None:
        self.spec = spec
        self.progress = progress
        self.containerd_files = ContainerdFiles(spec.directory / "containerd")
        self.kubelet_files = KubeletFiles(spec.directory / "kubelet")
        self.cdi_dir = spec.directory / "cdi"
        self.dev_root = spec.directory / "dev-root"
        self.driver_root = spec.directory / "driver-root"
        self.containerd: _NodeProcess | None = None
        self.kubelet: _NodeProcess | None = None
        self._host_claim: socket.socket | None = None

    @property
    def plugins_registry(self) -> Path:
        return self.kubelet_files.plugins_registry

    def plugin_dir(self, driver_name: str) -> Path:
        return self.kubelet_files.plugin_dir(driver_name)

    def start(self) -> None:
        spec = self.spec
        self._host_claim = claim_host()
        record_host(spec.directory, spec.network.bridge, spec.cgroup_root)
        images = write_node_images(spec.directory / "images")
        make_device_nodes(self.dev_root, list(range(spec.gpu_count)))
        build_fake_driver_root(self.driver_root, DEFAULT_DRIVER_VERSION)  # the simulated NVML's driver
        write_containerd_files(self.containerd_files, spec.network, self.cdi_dir, find_runc())
        self.progress(f"{spec.name}: starting containerd (real node)")
        containerd = spec.node_bin / "containerd"
        self.containerd = _NodeProcess(
            f"containerd of {spec.name}",
            [str(containerd), "--config", str(self.containerd_files.config)],
            spec.directory,
            spec.node_bin,
            self.progress,
        )
        self.containerd.start()
        wait_until_serving(spec.node_bin / "ctr", self.containerd_files, lambda: self._running(self.containerd))
        import_images(spec.node_bin / "ctr", self.containerd_files, images)
        ports = KubeletPorts(serving=free_port(), healthz=free_port())
        address = node_address()
        if address is None:
            self.progress(f"{spec.name}: no default route: the kubelet serves on loopback (no kubectl logs/exec)")
        write_kubelet_config(
            self.kubelet_files, ports, spec.client_ca, self.containerd_files.socket, spec.cgroup_root, address
        )
        spec.kubelet_kubeconfig_writer(self.kubelet_files.kubeconfig)
        self.progress(f"{spec.name}: starting the kubelet (real node)")
        self.kubelet = _NodeProcess(
            f"kubelet of {spec.name}",
            build_kubelet_argv(spec.kubelet, self.kubelet_files, spec.name, address),
            spec.directory,
            spec.node_bin,
            self.progress,
        )
        self.kubelet.start()

    @staticmethod
    def _running(process: _NodeProcess | None) -> bool:
        return process is not None and process.exited() is None

    def crictl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """crictl against this node's containerd (what an operator runs on a node)."""
        endpoint = f"unix://{self.containerd_files.socket}"
        return subprocess.run(
            [str(self.spec.node_bin / "crictl"), "--runtime-endpoint", endpoint, "--image-endpoint", endpoint, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def stop(self) -> None:
        """Stop the kubelet, the pods, containerd; restore the host.  Safe to call twice."""
        if self.kubelet is not None:
            self.kubelet.stop()
            self.kubelet = None
        if self.containerd is not None:
            if self._running(self.containerd):
                self.crictl("rmp", "--all", "--force")
            self.containerd.stop()
            self.containerd = None
        restored = restore_host(self.spec.directory)
        if self._host_claim is not None:
            self._host_claim.close()
            self._host_claim = None
        if restored is not None and (restored.sysctls or restored.bridge_removed):
            self.progress(
                f"{self.spec.name}: host restored (sysctls {', '.join(restored.sysctls) or 'unchanged'}; "
                f"bridge {self.spec.network.bridge} {'removed' if restored.bridge_removed else 'kept'})"
            )


def restore_real_nodes(workdir: Path) -> list[str]:
    """Undo what the real nodes of a cluster left on the host (``sim down``, or ``sim up`` reusing a
    workdir whose cluster was killed): their processes must be gone already; the nodes restored."""
    restored = []
    for directory in sorted(workdir.glob(f"nodes/*/{REAL_NODE_DIR}")):
        if restore_host(directory) is not None:
            restored.append(directory.parent.name)
    return restored
