"""A driver root laid out like a real NVIDIA driver installation: what a real node of the development
cluster mounts into containers through migdra's CDI specs (``--driver-root``), and what the CDI tests
discover.

What the ``.run`` installer / distribution packages leave on an Ubuntu host: the versioned libraries
in ``usr/lib/x86_64-linux-gnu`` with their soname symlinks (``libcuda.so.1 -> libcuda.so.<version>``,
``libnvidia-nvvm.so.4``), a ``libcuda.so`` development link, the binaries in ``usr/bin``, the GSP
firmware in ``lib/firmware/nvidia/<version>/`` and, from the container toolkit, ``nvidia-cdi-hook``.
The files hold text, not ELF: discovery reads names and links, never contents, and a container reads
the text to see which file it got.

The ``nvidia-cdi-hook`` here works (:data:`HOOK_PROGRAM`): runc runs it as a ``createContainer`` hook, in
the container's mount namespace before ``pivot_root``, and it does what NVIDIA's does with the two
commands migdra's specs use: ``create-symlinks --link TARGET::LINK`` makes each link in the container's
root file system, ``update-ldcache --folder DIR`` writes the folders into
``/etc/ld.so.conf.d/00-migdra-cdi.conf`` there.  It does not run ``ldconfig`` (the test image has none;
NVIDIA's hook runs the host's): what the container sees of it is the configuration file.
"""

from __future__ import annotations

from pathlib import Path

VERSION = "580.95.05"
LIB_DIR = "usr/lib/x86_64-linux-gnu"
# library stem -> its soname suffix (what ldconfig links from the ELF SONAME)
SONAMES = {
    "libcuda": "1",
    "libcudadebugger": "1",
    "libnvidia-ml": "1",
    "libnvidia-nvvm": "4",
    "libnvidia-ptxjitcompiler": "1",
    "libnvidia-cfg": "1",
    "libnvidia-opencl": "1",
    "libnvidia-allocator": "1",
}
GPUCOMP = "libnvidia-gpucomp"  # soname is the versioned name itself: no link
LIBRARIES = tuple(sorted((*SONAMES, GPUCOMP)))
"""Every library stem the fake root holds, in name order (the order discovery lists them)."""
BINARIES = ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced")
FIRMWARE = ("gsp_ga10x.bin", "gsp_tu10x.bin")


HOOK_PROGRAM = """#!/usr/bin/python3
# nvidia-cdi-hook of a fake driver root (migdra's development cluster): create-symlinks and update-ldcache
# in the container's root file system, found from the OCI state on stdin (its bundle's config.json).
import json, os, sys

def rootfs():
    state = json.load(sys.stdin)
    with open(os.path.join(state["bundle"], "config.json")) as config:
        root = json.load(config)["root"]["path"]
    return root if os.path.isabs(root) else os.path.join(state["bundle"], root)

def inside(root, path):
    return os.path.join(root, path.lstrip("/"))

def main(command, args):
    root = rootfs()
    values = [args[i + 1] for i in range(0, len(args) - 1, 2) if args[i] in ("--link", "--folder")]
    if command == "create-symlinks":
        for pair in values:
            target, link = pair.split("::", 1)
            os.makedirs(os.path.dirname(inside(root, link)), exist_ok=True)
            if not os.path.lexists(inside(root, link)):
                os.symlink(target, inside(root, link))
    elif command == "update-ldcache":
        conf = inside(root, "/etc/ld.so.conf.d/00-migdra-cdi.conf")
        os.makedirs(os.path.dirname(conf), exist_ok=True)
        with open(conf, "w") as out:
            out.write("".join(folder + "\\n" for folder in values))
    else:
        sys.exit("nvidia-cdi-hook (fake): unknown command " + command)

main(sys.argv[1], sys.argv[2:])
"""
"""The fake root's ``nvidia-cdi-hook`` (Python: the host has python3; runc runs the hook before
``pivot_root``, so the host's interpreter is reachable)."""


def build_fake_driver_root(
    root: Path,
    version: str = VERSION,
    *,
    lib_dir: str = LIB_DIR,
    hook: bool = True,
    firmware: bool = True,
    stems: tuple[str, ...] | None = None,
) -> Path:
    """Lay out a driver of ``version`` under ``root`` (created); returns ``root``.  ``stems``: only
    these libraries (default: all of :data:`SONAMES` and libnvidia-gpucomp)."""
    libraries = root / lib_dir
    libraries.mkdir(parents=True, exist_ok=True)
    for stem in stems if stems is not None else (*SONAMES, GPUCOMP):
        versioned = f"{stem}.so.{version}"
        (libraries / versioned).write_text(f"{stem} {version}\n")
        if stem in SONAMES:
            (libraries / f"{stem}.so.{SONAMES[stem]}").symlink_to(versioned)
    if stems is None or "libcuda" in stems:
        (libraries / "libcuda.so").symlink_to("libcuda.so.1")
    # Not the driver's: another library in the same directory, left alone.
    (libraries / "libc.so.6").write_text("glibc\n")
    bin_dir = root / "usr/bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in BINARIES:
        (bin_dir / name).write_text("#!/bin/sh\n")
    if hook:
        (bin_dir / "nvidia-cdi-hook").write_text(HOOK_PROGRAM)
        (bin_dir / "nvidia-cdi-hook").chmod(0o755)
    if firmware:
        firmware_dir = root / "lib/firmware/nvidia" / version
        firmware_dir.mkdir(parents=True, exist_ok=True)
        for name in FIRMWARE:
            (firmware_dir / name).write_bytes(b"\0")
    return root
