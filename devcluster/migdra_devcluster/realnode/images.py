"""Container images for a real node, written as OCI image archives: no registry is reachable here.

A real node's containerd needs a pause image for every pod sandbox and an image for the test
containers.  Both are one layer holding Debian's statically linked busybox (``busybox-static``) and a
symlink per applet, so a container has ``sh``, ``sleep``, ``cat``, ``env``, ``ls`` and the rest; the pause
image is the same busybox running ``sleep`` for ever (all a sandbox's first process must do here).

The archive is what ``ctr images import`` reads (the OCI image layout: ``oci-layout``, ``index.json`` with the
image's name in the ``io.containerd.image.name`` annotation, content-addressed ``blobs/sha256/``).  Every
byte is deterministic (fixed times, owners and order), so the same busybox always gives the same digest
and an image imported earlier is recognised, not imported again.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BUSYBOX = Path("/bin/busybox")
PAUSE_IMAGE = "localhost/migdra/pause:busybox"
TEST_IMAGE = "localhost/migdra/busybox:test"
SLEEP_FOR_EVER = ("sleep", "2147483647")

_MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
_MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"


class ImageBuildError(Exception):
    """The image cannot be built: busybox missing or not the static one."""


@dataclass(frozen=True, slots=True)
class ImageArchive:
    """An image archive on disk and what it holds."""

    name: str  # the image reference pods name (with imagePullPolicy: Never)
    path: Path
    manifest_digest: str  # sha256:...


def busybox_applets(busybox: Path = BUSYBOX) -> list[str]:
    """The applets this busybox provides (``busybox --list``): one symlink each in the image."""
    if not busybox.is_file():
        raise ImageBuildError(f"no busybox at {busybox} (Debian: apt-get install busybox-static)")
    listed = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=False, timeout=30)
    if listed.returncode != 0 or not listed.stdout.strip():
        raise ImageBuildError(f"{busybox} --list failed: {listed.stderr.strip() or 'no applets listed'}")
    return sorted({line.strip() for line in listed.stdout.splitlines() if line.strip() and "/" not in line})


def write_image_archive(
    path: Path, name: str, command: tuple[str, ...], busybox: Path = BUSYBOX, env: tuple[str, ...] = ()
) -> ImageArchive:
    """Write a one-layer busybox image named ``name`` whose default command is ``command`` to ``path``."""
    layer = _layer(busybox, busybox_applets(busybox))
    layer_digest = _digest(layer)
    config = _json(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": ["PATH=/bin", *env], "Cmd": list(command), "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
            "history": [{"created_by": f"migdra_devcluster.realnode.images from {busybox}"}],
        }
    )
    manifest = _json(
        {
            "schemaVersion": 2,
            "mediaType": _MEDIA_MANIFEST,
            "config": {"mediaType": _MEDIA_CONFIG, "digest": _digest(config), "size": len(config)},
            "layers": [{"mediaType": _MEDIA_LAYER, "digest": layer_digest, "size": len(layer)}],
        }
    )
    manifest_digest = _digest(manifest)
    index = _json(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": _MEDIA_MANIFEST,
                    "digest": manifest_digest,
                    "size": len(manifest),
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name},
                }
            ],
        }
    )
    entries = [
        ("oci-layout", _json({"imageLayoutVersion": "1.0.0"})),
        ("index.json", index),
        *((f"blobs/sha256/{_digest(blob).removeprefix('sha256:')}", blob) for blob in (manifest, config, layer)),
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as archive:
        archive.addfile(_directory("blobs"))
        archive.addfile(_directory("blobs/sha256"))
        for member_name, data in entries:
            archive.addfile(_file(member_name, len(data)), io.BytesIO(data))
    partial.replace(path)
    return ImageArchive(name=name, path=path, manifest_digest=manifest_digest)


def write_node_images(directory: Path, busybox: Path = BUSYBOX) -> tuple[ImageArchive, ImageArchive]:
    """The pause image and the test image of a real node, as archives in ``directory``."""
    pause = write_image_archive(directory / "pause.oci.tar", PAUSE_IMAGE, SLEEP_FOR_EVER, busybox)
    test = write_image_archive(directory / "busybox.oci.tar", TEST_IMAGE, SLEEP_FOR_EVER, busybox)
    return pause, test


def _layer(busybox: Path, applets: list[str]) -> bytes:
    """The root filesystem: /bin/busybox, a symlink per applet, and the directories a container expects."""
    buffer = io.BytesIO()
    data = busybox.read_bytes()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as layer:
        for directory in ("bin", "dev", "etc", "proc", "sys", "tmp", "var", "var/run"):
            layer.addfile(_directory(directory, mode=0o1777 if directory == "tmp" else 0o755))
        layer.addfile(_file("bin/busybox", len(data), mode=0o755), io.BytesIO(data))
        for applet in applets:
            if applet != "busybox":
                link = tarfile.TarInfo(f"bin/{applet}")
                link.type = tarfile.SYMTYPE
                link.linkname = "busybox"
                _fix(link)
                layer.addfile(link)
        for member_name, text in (("etc/passwd", "root:x:0:0:root:/:/bin/sh\n"), ("etc/group", "root:x:0:\n")):
            content = text.encode()
            layer.addfile(_file(member_name, len(content)), io.BytesIO(content))
    return buffer.getvalue()


def _fix(member: tarfile.TarInfo, mode: int | None = None) -> tarfile.TarInfo:
    member.mtime = 0
    member.uid = member.gid = 0
    member.uname = member.gname = "root"
    if mode is not None:
        member.mode = mode
    return member


def _directory(name: str, mode: int = 0o755) -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.type = tarfile.DIRTYPE
    return _fix(member, mode)


def _file(name: str, size: int, mode: int = 0o644) -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.size = size
    return _fix(member, mode)


def _json(document: dict[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()
