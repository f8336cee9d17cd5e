"""The product's informer (dra_driver.kube.informer) against the local API server: read-your-writes
without losing them to a late list or reviving deleted objects, and a prompt stop."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from typing import Any

import pytest

from dra_driver.kube.client import PODS, Client
from dra_driver.kube.informer import Changes, Informer
from tests.kube_apiserver import KubeApiServer
from tests.waiting import wait_for


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


@pytest.fixture
def client(api_server: KubeApiServer) -> Iterator[Client]:
    c = Client(api_server.kubeconfig_path)
    yield c
    c.close()


@pytest.fixture
def pods(client: Client) -> Iterator[Informer]:
    informer = Informer(client, PODS, Changes())
    informer.start()
    assert informer.wait_synced(20)
    yield informer
    informer.stop()


def test_a_list_older_than_an_assumed_write_does_not_undo_it(client: Client, pods: Informer) -> None:
    created = client.create(PODS, _pod("a"))
    wait_for("the pod in the cache", lambda: pods.get("default", "a") is not None)
    stale_items, stale_version = client.list(PODS)
    labelled = copy.deepcopy(created)
    labelled["metadata"]["labels"] = {"written": "by-us"}
    pods.assume(client.update(PODS, labelled))
    pods._client.list = lambda *args, **kwargs: (stale_items, stale_version)  # type: ignore[method-assign]
    pods._relist()  # the list was taken before our write and answered after it
    cached = pods.get("default", "a")
    assert cached is not None
    assert cached["metadata"]["labels"] == {"written": "by-us"}


def test_a_late_answer_to_our_own_write_does_not_revive_a_deleted_object(client: Client, pods: Informer) -> None:
    created = client.create(PODS, _pod("b"))
    answer = client.update(PODS, {**created, "metadata": {**created["metadata"], "labels": {"x": "y"}}})
    # The watch must have delivered the object before its deletion: an empty cache before that says nothing.
    wait_for("the update in the cache", lambda: ((pods.get("default", "b") or {}).get("metadata") or {}).get("labels"))
    client.delete(PODS, "default", "b")
    wait_for("the deletion in the cache", lambda: pods.get("default", "b") is None and pods.items() == [])
    pods.assume(answer)  # the write's answer handled after the watch delivered the deletion
    assert pods.get("default", "b") is None
    again = client.create(PODS, _pod("b"))  # a new object of the same name is not a ghost
    pods.assume(again)
    assert pods.get("default", "b") is not None


def test_stop_ends_a_watch_that_waits_for_events(pods: Informer) -> None:
    started = time.monotonic()
    pods.stop()
    assert time.monotonic() - started < 5
    assert not pods._thread.is_alive()
