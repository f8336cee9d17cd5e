"""How tests of this tier start a cluster: ``migdra sim up --control-plane kube`` on the version the tier
runs (``MIGDRA_KUBE_VERSION``, else the newest built)."""

from __future__ import annotations

import os

from dra_driver.controlplane.upstream.binaries import built_versions

READY_TIMEOUT = 400.0
"""kube-apiserver, the controllers and the plugins of every node: a minute on an idle two-core machine,
several with both CPUs busy."""


def kube_version() -> str:
    """The version the tier runs: ``MIGDRA_KUBE_VERSION``, else the newest built."""
    return os.environ.get("MIGDRA_KUBE_VERSION") or (built_versions() or ["v0.0.0"])[-1]


def kube_args() -> list[str]:
    """The ``sim up`` flags that select the upstream control plane."""
    return ["--control-plane", "kube", "--kube-version", kube_version()]
