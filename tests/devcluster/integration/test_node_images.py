"""The real node's images: OCI archives containerd can import, built from Debian's busybox-static."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from migdra_devcluster.realnode.images import (
    BUSYBOX,
    PAUSE_IMAGE,
    TEST_IMAGE,
    ImageBuildError,
    write_image_archive,
    write_node_images,
)

pytestmark = pytest.mark.skipif(not BUSYBOX.is_file(), reason="busybox-static is not installed (.ci/run installs it)")


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}  # type: ignore[union-attr]


def _blob(members: dict[str, bytes], digest: str) -> bytes:
    data = members[f"blobs/sha256/{digest.removeprefix('sha256:')}"]
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest, "a blob is stored under its own digest"
    return data


def test_an_image_archive_is_an_oci_layout_whose_blobs_match_their_digests(tmp_path: Path) -> None:
    image = write_image_archive(tmp_path / "x.tar", "localhost/x:1", ("sh", "-c", "exit 0"), env=("A=b",))
    members = _members(image.path)
    assert json.loads(members["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    (entry,) = json.loads(members["index.json"])["manifests"]
    assert entry["digest"] == image.manifest_digest
    assert entry["annotations"]["io.containerd.image.name"] == "localhost/x:1"
    manifest: dict[str, Any] = json.loads(_blob(members, entry["digest"]))
    config = json.loads(_blob(members, manifest["config"]["digest"]))
    (layer_ref,) = manifest["layers"]
    layer = _blob(members, layer_ref["digest"])
    assert config["rootfs"]["diff_ids"] == [layer_ref["digest"]]  # an uncompressed layer: diff ID = digest
    assert config["config"]["Cmd"] == ["sh", "-c", "exit 0"]
    assert config["config"]["Env"] == ["PATH=/bin", "A=b"]
    (tmp_path / "layer.tar").write_bytes(layer)
    with tarfile.open(tmp_path / "layer.tar") as root:
        busybox = root.getmember("bin/busybox")
        assert busybox.size == BUSYBOX.stat().st_size
        assert busybox.mode == 0o755
        for applet in ("sh", "sleep", "cat", "env", "ls"):
            link = root.getmember(f"bin/{applet}")
            assert link.issym()
            assert link.linkname == "busybox"


def test_the_same_busybox_gives_the_same_digests(tmp_path: Path) -> None:
    """Deterministic bytes: an image already imported is recognised by its digest, never imported twice."""
    first_pause, first_test = write_node_images(tmp_path / "a")
    second_pause, second_test = write_node_images(tmp_path / "b")
    assert (first_pause.name, first_test.name) == (PAUSE_IMAGE, TEST_IMAGE)
    assert first_pause.path.read_bytes() == second_pause.path.read_bytes()
    assert first_test.manifest_digest == second_test.manifest_digest


def test_without_busybox_the_error_says_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(ImageBuildError, match="apt-get install busybox-static"):
        write_image_archive(tmp_path / "x.tar", "x", ("true",), busybox=tmp_path / "no-busybox")
    assert not (tmp_path / "x.tar").exists()
