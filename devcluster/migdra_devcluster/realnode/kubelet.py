"""The upstream kubelet of a real node: its configuration file and command line.

What this machine needs of it: ``failCgroupV1: false`` (the host is on cgroup v1, which kubelets from 1.35
refuse otherwise), ``cgroupDriver: cgroupfs`` (no systemd), ``failSwapOn: false``, a cgroup root of the
node's own (two kubelets on one host would otherwise share ``/kubepods``), eviction thresholds low enough
for a small disk, and its ports on the host's address (:func:`node_address`: kube-apiserver reaches it
there for ``kubectl logs`` and ``exec``; on loopback, without logs, when the host has no default route).
It authenticates to kube-apiserver with a client certificate for ``system:node:<name>`` in
``system:nodes``, so the Node authorizer and NodeRestriction admission judge it as any real node; its own
API accepts only clients with a certificate of the cluster CA (kube-apiserver has one).

DRA needs nothing more: ``resource.k8s.io/v1`` is GA.  The kubelet finds DRA plugins through
``<root-dir>/plugins_registry``; a plugin's sockets go under ``<root-dir>/plugins/<driver>/``.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REAL_NODE_LABEL = "migdra.io/real-node"
"""Label (``true``) and taint key of every real node."""
REAL_NODE_TAINT = {"key": REAL_NODE_LABEL, "effect": "NoSchedule"}
"""Every real node registers with this taint: it runs only the images built here (no registry is
reachable), so only pods that tolerate it are scheduled there; simulated nodes "run" any image."""


@dataclass(frozen=True, slots=True)
class KubeletFiles:
    """Where one real node's kubelet keeps its files (under ``directory``)."""

    directory: Path

    @property
    def root_dir(self) -> Path:
        return self.directory / "root"

    @property
    def config(self) -> Path:
        return self.directory / "kubelet-config.yaml"

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubelet.kubeconfig"

    @property
    def cert_dir(self) -> Path:
        return self.directory / "pki"

    @property
    def pod_logs(self) -> Path:
        return self.directory / "pod-logs"

    @property
    def log(self) -> Path:
        return self.directory / "kubelet.log"

    @property
    def plugins_registry(self) -> Path:
        return self.root_dir / "plugins_registry"

    def plugin_dir(self, driver_name: str) -> Path:
        return self.root_dir / "plugins" / driver_name


@dataclass(frozen=True, slots=True)
class KubeletPorts:
    serving: int
    healthz: int


def node_address() -> str | None:
    """The host's address on its default route (what the kubelet would detect itself), or None without one.

    The kubelet refuses a loopback ``--node-ip``; kube-apiserver reaches a kubelet (``kubectl logs``,
    ``exec``) at the Node's InternalIP, so the kubelet serves there.  Connecting a UDP socket sends nothing:
    it only asks the kernel which source address the route would use."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("198.51.100.1", 9))  # TEST-NET-2: routed by the default route, never answered
        except OSError:
            return None
        address: str = probe.getsockname()[0]
    return None if ipaddress.ip_address(address).is_loopback else address


def kubelet_configuration(
    files: KubeletFiles,
    ports: KubeletPorts,
    client_ca: Path,
    runtime_socket: Path,
    cgroup_root: str,
    address: str | None,
) -> dict[str, Any]:
    endpoint = f"unix://{runtime_socket}"
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": address or "127.0.0.1",
        "port": ports.serving,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": ports.healthz,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "AlwaysAllow"},  # every client already holds a certificate of the cluster CA
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": endpoint,
        "imageServiceEndpoint": endpoint,
        "podLogsDir": str(files.pod_logs),
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "maxPods": 30,
        "serializeImagePulls": False,
        "registerNode": True,
        "registerWithTaints": [REAL_NODE_TAINT],
        "nodeStatusUpdateFrequency": "5s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "20s",
        "shutdownGracePeriod": "0s",
        "protectKernelDefaults": False,
    }


def write_kubelet_config(
    files: KubeletFiles,
    ports: KubeletPorts,
    client_ca: Path,
    runtime_socket: Path,
    cgroup_root: str,
    address: str | None,
) -> None:
    for directory in (files.directory, files.root_dir, files.cert_dir, files.pod_logs):
        directory.mkdir(parents=True, exist_ok=True)
    configuration = kubelet_configuration(files, ports, client_ca, runtime_socket, cgroup_root, address)
    files.config.write_text(yaml.safe_dump(configuration, sort_keys=True))


def build_kubelet_argv(binary: Path, files: KubeletFiles, node_name: str, address: str | None) -> list[str]:
    return [
        str(binary),
        *([f"--node-ip={address}"] if address is not None else []),
        f"--config={files.config}",
        f"--kubeconfig={files.kubeconfig}",
        f"--hostname-override={node_name}",
        f"--node-labels={REAL_NODE_LABEL}=true",  # pods select real nodes by it (NodeRestriction allows it)
        f"--root-dir={files.root_dir}",
        f"--cert-dir={files.cert_dir}",
        "--v=2",
    ]
