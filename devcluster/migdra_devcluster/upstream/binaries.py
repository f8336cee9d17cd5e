"""Where the upstream binaries are, and which Kubernetes version they are.

``make kube`` builds them into ``.tools/kube/<version>/bin`` of the checkout (hack/kube/build.sh); a
user can point elsewhere with ``--kube-bin-dir DIR`` or ``MIGDRA_KUBE_BIN_DIR``.  A missing binary is
one line that says how to get it, never a traceback from ``subprocess``.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from dra_driver.errors import ConfigurationError

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
TOOLS_DIR = Path(__file__).resolve().parents[3] / ".tools" / "kube"
"""``.tools/kube`` of the source checkout this module runs from."""
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
            f"--control-plane kube: no Kubernetes binaries in {tools_dir}; build them with `make kube` "
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
