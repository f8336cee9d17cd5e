"""Start-up checks of the node process that need no part of it yet: every directory the plugin will
write to, the socket paths and the kubeconfig (loaded, not yet used).

With the names (settings validators), the device configuration (loaded before these) and the metrics
and liveness ports (bound after them) this is everything checked before the process touches the API
server or the hardware (:mod:`kubeletplugin.app` runs them in that order), so a bad flag stops the
process with one line and never leaves half-published slices behind.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from dra_driver.durable import writable_directory_problem
from dra_driver.errors import ConfigurationError
from dra_driver.kube.config import load_client_configuration
from kubeletplugin.grpc.sockets import MAX_SOCKET_PATH_BYTES, SocketFile, plugin_socket_paths
from kubeletplugin.settings import PluginSettings, PrepareSettings

if TYPE_CHECKING:
    from kubernetes.client.configuration import Configuration

KUBECONFIG_FLAG = "--kubeconfig (MIGDRA_KUBECONFIG)"
_REGISTRY_FLAG = "--registry-dir (MIGDRA_REGISTRY_DIR)"


def check_start_up(plugin: PluginSettings, prepare: PrepareSettings | None) -> Configuration:
    """Everything that can be checked before the API server or the hardware is touched; returns the
    loaded client configuration.  Raises :class:`ConfigurationError` naming the flag (or
    :class:`~kubeletplugin.grpc.sockets.SocketInUseError` when another instance serves our socket).
    It creates nothing; a stale socket a crashed instance left is removed, as serving would."""
    configuration = load_client_configuration(plugin.kubeconfig, flag=KUBECONFIG_FLAG, usual_rules=False)
    if prepare is None:  # publishing alone writes no files
        return configuration
    for flag, directory in (
        (_REGISTRY_FLAG, plugin.registry_dir),
        ("--plugin-dir (MIGDRA_PLUGIN_DIR)", plugin.plugin_directory),
        ("--cdi-dir (MIGDRA_CDI_DIR)", prepare.cdi_dir),
        ("--state-dir (MIGDRA_STATE_DIR)", prepare.state_dir),
    ):
        check_writable_directory(directory, flag)
    paths = plugin_socket_paths(plugin.driver_name, plugin.registry_dir, plugin.plugin_directory, plugin.pod_uid)
    for flag, path in (("--plugin-dir (MIGDRA_PLUGIN_DIR)", paths.dra), (_REGISTRY_FLAG, paths.registration)):
        if len(os.fsencode(path)) > MAX_SOCKET_PATH_BYTES:
            raise ConfigurationError(
                f"{flag} {path.parent}: the socket path {path} would be longer than {MAX_SOCKET_PATH_BYTES} "
                "bytes (the unix socket limit); give a shorter directory"
            )
        if path.exists() or path.is_symlink():
            SocketFile(path).prepare()  # another instance serving it, or not a socket: say so now
    return configuration


def check_writable_directory(directory: Path, flag: str) -> None:
    """``directory`` exists and takes new files, or can be created; nothing is created here."""
    problem = writable_directory_problem(directory)
    if problem is not None:
        raise ConfigurationError(f"{flag} {directory}: {problem}; give a writable directory")
