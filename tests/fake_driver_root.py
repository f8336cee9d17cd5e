"""A driver root laid out like a real NVIDIA driver installation (no tests here), for the CDI tests.

What the ``.run`` installer / distribution packages leave on an Ubuntu host: the versioned libraries
in ``usr/lib/x86_64-linux-gnu`` with their soname symlinks (``libcuda.so.1 -> libcuda.so.<version>``,
``libnvidia-nvvm.so.4``), a ``libcuda.so`` development link, the binaries in ``usr/bin``, the GSP
firmware in ``lib/firmware/nvidia/<version>/`` and, from the container toolkit, ``nvidia-cdi-hook``.
The files hold text, not ELF: discovery reads names and links, never contents.
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
        (bin_dir / "nvidia-cdi-hook").write_text("#!/bin/sh\n")
    if firmware:
        firmware_dir = root / "lib/firmware/nvidia" / version
        firmware_dir.mkdir(parents=True, exist_ok=True)
        for name in FIRMWARE:
            (firmware_dir / name).write_bytes(b"\0")
    return root
