"""Where the upstream binaries are, which Kubernetes version they are, and building them on first use.

``make kube`` builds them into ``.tools/kube/<version>/bin`` of the checkout (hack/kube/build.sh); so does
``sim up`` when a version it needs is not built yet (:func:`ensure_binaries`, the build's lines shown as
its progress: the first build takes minutes).  A user can point elsewhere with ``--kube-bin-dir DIR`` or
``MIGDRA_KUBE_BIN_DIR``.  A missing binary is one line that says how to get it, never a traceback.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dra_driver.errors import ConfigurationError

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
TOOLS_DIR = Path(__file__).resolve().parents[3] / ".tools" / "kube"
"""``.tools/kube`` of the source checkout this module runs from."""
BUILD_SCRIPT = Path(__file__).resolve().parents[3] / "hack" / "kube" / "build.sh"
"""What ``make kube`` runs: ``build.sh MINOR...`` builds the versions pinned in ``hack/kube/<minor>/go.mod``."""
DEFAULT_MINOR = "1.36"
"""The minor ``sim up`` builds when none is built and none is asked for: the oldest supported, CI's first."""
_VERSION = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")
_KUBERNETES_VERSION = re.compile(r"Kubernetes (v\d+\.\d+\.\d+\S*)")


@dataclass(frozen=True)
class KubeBinaries:
    """The four programs of one Kubernetes version."""

    version: str  # v1.36.5
    bin_dir: Path

    def path(self, component: str) -> Path:
        return self.bin_dir / component

    @property
    def minor(self) -> int:
        match = _VERSION.match(self.version)
        return int(match.group(2)) if match else 0


def built_versions(tools_dir: Path = TOOLS_DIR) -> list[str]:
    """The versions ``make kube`` built with every component present, oldest first."""
    if not tools_dir.is_dir():
        return []
    found = [
        entry.name
        for entry in tools_dir.iterdir()
        if _VERSION.match(entry.name) and all((entry / "bin" / c).is_file() for c in COMPONENTS)
    ]
    return sorted(found, key=lambda v: tuple(int(n) for n in v[1:].split(".")))


def find_binaries(bin_dir: Path | None, version: str | None, tools_dir: Path = TOOLS_DIR) -> KubeBinaries:
    """The binaries to run: ``bin_dir`` when given, else the built ``version`` (``1.36``, ``v1.36.5``; the
    newest build of that minor), else the newest built version."""
    if bin_dir is not None:
        missing = [c for c in COMPONENTS if not (bin_dir / c).is_file()]
        if missing:
            raise ConfigurationError(
                f"--kube-bin-dir {bin_dir}: no {', '.join(missing)} there (`make kube` builds them into .tools/kube)"
            )
        return KubeBinaries(_reported_version(bin_dir / "kube-apiserver"), bin_dir)
    versions = built_versions(tools_dir)
    if not versions:
        raise ConfigurationError(
            f"no Kubernetes binaries in {tools_dir}; build them with `make kube` "
            "(or give --kube-bin-dir / MIGDRA_KUBE_BIN_DIR)"
        )
    if version is None:
        chosen = versions[-1]
    else:
        wanted = version if version.startswith("v") else f"v{version}"
        matching = [v for v in versions if v == wanted or v.startswith(f"{wanted}.")]
        if not matching:
            raise ConfigurationError(
                f"--kube-version {version}: not built (built: {', '.join(versions)}); `make kube KUBE_VERSIONS=...`"
            )
        chosen = matching[-1]
    return KubeBinaries(chosen, tools_dir / chosen / "bin")


def ensure_binaries(
    bin_dir: Path | None, version: str | None, progress: Callable[[str], None], tools_dir: Path = TOOLS_DIR
) -> KubeBinaries:
    """:func:`find_binaries`, after building the asked minor (else :data:`DEFAULT_MINOR`) with ``make kube``'s
    script when no given directory holds them and that minor is not built yet."""
    if bin_dir is None:
        minor = _minor_of(version) if version else DEFAULT_MINOR
        built = {_minor_of(v) for v in built_versions(tools_dir)}
        if (version is not None or not built) and minor not in built:
            build_minor(minor, progress)
    return find_binaries(bin_dir, version, tools_dir)


def kube_version_problem(version: str, tools_dir: Path = TOOLS_DIR) -> str | None:
    """Why ``--kube-version VERSION`` cannot be had (neither built nor buildable here), or None."""
    wanted = version if version.startswith("v") else f"v{version}"
    if any(v == wanted or v.startswith(f"{wanted}.") for v in built_versions(tools_dir)):
        return None
    pinned = sorted(p.parent.name for p in BUILD_SCRIPT.parent.glob("*/go.mod"))
    if _minor_of(version) in pinned and wanted.count(".") < 2:
        return None  # a minor `make kube` can build
    return (
        f"--kube-version {version}: neither built nor pinned (pinned: {', '.join(pinned)}; "
        "`make kube KUBE_VERSIONS=...`)"
    )


def _minor_of(version: str) -> str:
    """``1.36`` of ``1.36``, ``v1.36`` or ``v1.36.5``."""
    return ".".join(version.removeprefix("v").split(".")[:2])


def build_minor(minor: str, progress: Callable[[str], None]) -> None:
    """Build etcd and the kube-* programs of ``minor`` as ``make kube`` does, each line of the build shown."""
    if not (BUILD_SCRIPT.parent / minor / "go.mod").is_file():
        pinned = sorted(p.parent.name for p in BUILD_SCRIPT.parent.glob("*/go.mod"))
        raise ConfigurationError(f"--kube-version {minor}: no pinned build of it (pinned: {', '.join(pinned)})")
    if shutil.which("go") is None:
        raise ConfigurationError(
            f"the upstream control plane {minor} is not built and building it needs the go command (Go 1.26+); "
            "install Go, or give --kube-bin-dir / MIGDRA_KUBE_BIN_DIR"
        )
    progress(f"building the upstream control plane {minor} (make kube; minutes the first time)")
    with subprocess.Popen(
        [str(BUILD_SCRIPT), minor], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as build:
        assert build.stdout is not None
        last = "no output"
        for line in build.stdout:
            last = line.rstrip()
            progress(last)
    if build.returncode != 0:
        raise ConfigurationError(f"building the upstream control plane {minor} failed: {last}")


def _reported_version(apiserver: Path) -> str:
    """What ``kube-apiserver --version`` says (``Kubernetes v1.36.5``), for a directory we did not build."""
    try:
        answer = subprocess.run(
            [str(apiserver), "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except OSError as exc:
        raise ConfigurationError(f"{apiserver}: cannot run it: {exc.strerror}") from exc
    match = _KUBERNETES_VERSION.search(answer)
    if not match:
        raise ConfigurationError(f"{apiserver} --version: expected 'Kubernetes vX.Y.Z', got {answer.strip()!r}")
    return match.group(1).split("+")[0].split("-")[0]
