"""A replica told to stop while its acquire of the Lease is on its way hands the Lease back.

Found on a loaded machine: the test that stops a leader right after it shows up as holder saw the Lease
still held, because the stop came between the server's write and the elector seeing its answer, and
the elector returned without releasing.  Here the stop is made to come exactly then."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_driver.controller.leader import LeaderElector, LeaseTiming
from dra_driver.kube.client import LEASES, Client, Kind
from tests.kube_apiserver import KubeApiServer


class StopOnWrite(Client):
    """A client that stops the elector as soon as the server has taken its Lease write."""

    elector: LeaderElector | None = None

    def create(self, kind: Kind, body: dict[str, Any]) -> dict[str, Any]:
        written = super().create(kind, body)
        self._stop_elector()
        return written

    def update(self, kind: Kind, body: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
        written = super().update(kind, body, subresource)
        if (body.get("spec") or {}).get("holderIdentity"):  # the acquire, not the release
            self._stop_elector()
        return written

    def _stop_elector(self) -> None:
        assert self.elector is not None
        self.elector._stopping.set()  # what stop() does first, at the worst moment


@pytest.fixture
def client(api_server: KubeApiServer, tmp_path: Path) -> Iterator[StopOnWrite]:
    api_server.write_kubeconfig(tmp_path / "kubeconfig")
    stopping = StopOnWrite(tmp_path / "kubeconfig")
    try:
        yield stopping
    finally:
        stopping.close()


@pytest.mark.parametrize("existing", [False, True], ids=["create", "take-over-a-released-lease"])
def test_a_stop_during_the_acquire_releases_the_lease(client: StopOnWrite, existing: bool) -> None:
    if existing:  # a Lease another replica released: holder empty
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "l", "namespace": "default"},
        }
        Client.create(client, LEASES, {**lease, "spec": {"leaseDurationSeconds": 1}})
    started: list[str] = []
    elector = LeaderElector(
        client, "default", "l", "replica-a", LeaseTiming(3, 2, 0.5), lambda: started.append("on"), lambda: None
    )
    client.elector = elector
    elector.start()
    elector.stop()
    stored = client.get(LEASES, "default", "l")
    assert stored is not None
    assert not (stored.get("spec") or {}).get("holderIdentity"), stored
    assert started == [], "it never started leading"
