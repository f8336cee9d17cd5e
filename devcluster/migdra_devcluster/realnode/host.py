"""What a real node changes on the host outside its directory, recorded before it starts and undone after.

The kubelet and containerd keep most of their state where they are told (the node's directory), but not
all of it: the kubelet sets three sysctls (``vm.overcommit_memory=1``, ``kernel.panic=10``,
``kernel.panic_on_oops=1``), writes ``/var/lib/kubelet/device-plugins`` and ``/var/log/containers``
whatever its root directory, bind-mounts its root directory onto itself and mounts each pod's volumes
under it; containerd's shims put their sockets in ``/run/containerd/s``; libcni caches results in
``/var/lib/cni``; the bridge plugin creates the node's bridge; the kubelet's cgroups go under the cgroup
root given to it, in every controller.

:func:`record_host` writes what was there before into the node's directory (``host-before.json``), so that
:func:`restore_host` can undo it from that file alone: after a clean stop, and after ``kill -9`` of
``migdra sim up`` when ``sim down`` finds the file.  Only what the record says was absent is removed, and a
directory only when nothing but the node's own leftovers is in it; sysctls get their recorded values.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict

SYSCTLS = ("vm.overcommit_memory", "kernel.panic", "kernel.panic_on_oops")
HOST_PATHS = (
    Path("/var/lib/kubelet"),
    Path("/var/log/containers"),
    Path("/var/log/pods"),
    Path("/run/containerd"),
    Path("/var/lib/cni"),
    Path("/run/netns"),
)
NETNS_DIR = Path("/run/netns")
"""Where containerd pins each pod sandbox's network namespace (a bind mount of ``/proc/<pid>/ns/net`` on
``cni-<uuid>``); a sandbox that was not removed through the CRI (containerd killed) leaves its pin, and
the pin keeps the namespace and its veth on the node's bridge alive."""
CGROUP_ROOT = Path("/sys/fs/cgroup")
RECORD_NAME = "host-before.json"
_MNT_DETACH = 2


class HostRecord(BaseModel):
    """The host as it was before a real node started (the node's ``host-before.json``)."""

    model_config = ConfigDict(extra="forbid")

    node_directory: str
    sysctls: dict[str, str]
    absent_paths: list[str]  # host paths that did not exist: removed again when the node stops
    bridge: str
    bridge_existed: bool
    cgroup_parent: str  # the kubelet's cgroup root, e.g. "/migdra-node-1", created in every controller
    netns_before: list[str]  # the entries of NETNS_DIR before: the others are the node's pods'


@dataclass(frozen=True, slots=True)
class Restored:
    """What :func:`restore_host` undid, for the log and the tests."""

    unmounted: tuple[str, ...]
    removed_paths: tuple[str, ...]
    sysctls: tuple[str, ...]
    bridge_removed: bool
    cgroups_removed: int


def sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def bridge_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def record_host(node_directory: Path, bridge: str, cgroup_parent: str) -> HostRecord:
    """Record the host's state before a real node starts; written into the node's directory first."""
    record = HostRecord(
        node_directory=str(node_directory),
        sysctls={name: sysctl_path(name).read_text().strip() for name in SYSCTLS},
        absent_paths=[str(path) for path in HOST_PATHS if not path.exists()],
        bridge=bridge,
        bridge_existed=bridge_exists(bridge),
        cgroup_parent=cgroup_parent,
        netns_before=network_namespaces(),
    )
    node_directory.mkdir(parents=True, exist_ok=True)
    (node_directory / RECORD_NAME).write_text(record.model_dump_json(indent=2))
    for controller in cgroup_controllers():
        (controller / cgroup_parent.lstrip("/")).mkdir(exist_ok=True)
    return record


def cgroup_controllers(*, unified: bool = False) -> list[Path]:
    """The cgroup v1 hierarchies the kubelet wants its cgroup root in: every one mounted, the named
    ``systemd`` one included (the kubelet refuses a root missing there); with ``unified`` also the v2
    hierarchy of a hybrid host, where the kubelet makes the root itself (and it must go too)."""
    if not CGROUP_ROOT.is_dir():
        return []
    return sorted(
        path
        for path in CGROUP_ROOT.iterdir()
        if path.is_dir() and not path.is_symlink() and (unified or path.name != "unified")
    )


def mounts_under(directory: Path) -> list[str]:
    """Mount points at or below ``directory``, deepest first (the order they can be unmounted in)."""
    prefix = str(directory.resolve())
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    return sorted(set(points), key=lambda p: (-p.count("/"), p))


def restore_host(node_directory: Path) -> Restored | None:
    """Undo what the node's record says it changed; ``None`` when there is no record (nothing was started)."""
    path = node_directory / RECORD_NAME
    if not path.is_file():
        return None
    record = HostRecord.model_validate_json(path.read_text())
    kill_node_processes(node_directory, record.cgroup_parent)
    unmounted = _unmount_all(node_directory) + _remove_network_namespaces(set(record.netns_before))
    removed = []
    for absent in record.absent_paths:
        target = Path(absent)
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
            removed.append(absent)
    restored_sysctls = []
    for name, value in record.sysctls.items():
        if sysctl_path(name).read_text().strip() != value:
            sysctl_path(name).write_text(value)
            restored_sysctls.append(name)
    bridge_removed = False
    if not record.bridge_existed and bridge_exists(record.bridge):
        subprocess.run(["ip", "link", "delete", record.bridge], check=True, capture_output=True, timeout=30)
        bridge_removed = True
    parent = record.cgroup_parent.lstrip("/")
    cgroups = sum(_remove_cgroup_tree(c / parent) for c in cgroup_controllers(unified=True))
    path.unlink()
    return Restored(tuple(unmounted), tuple(removed), tuple(restored_sysctls), bridge_removed, cgroups)


def kill_node_processes(node_directory: Path, cgroup_parent: str, timeout: float = 10.0) -> int:
    """SIGKILL every container of the node (the processes in its cgroups) and every containerd shim serving
    it (named by its socket under the node's directory), and wait until they are gone: what remains of a
    node whose kubelet and containerd were killed without stopping their pods."""
    marker = str(node_directory.resolve()).encode()
    victims: set[int] = set()
    for controller in cgroup_controllers(unified=True):
        top = controller / cgroup_parent.lstrip("/")
        if top.is_dir():
            for procs in top.rglob("cgroup.procs"):
                victims.update(int(pid) for pid in procs.read_text().split())
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"containerd-shim" in command and marker in command:
                victims.add(int(entry.name))
    victims.discard(os.getpid())
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while any(Path(f"/proc/{pid}").exists() and not _zombie(pid) for pid in victims):
        if time.monotonic() > deadline:
            raise TimeoutError(f"processes of the real node in {node_directory} survived SIGKILL for {timeout:g} s")
        time.sleep(0.05)
    return len(victims)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def _unmount_all(directory: Path) -> list[str]:
    libc = ctypes.CDLL(None, use_errno=True)
    done = []
    for point in mounts_under(directory):
        if libc.umount2(point.encode(), _MNT_DETACH) == 0:
            done.append(point)
        else:
            error = ctypes.get_errno()
            raise OSError(error, f"cannot unmount {point}: {os.strerror(error)}")
    return done


def network_namespaces() -> list[str]:
    """The pinned network namespaces (names in :data:`NETNS_DIR`)."""
    return sorted(p.name for p in NETNS_DIR.iterdir()) if NETNS_DIR.is_dir() else []


def _remove_network_namespaces(keep: set[str]) -> list[str]:
    """Unpin and remove the network namespaces not in ``keep``; their veths go with them."""
    libc = ctypes.CDLL(None, use_errno=True)
    done = []
    for name in network_namespaces():
        if name in keep:
            continue
        pin = NETNS_DIR / name
        libc.umount2(str(pin).encode(), _MNT_DETACH)  # fails (EINVAL) only for a pin already unmounted
        pin.unlink(missing_ok=True)
        done.append(str(pin))
    return done


def _remove_cgroup_tree(top: Path) -> int:
    """Remove a cgroup and its children, leaves first (a cgroup directory goes with ``rmdir`` once empty
    of processes and children); returns how many went."""
    if not top.is_dir():
        return 0
    removed = 0
    for directory in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        directory.rmdir()
        removed += 1
    top.rmdir()
    return removed + 1
