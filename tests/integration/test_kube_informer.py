"""The product's informer (dra_driver.kube.informer) against the local API server: read-your-writes
without losing them to a late list or reviving deleted objects, and a prompt stop."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from typing import Any

import pytest

from dra_driver.kube import informer as informer_module
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


def test_changed_since_names_exactly_the_objects_added_changed_or_deleted(
    client: Client, pods: Informer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What lets the reservation controller look again only at what changed: each change is numbered,
    a relist that finds nothing new numbers nothing, and a change the cache no longer remembers makes
    the answer None (look at everything)."""
    a = client.create(PODS, _pod("ca"))
    client.create(PODS, _pod("cb"))
    wait_for("both pods in the cache", lambda: pods.get("default", "ca") and pods.get("default", "cb"))
    start, keys = pods.changed_since(0)
    assert keys is not None
    assert {("default", "ca"), ("default", "cb")} <= keys

    pods.assume(client.update(PODS, {**a, "metadata": {**a["metadata"], "labels": {"x": "y"}}}))
    now, keys = pods.changed_since(start)
    assert keys == {("default", "ca")}
    client.delete(PODS, "default", "cb")
    wait_for("the deletion in the cache", lambda: pods.get("default", "cb") is None)
    after, keys = pods.changed_since(now)
    assert keys == {("default", "cb")}

    pods._relist()  # the server's list: nothing new in it (the echo of our own write is no change either)
    assert pods.changed_since(after)[1] == set()

    monkeypatch.setattr(informer_module, "_TOMBSTONES", 0)  # remember no more changes than objects
    for name in ("cc", "cd"):
        client.create(PODS, _pod(name))
        wait_for(f"pod {name} in the cache", lambda name=name: pods.get("default", name))  # type: ignore[misc]
    client.delete(PODS, "default", "cc")
    wait_for("the deletion in the cache", lambda: pods.get("default", "cc") is None)
    assert pods.changed_since(start)[1] is None  # the oldest changes were forgotten: look at everything
