"""How tests of this tier start a cluster: ``migdra sim up --control-plane kube`` on the version the tier
runs (``MIGDRA_KUBE_VERSION``, else the oldest built: CI's 1.36, the required one)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from migdra_devcluster.upstream.binaries import built_versions
from tests.kubelet_client import short_socket_dir
from tests.sim_cluster import SimCluster, start_cluster, stop_cluster

READY_TIMEOUT = 400.0
"""kube-apiserver, the controllers and the plugins of every node: a minute on an idle two-core machine,
several with both CPUs busy."""


def kube_version() -> str:
    """The version the tier runs: ``MIGDRA_KUBE_VERSION``, else the oldest built (CI builds only 1.36)."""
    return os.environ.get("MIGDRA_KUBE_VERSION") or (built_versions() or ["v0.0.0"])[0]


def kube_args() -> list[str]:
    """The ``sim up`` flags that select the upstream control plane."""
    return ["--control-plane", "kube", "--kube-version", kube_version()]


@contextmanager
def kube_cluster(*args: str) -> Iterator[SimCluster]:
    """``migdra sim up ARGS --control-plane kube`` for a module's tests; ``sim down`` afterwards."""
    with short_socket_dir() as root:
        sim = start_cluster(root / "sim", *args, *kube_args(), ready_timeout=READY_TIMEOUT)
        try:
            yield sim
        finally:
            stop_cluster(sim)
