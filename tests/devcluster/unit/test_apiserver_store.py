"""The store's versioning, history compaction and non-blocking fan-out to watchers."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from migdra_devcluster.apiserver.errors import Gone
from migdra_devcluster.apiserver.selectors import FieldSelector, LabelSelector
from migdra_devcluster.apiserver.store import Store
from migdra_devcluster.apiserver.watch import Watcher


def obj(name: str, uid: str | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid or name}}


def watcher(max_pending: int = 100) -> Watcher:
    return Watcher("configmaps", None, LabelSelector(), FieldSelector(), max_pending)


def test_every_write_takes_the_next_resource_version() -> None:
    store = Store()
    first = store.put("configmaps", obj("a"))
    second = store.put("configmaps", obj("b"))
    removed = store.remove("configmaps", second)
    assert [first["metadata"]["resourceVersion"], second["metadata"]["resourceVersion"]] == ["1", "2"]
    assert removed["metadata"]["resourceVersion"] == "3"
    assert store.get("configmaps", "ns", "b") is None
    assert store.locate_uid("a") == ("configmaps", "ns", "a")


def test_history_is_bounded_and_older_versions_are_gone() -> None:
    store = Store(history_limit=3)
    for index in range(5):
        store.put("configmaps", obj(f"o{index}"))
    assert store.compacted_resource_version == 2
    with pytest.raises(Gone):
        store.start_watch(watcher(), since=1)
    late = watcher()
    store.start_watch(late, since=2)
    names = [late.next_event(0) for _ in range(3)]
    assert [e.obj["metadata"]["name"] for e in names if e] == ["o2", "o3", "o4"]


def test_a_slow_watcher_is_dropped_and_never_blocks_writers() -> None:
    store = Store()
    slow = watcher(max_pending=3)
    fast = watcher()
    store.start_watch(slow, since=0)
    store.start_watch(fast, since=0)
    # Nothing ever reads the slow watcher: a write that waited for it to catch up would never return.
    writer = threading.Thread(
        target=lambda: [store.put("configmaps", obj(f"o{index}")) for index in range(50)], daemon=True
    )
    writer.start()
    writer.join(30)
    assert not writer.is_alive(), "a write is blocked on the watcher nobody reads"
    assert slow.dropped
    assert slow.next_event(0) is None, "a dropped watcher delivers nothing more"
    assert sum(1 for _ in iter(lambda: fast.next_event(0), None)) == 50


def test_writes_from_many_threads_get_distinct_versions() -> None:
    store = Store()

    def write(prefix: str) -> None:
        for index in range(200):
            store.put("configmaps", obj(f"{prefix}-{index}"))

    threads = [threading.Thread(target=write, args=(str(t),)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    versions = {o["metadata"]["resourceVersion"] for o in store.objects("configmaps")}
    assert len(versions) == 800
    assert store.resource_version == 800
