"""containerd for a real node: its configuration, its process, and the images it needs.

The configuration keeps everything containerd owns in the node's directory (root, state, sockets, runc's
state, the CNI configuration, host-local's address leases) and says what this machine needs:

- ``restrict_oom_score_adj = true``: root here lacks CAP_SYS_RESOURCE, so runc cannot lower a container's
  ``oom_score_adj`` to what the kubelet asks (-997 for a sandbox), and without it every sandbox fails with
  ``can't get final child's PID from pipe: EOF``;
- CDI on, reading the directory ``migdra kubelet-plugin`` writes its specs to (containerd 2.x has CDI on
  by default; Debian's containerd 1.6 has none, hence one built from its module by ``make node``);
- runc from Debian with cgroupfs (no systemd here), a bridge network of the node's own, the locally built
  pause image pinned as the sandbox image (no registry is reachable), NRI off.

What containerd and its shims still write outside the node's directory (``/run/containerd/s`` for shim
sockets, ``/var/lib/cni`` for libcni's result cache, the bridge) is undone by :mod:`.host`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dra_driver.errors import MigdraError
from migdra_devcluster.realnode.images import PAUSE_IMAGE, ImageArchive

CNI_BIN_DIR = Path("/usr/lib/cni")
READY_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class ContainerdFiles:
    """Where one node's containerd keeps everything (all under ``directory``)."""

    directory: Path

    @property
    def config(self) -> Path:
        return self.directory / "config.toml"

    @property
    def socket(self) -> Path:
        return self.directory / "containerd.sock"

    @property
    def root(self) -> Path:
        return self.directory / "root"

    @property
    def state(self) -> Path:
        return self.directory / "state"

    @property
    def runc_root(self) -> Path:
        return self.directory / "runc"

    @property
    def cni_conf_dir(self) -> Path:
        return self.directory / "cni"

    @property
    def cni_data_dir(self) -> Path:
        return self.directory / "cni-leases"

    @property
    def log(self) -> Path:
        return self.directory / "containerd.log"


@dataclass(frozen=True, slots=True)
class NodeNetwork:
    """The node's pod network: a Linux bridge of its own and the subnet its pods get addresses from."""

    bridge: str
    subnet: str


def _toml_string(value: str | Path) -> str:
    return json.dumps(str(value))  # a TOML basic string is a JSON string


def render_containerd_config(files: ContainerdFiles, cdi_spec_dir: Path, runc: Path) -> str:
    """containerd's configuration (version 3, containerd 2.x) for one real node."""
    runtime = "plugins.'io.containerd.cri.v1.runtime'"
    q = _toml_string
    return "\n".join(
        [
            "version = 3",
            f"root = {q(files.root)}",
            f"state = {q(files.state)}",
            "",
            "[grpc]",
            f"  address = {q(files.socket)}",
            "[ttrpc]",
            f"  address = {q(str(files.socket) + '.ttrpc')}",
            "",
            f"[{runtime}]",
            "  enable_cdi = true",
            f"  cdi_spec_dirs = [{q(cdi_spec_dir)}]",
            "  restrict_oom_score_adj = true",
            f"[{runtime}.containerd]",
            "  default_runtime_name = 'runc'",
            f"[{runtime}.containerd.runtimes.runc]",
            "  runtime_type = 'io.containerd.runc.v2'",
            f"[{runtime}.containerd.runtimes.runc.options]",
            f"  BinaryName = {q(runc)}",
            f"  Root = {q(files.runc_root)}",
            "  SystemdCgroup = false",
            f"[{runtime}.cni]",
            f"  bin_dirs = [{q(CNI_BIN_DIR)}]",
            f"  conf_dir = {q(files.cni_conf_dir)}",
            "",
            "[plugins.'io.containerd.cri.v1.images'.pinned_images]",
            f"  sandbox = {q(PAUSE_IMAGE)}",
            "",
            "[plugins.'io.containerd.nri.v1.nri']",
            "  disable = true",
            "",
        ]
    )


def render_cni_config(network: NodeNetwork, files: ContainerdFiles) -> str:
    """A bridge network with host-local addresses whose leases stay in the node's directory."""
    return json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": f"migdra-{network.bridge}",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": network.bridge,
                    "isGateway": True,
                    "ipMasq": False,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(files.cni_data_dir),
                        "ranges": [[{"subnet": network.subnet}]],
                    },
                },
                {"type": "loopback"},
            ],
        },
        indent=2,
    )


def write_containerd_files(files: ContainerdFiles, network: NodeNetwork, cdi_spec_dir: Path, runc: Path) -> None:
    for directory in (files.directory, files.cni_conf_dir, files.cni_data_dir, cdi_spec_dir):
        directory.mkdir(parents=True, exist_ok=True)
    files.config.write_text(render_containerd_config(files, cdi_spec_dir, runc))
    (files.cni_conf_dir / "10-migdra.conflist").write_text(render_cni_config(network, files))


class ContainerdNotReady(MigdraError):
    """containerd did not answer on its socket in time, or refused an image."""


def wait_until_serving(
    ctr: Path, files: ContainerdFiles, alive: Callable[[], bool], timeout: float = READY_TIMEOUT_S
) -> None:
    """Until ``ctr version`` gets an answer over the socket (the explicit signal that it serves)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if not alive():
            raise ContainerdNotReady(f"containerd exited before it served; see {files.log}")
        answered = subprocess.run(
            [str(ctr), "--address", str(files.socket), "version"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if answered.returncode == 0 and "Server:" in answered.stdout:
            return
        last = answered.stderr.strip()
        time.sleep(0.2)
    raise ContainerdNotReady(f"containerd did not serve on {files.socket} within {timeout:.0f} s: {last}")


def import_images(ctr: Path, files: ContainerdFiles, images: tuple[ImageArchive, ...]) -> None:
    """Import image archives into the ``k8s.io`` namespace (the CRI's), unpacked for the default snapshotter."""
    for image in images:
        imported = subprocess.run(
            [
                str(ctr),
                "--address",
                str(files.socket),
                "--namespace",
                "k8s.io",
                "images",
                "import",
                "--platform",
                "linux/amd64",
                str(image.path),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if imported.returncode != 0:
            raise ContainerdNotReady(f"ctr images import {image.path} failed: {imported.stderr.strip()}")


def find_runc() -> Path:
    found = shutil.which("runc")
    if found is None:
        raise ContainerdNotReady("no runc on PATH (Debian: apt-get install runc)")
    return Path(found)
