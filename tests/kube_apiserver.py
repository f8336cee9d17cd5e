"""The real kube-apiserver (on its own etcd) for the tests: every test that talks to an API server talks to
this one, shared by the tests of a pytest worker (reset between them, :mod:`tests.kube_reset`) or, for a
test that stops and restarts it, its own.

Why the real one: what a component may write, how its writes merge (server-side apply's field
ownership), what is validated and refused -- only kube-apiserver decides; migdra's former emulation
once accepted a claim status write the real one refuses.  Built by ``make kube`` (``tests/kube`` says
how the tier finds the binaries); without them the test is skipped, and ``MIGDRA_REQUIRE_KUBE=1`` (CI)
makes that a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from migdra_devcluster.upstream.binaries import TOOLS_DIR, built_versions, find_binaries
from migdra_devcluster.upstream.standalone import KubeApiServer, standalone_apiserver
from tests.kube_reset import ServerReset

__all__ = ["KubeApiServer", "SharedKubeApiServer", "kube_apiserver", "require_kube_binaries"]

REQUIRE = "MIGDRA_REQUIRE_KUBE"
"""Set to 1 (as CI does after ``make kube``), a missing binary fails what needs it instead of skipping it."""


def missing_kube_binaries() -> str | None:
    """Why the upstream binaries cannot run here, or None when ``make kube`` built them."""
    return None if built_versions() else f"no Kubernetes binaries in {TOOLS_DIR}: `make kube` builds them"


def require_kube_binaries() -> None:
    """Skip the calling test without ``make kube``'s binaries, so ``make test`` runs on a machine without
    Go; fail it instead where ``MIGDRA_REQUIRE_KUBE=1`` (CI), so it can never silently stop running there."""
    reason = missing_kube_binaries()
    if reason is None:
        return
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{REQUIRE}=1 but {reason}")
    pytest.skip(reason)


@contextmanager
def kube_apiserver(workdir: Path) -> Iterator[KubeApiServer]:
    """etcd + kube-apiserver of the oldest built version (``MIGDRA_KUBE_VERSION`` picks another), started
    as the development cluster starts them, stopped afterwards (:mod:`migdra_devcluster.upstream.standalone`)."""
    binaries = find_binaries(None, os.environ.get("MIGDRA_KUBE_VERSION") or built_versions()[0])
    with standalone_apiserver(workdir, binaries) as server:
        yield server


DEFAULT_SERVICE_ACCOUNT = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
"""What kube-controller-manager would create in ``default``: without it, the admission plugin refuses pods."""


@dataclass
class SharedKubeApiServer:
    """A kube-apiserver many tests use in turn, with the objects it held after start-up as its baseline."""

    server: KubeApiServer
    resetter: ServerReset

    @classmethod
    def prepare(cls, server: KubeApiServer) -> SharedKubeApiServer:
        api = server.api_client()
        client.CoreV1Api(api).create_namespaced_service_account("default", DEFAULT_SERVICE_ACCOUNT)
        resetter = ServerReset(api)
        resetter.take_baseline()
        return cls(server, resetter)

    def reset(self) -> None:
        self.resetter.reset()
