"""The NVIDIA driver's user-space files every claim's CDI spec carries, so a stock CUDA image runs.

Owns finding them (``discover_``, once at start-up, over a driver root this process can read) and
turning them into CDI container edits (``compute_``, pure), the common edits NVIDIA's container
toolkit generates (``nvidia-ctk cdi generate``):

- read-only bind ``mounts`` (``ro, nosuid, nodev, bind``) of the compute and utility libraries at the
  driver's version (``libcuda.so.<version>``, ``libnvidia-ml.so.<version>``, ... :data:`LIBRARIES`),
  the binaries (:data:`BINARIES`), the GSP firmware (``lib/firmware/nvidia/<version>/*.bin``) and the
  persistenced / MPS IPC paths when present;
- ``createContainer`` hooks of ``nvidia-cdi-hook``: ``create-symlinks`` (the sonames the driver root
  has as symlinks, ``libcuda.so.1 -> libcuda.so.<version>``, plus ``libcuda.so -> libcuda.so.1``) and
  ``update-ldcache --folder <each mounted library directory>``; without the hook on the node (the
  container toolkit is optional) each library is also mounted under its soname, and no hooks run.

Two roots: this process reads the files under ``driver_root`` (in a pod, where the host's driver
root is mounted, e.g. ``/driver-root``); the spec's ``hostPath`` s are the same files under
``host_driver_root`` (the runtime reads them on the host: ``/`` or the GPU Operator's
``/run/nvidia/driver``); a ``containerPath`` is the file's path relative to the driver root, so the
container sees the usual ``/usr/lib/x86_64-linux-gnu/libcuda.so.<version>``.

The driver's version has one source of truth: the ``libcuda.so.<version>`` and
``libnvidia-ml.so.<version>`` file names in the driver root; they must name exactly one version.
With real NVML the plugin also checks that NVML's driver version is that one (a driver root of
another driver than the loaded one would give containers libraries that cannot talk to it).

Discovery runs once per process; a driver upgrade restarts the plugin (the driver's kernel module
cannot be replaced under running GPU work anyway).  This module never writes a file.
"""

from __future__ import annotations

import logging
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from dra_driver.errors import ConfigurationError
from kubeletplugin.settings import PrepareSettings

log = logging.getLogger(__name__)

DRIVER_ROOT_FLAG = "--driver-root (MIGDRA_DRIVER_ROOT)"
HOOK_PATH_FLAG = "--nvidia-cdi-hook-path (MIGDRA_CDI_HOOK_PATH)"
HOOK_NAME = "nvidia-cdi-hook"
MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "bind")
# Library directories of the distributions NVIDIA packages for (Debian/Ubuntu multiarch, RHEL lib64),
# relative to the driver root; the first holding a library wins.
LIBRARY_DIRS = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib64",
    "lib/x86_64-linux-gnu",
    "lib/aarch64-linux-gnu",
    "lib64",
    "usr/lib",
)
# The toolkit's compute + utility set (what a CUDA / NVML program loads), without graphics.
LIBRARIES = (
    "libcuda",
    "libcudadebugger",
    "libnvidia-allocator",
    "libnvidia-cfg",
    "libnvidia-gpucomp",
    "libnvidia-ml",
    "libnvidia-nvvm",
    "libnvidia-opencl",
    "libnvidia-pkcs11",
    "libnvidia-pkcs11-openssl3",
    "libnvidia-ptxjitcompiler",
)
# The two without which nothing CUDA or NVML runs: their absence means no driver in the root.
REQUIRED_LIBRARIES = ("libcuda", "libnvidia-ml")
BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
)
BINARY_DIRS = ("usr/bin", "usr/sbin", "bin", "sbin")
HOOK_DIRS = ("usr/bin", "usr/local/bin", "bin", "usr/local/nvidia/toolkit")
FIRMWARE_DIRS = ("lib/firmware/nvidia", "usr/lib/firmware/nvidia")
# persistenced's socket and the MPS pipe directory, where the driver's daemons create them.
IPC_PATHS = ("run/nvidia-persistenced/socket", "var/run/nvidia-persistenced/socket", "tmp/nvidia-mps")
_VERSIONED = re.compile(r"^(?P<stem>lib[A-Za-z0-9_+-]+)\.so\.(?P<version>\d+\.\d+(?:\.\d+)?)$")


@dataclass(frozen=True, slots=True)
class LibraryLink:
    """A symlink the container needs: ``link`` (a container path) pointing at ``target`` (a file name)."""

    target: str
    link: PurePosixPath


@dataclass(frozen=True, slots=True)
class DriverFiles:
    """What was found in a driver root; every path is relative to it, written as the container sees it."""

    version: str
    libraries: tuple[PurePosixPath, ...]
    links: tuple[LibraryLink, ...]
    binaries: tuple[PurePosixPath, ...]
    firmware: tuple[PurePosixPath, ...]
    ipc: tuple[PurePosixPath, ...]
    hook_path: PurePosixPath | None  # a host path; None: no toolkit on the node

    @property
    def library_dirs(self) -> tuple[PurePosixPath, ...]:
        return tuple(dict.fromkeys(library.parent for library in self.libraries))

    @property
    def mounted(self) -> tuple[PurePosixPath, ...]:
        return (*self.libraries, *self.binaries, *self.firmware, *self.ipc)


@dataclass(frozen=True, slots=True)
class DriverEdits:
    """The spec-level CDI edits of the driver's files: ``mounts`` and ``hooks`` entries."""

    mounts: tuple[dict[str, Any], ...]
    hooks: tuple[dict[str, Any], ...]


def compute_host_path(container_path: PurePosixPath, host_driver_root: PurePosixPath) -> str:
    """The host's path of a driver-root file: ``/usr/lib/x/libcuda.so.V`` under ``/run/nvidia/driver``."""
    return str(host_driver_root / container_path.relative_to("/"))


def compute_driver_edits(files: DriverFiles, host_driver_root: PurePosixPath) -> DriverEdits:
    """The spec-level ``mounts`` and ``hooks`` of every claim's spec; pure and deterministic."""
    mounts = [
        {
            "hostPath": compute_host_path(path, host_driver_root),
            "containerPath": str(path),
            "options": list(MOUNT_OPTIONS),
        }
        for path in files.mounted
    ]
    hooks: list[dict[str, Any]] = []
    if files.hook_path is None:
        # No hook to make the soname links: the versioned file is mounted under each soname instead,
        # which the loader finds in the distribution's default directories (no ld cache update).
        mounts += [
            {
                "hostPath": compute_host_path(link.link.parent / link.target, host_driver_root),
                "containerPath": str(link.link),
                "options": list(MOUNT_OPTIONS),
            }
            for link in files.links
            if (link.link.parent / link.target) in files.libraries
        ]
        return DriverEdits(tuple(mounts), ())
    if files.links:
        link_args = [arg for link in files.links for arg in ("--link", f"{link.target}::{link.link}")]
        hooks.append(_hook(files.hook_path, "create-symlinks", link_args))
    folder_args = [arg for folder in files.library_dirs for arg in ("--folder", str(folder))]
    hooks.append(_hook(files.hook_path, "update-ldcache", folder_args))
    return DriverEdits(tuple(mounts), tuple(hooks))


def _hook(path: PurePosixPath, command: str, args: Sequence[str]) -> dict[str, Any]:
    # args[0] is the program name (OCI hooks are execve'd with exactly these arguments).
    return {"hookName": "createContainer", "path": str(path), "args": [HOOK_NAME, command, *args]}


def discover_driver_files(
    driver_root: Path, host_driver_root: PurePosixPath, hook_path: PurePosixPath | None = None
) -> DriverFiles:
    """Find the driver's files under ``driver_root``; :class:`ConfigurationError` naming the flag when
    there is no driver or more than one version of it.  No ``nvidia-cdi-hook`` (the container toolkit
    is optional): a warning, and the specs carry mounts only."""
    if not driver_root.is_dir():
        raise ConfigurationError(f"{DRIVER_ROOT_FLAG} {driver_root}: no such directory")
    found = _discover_versioned_libraries(driver_root)
    versions = sorted({version for (stem, version) in found if stem in REQUIRED_LIBRARIES})
    if not versions:
        wanted = ", ".join(f"{stem}.so.<version>" for stem in REQUIRED_LIBRARIES)
        raise ConfigurationError(
            f"{DRIVER_ROOT_FLAG} {driver_root}: no NVIDIA driver there: found no {wanted} in "
            f"{', '.join(LIBRARY_DIRS)}; give the directory the driver is installed under (/ on the host, "
            "/run/nvidia/driver for the GPU Operator) or --no-cdi-driver-files"
        )
    if len(versions) > 1:
        raise ConfigurationError(
            f"{DRIVER_ROOT_FLAG} {driver_root}: libraries of more than one driver version ({', '.join(versions)}); "
            "remove the stale ones or give the root of one driver"
        )
    version = versions[0]
    missing = [stem for stem in REQUIRED_LIBRARIES if (stem, version) not in found]
    if missing:
        raise ConfigurationError(
            f"{DRIVER_ROOT_FLAG} {driver_root}: driver {version} is incomplete: no "
            f"{', '.join(f'{stem}.so.{version}' for stem in missing)} in {', '.join(LIBRARY_DIRS)}"
        )
    libraries = tuple(path for (stem, found_version), path in sorted(found.items()) if found_version == version)
    return DriverFiles(
        version=version,
        libraries=libraries,
        links=_discover_links(driver_root, libraries),
        binaries=_discover_first(driver_root, BINARY_DIRS, BINARIES),
        firmware=_discover_firmware(driver_root, version),
        ipc=tuple(PurePosixPath("/", path) for path in IPC_PATHS if _is_ipc(driver_root / path)),
        hook_path=hook_path if hook_path is not None else _discover_hook(driver_root, host_driver_root),
    )


def _discover_versioned_libraries(driver_root: Path) -> dict[tuple[str, str], PurePosixPath]:
    """(stem, version) -> container path of each versioned library of :data:`LIBRARIES`, first dir wins."""
    found: dict[tuple[str, str], PurePosixPath] = {}
    for relative in LIBRARY_DIRS:
        directory = driver_root / relative
        if not directory.is_dir():
            continue
        for entry in sorted(directory.iterdir()):
            match = _VERSIONED.match(entry.name)
            if match is None or match["stem"] not in LIBRARIES or not entry.is_file():
                continue
            # First directory wins: merged /usr (lib -> usr/lib) shows a library twice, mounted once.
            found.setdefault((match["stem"], match["version"]), PurePosixPath("/", relative, entry.name))
    return found


def _discover_links(driver_root: Path, libraries: Sequence[PurePosixPath]) -> tuple[LibraryLink, ...]:
    """The soname links the driver root has (``libcuda.so.1 -> libcuda.so.<version>``; the toolkit reads
    the ELF ``SONAME``, the installer's ldconfig made these from it), and ``libcuda.so`` (what programs
    that ``dlopen("libcuda.so")`` ask for) to libcuda's soname."""
    links: list[LibraryLink] = []
    for library in libraries:
        directory = driver_root / library.parent.relative_to("/")
        stem = library.name.split(".so.")[0]
        for entry in sorted(directory.glob(f"{stem}.so.*")):
            if entry.name != library.name and entry.is_symlink() and Path(entry.readlink()).name == library.name:
                links.append(LibraryLink(library.name, library.parent / entry.name))
    cuda = next((link for link in links if link.link.name.startswith("libcuda.so.")), None)
    if cuda is not None:
        links.append(LibraryLink(cuda.link.name, cuda.link.parent / "libcuda.so"))
    return tuple(links)


def _discover_first(driver_root: Path, directories: Sequence[str], names: Sequence[str]) -> tuple[PurePosixPath, ...]:
    """Each name in the first directory holding it as a file; absent names are left out."""
    found = []
    for name in names:
        for directory in directories:
            if (driver_root / directory / name).is_file():
                found.append(PurePosixPath("/", directory, name))
                break
    return tuple(found)


def _discover_firmware(driver_root: Path, version: str) -> tuple[PurePosixPath, ...]:
    for relative in FIRMWARE_DIRS:
        directory = driver_root / relative / version
        if directory.is_dir():
            return tuple(
                PurePosixPath("/", relative, version, entry.name)
                for entry in sorted(directory.glob("*.bin"))
                if entry.is_file()
            )
    return ()


def _is_ipc(path: Path) -> bool:
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return stat.S_ISSOCK(mode) or stat.S_ISDIR(mode)


def _discover_hook(driver_root: Path, host_driver_root: PurePosixPath) -> PurePosixPath | None:
    for directory in HOOK_DIRS:
        if (driver_root / directory / HOOK_NAME).is_file():
            return host_driver_root / directory / HOOK_NAME
    log.warning(
        "%s: not set and no %s in %s under %s %s: the CDI specs mount the driver's files (each library also "
        "under its soname) without hooks; give the hook's host path for the ld cache and the libcuda.so link",
        HOOK_PATH_FLAG,
        HOOK_NAME,
        ", ".join(HOOK_DIRS),
        DRIVER_ROOT_FLAG,
        driver_root,
    )
    return None


def check_driver_version(files: DriverFiles, nvml_version: str, driver_root: Path) -> None:
    """The driver root's libraries are of the driver NVML runs (real NVML only)."""
    if files.version != nvml_version:
        raise ConfigurationError(
            f"{DRIVER_ROOT_FLAG} {driver_root}: holds driver {files.version} but the running driver is "
            f"{nvml_version} (NVML); give the root of the loaded driver"
        )


def load_driver_edits(settings: PrepareSettings, *, simulated: bool) -> tuple[DriverFiles, DriverEdits] | None:
    """Discover once (start-up) and compute the edits; None when the specs carry no driver files.

    With simulated NVML the node has no driver unless one is configured: the files are added only when
    ``--driver-root`` (or ``MIGDRA_DRIVER_ROOT``) is given, so the demo and tests need none."""
    if not settings.cdi_driver_files:
        return None
    if simulated and "driver_root" not in settings.model_fields_set:
        log.info("simulated NVML and no --driver-root: the CDI specs carry no driver files")
        return None
    hook_path = settings.cdi_hook_path
    if hook_path is not None and not hook_path.is_absolute():
        raise ConfigurationError(f"{HOOK_PATH_FLAG}: must be an absolute path on the host (got {str(hook_path)!r})")
    host_root = PurePosixPath(settings.host_driver_directory)
    files = discover_driver_files(
        settings.driver_root, host_root, PurePosixPath(hook_path) if hook_path is not None else None
    )
    log.info(
        "driver %s under %s (host %s): %d libraries, %d binaries, %d firmware files, hook %s",
        files.version,
        settings.driver_root,
        host_root,
        len(files.libraries),
        len(files.binaries),
        len(files.firmware),
        files.hook_path,
    )
    return files, compute_driver_edits(files, host_root)
