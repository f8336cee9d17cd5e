"""The product's API client (dra_driver.kube.client) against the local API server: one page of a
collection and a collection delete, which the benchmarks use at thousands of objects."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dra_driver.kube.client import PODS, Client
from tests.kube_apiserver import KubeApiServer
from tests.sim_objects import pod
from tests.waiting import wait_for


@pytest.fixture
def client(api_server: KubeApiServer) -> Iterator[Client]:
    c = Client(api_server.kubeconfig_path)
    yield c
    c.close()


def test_peek_reads_one_page_and_delete_collection_empties_a_namespace(client: Client) -> None:
    for name in ("p1", "p2", "p3"):
        client.create(PODS, pod(name, namespace="default"))
    first, version = client.peek(PODS, "default")
    assert len(first) == 1
    assert int(version) > 0
    assert len(client.peek(PODS, "default", limit=2)[0]) == 2
    assert len(client.list(PODS, "default")[0]) == 3  # the whole collection is still there

    client.delete_collection(PODS, "default", timeout=60)
    wait_for("the namespace's pods to be gone", lambda: client.peek(PODS, "default")[0] == [] or None)
    assert client.list(PODS, "default")[0] == []
