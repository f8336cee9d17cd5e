"""The unix socket files kubelet talks to us through: their names, their directories, their lifetime.

Owns: where the registration and DRA sockets live (including the rolling-update names that carry
the pod UID), creating missing directories with mode 0750, making sure a path is free before gRPC
binds it, restricting a bound socket to its owner (0600), and removing exactly the socket we
created at shutdown.  It never binds or serves anything itself; ``servers`` does that with gRPC.

Why the care before binding: gRPC unlinks whatever socket file sits at the path when it binds,
even one a live plugin is serving.  Two instances of the plugin started by mistake (or a second
DaemonSet) would silently steal each other's sockets.  So a path is only freed when it holds a
*socket* that *nobody answers on* -- the leftover of a crashed process; a live socket or any other
kind of file is refused with :class:`SocketPathError`.

Errors::

    MigdraError
     └── SocketPathError        a socket path cannot be used (permanent until someone acts)
          ├── SocketInUseError  a live process serves the path: another plugin instance is running
          └── NotASocketError   the path is a regular file, directory, ...: we never delete those
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from dra_driver.errors import MigdraError

log = logging.getLogger(__name__)

DIRECTORY_MODE = 0o750
SOCKET_MODE = 0o600
# sun_path is 108 bytes on Linux, including the terminating NUL.
MAX_SOCKET_PATH_BYTES = 107
_PROBE_TIMEOUT_SECONDS = 1.0


class SocketPathError(MigdraError):
    """A socket path cannot be used; the message names the path and what to do about it."""


class SocketInUseError(SocketPathError):
    """Something answers on the socket: another instance of the plugin is running; stop it first."""


class NotASocketError(SocketPathError):
    """The path exists but is not a socket; it is never deleted automatically; remove it by hand."""


@dataclass(frozen=True, slots=True)
class PluginSocketPaths:
    """The socket files one plugin instance owns."""

    registration: Path
    dra: Path


def plugin_socket_paths(
    driver_name: str, registry_dir: Path, plugin_dir: Path, pod_uid: str | None = None
) -> PluginSocketPaths:
    """Socket names as the Go ``kubeletplugin`` package chooses them (kubelet accepts any name).

    With ``pod_uid`` (rolling-update mode) both names carry the pod UID so the old and the new pod
    of a DaemonSet update can serve side by side; kubelet uses the most recently registered one.
    Paths are made absolute because ``PluginInfo.endpoint`` must be an absolute path.
    """
    registry_dir, plugin_dir = registry_dir.absolute(), plugin_dir.absolute()
    if pod_uid is None:
        return PluginSocketPaths(registry_dir / f"{driver_name}-reg.sock", plugin_dir / "dra.sock")
    return PluginSocketPaths(registry_dir / f"{driver_name}-{pod_uid}-reg.sock", plugin_dir / f"dra-{pod_uid}.sock")


def ensure_directory(directory: Path) -> None:
    """Create ``directory`` and missing parents with mode 0750; existing directories keep their mode.

    Explicit chmod because ``mkdir``'s mode is filtered by the process umask.
    """
    missing: list[Path] = []
    current = directory
    while not current.exists():
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        try:
            path.mkdir()
        except FileExistsError:  # created concurrently (the other instance during a rolling update)
            continue
        path.chmod(DIRECTORY_MODE)


def _answers(path: Path) -> bool:
    """Whether a process accepts connections on the unix socket at ``path``."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(_PROBE_TIMEOUT_SECONDS)
    try:
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except TimeoutError:
        return True  # a full backlog is still a live listener
    except OSError as e:
        if e.errno == errno.EAGAIN:  # backlog full on a non-blocking connect: alive
            return True
        raise SocketPathError(f"cannot tell whether {path} is in use: {e}") from e
    finally:
        probe.close()
    return True


class SocketFile:
    """One unix socket path we serve on: freed before binding, restricted after, removed at the end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._identity: tuple[int, int] | None = None

    def prepare(self) -> None:
        """Make the path bindable: parent directories exist and no stale socket is in the way.

        Raises :class:`SocketInUseError` when a process answers on an existing socket and
        :class:`NotASocketError` when the path is not a socket; both leave the file untouched.
        """
        if len(os.fsencode(self.path)) > MAX_SOCKET_PATH_BYTES:
            raise SocketPathError(
                f"socket path {self.path} is longer than {MAX_SOCKET_PATH_BYTES} bytes (the unix socket limit); "
                "use a shorter directory"
            )
        ensure_directory(self.path.parent)
        try:
            mode = self.path.lstat().st_mode
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(mode):
            raise NotASocketError(f"{self.path} exists and is not a socket; remove it if it is not needed")
        if _answers(self.path):
            raise SocketInUseError(
                f"another process serves {self.path}; is a second instance of the plugin running on this node?"
            )
        log.info("removing stale socket %s left by a previous process", self.path)
        self.path.unlink(missing_ok=True)

    def secure(self) -> None:
        """Right after bind: owner-only access, and remember which file is ours for :meth:`remove`."""
        os.chmod(self.path, SOCKET_MODE)
        st = os.lstat(self.path)
        self._identity = (st.st_dev, st.st_ino)

    def remove(self) -> None:
        """Delete the socket file if it is still the one we bound (never another instance's)."""
        identity, self._identity = self._identity, None
        if identity is None:
            return
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return  # gRPC removes unix sockets itself when the server stops
        if (st.st_dev, st.st_ino) == identity:
            self.path.unlink(missing_ok=True)
        else:
            log.warning("not removing %s: it was replaced by another process", self.path)
