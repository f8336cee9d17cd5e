"""Watches of the local API server through the official client's ``kubernetes.watch.Watch``.

Resuming from a resourceVersion, 410 for a compacted one, the synthetic ADDED events of a watch
without a version, bookmarks, selector transitions, ``timeoutSeconds``, concurrent watchers, and the
watch-list form (``sendInitialEvents``) client-go uses.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from migdra_devcluster.apiserver import LocalAPIServer

pytestmark = pytest.mark.api_server(history_limit=20, bookmark_interval=0.2)


@pytest.fixture
def core(api_server: LocalAPIServer) -> Iterator[client.CoreV1Api]:
    with client.ApiClient(client.Configuration(host=api_server.url)) as c:
        yield client.CoreV1Api(c)


def collect(core: client.CoreV1Api, count: int, timeout: int = 5, **kwargs: Any) -> list[tuple[str, str]]:
    """The first ``count`` events as (type, name), or fewer if the watch times out."""
    events: list[tuple[str, str]] = []
    stream = watch.Watch()
    for event in stream.stream(core.list_namespaced_config_map, "default", timeout_seconds=timeout, **kwargs):
        events.append((event["type"], event["raw_object"]["metadata"].get("name", "")))
        if len(events) == count:
            stream.stop()
    return events


def test_watch_resumes_after_a_resource_version(core: client.CoreV1Api) -> None:
    first = core.create_namespaced_config_map("default", {"metadata": {"name": "w1"}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "w2"}})
    core.patch_namespaced_config_map("w1", "default", {"data": {"k": "v"}})
    core.delete_namespaced_config_map("w2", "default")
    events = collect(core, 3, resource_version=first.metadata.resource_version)
    assert events == [("ADDED", "w2"), ("MODIFIED", "w1"), ("DELETED", "w2")]


def test_watch_from_a_compacted_version_raises_410(core: client.CoreV1Api) -> None:
    first = core.create_namespaced_config_map("default", {"metadata": {"name": "old"}})
    for index in range(25):  # history_limit=20: the first version falls out of the history
        core.patch_namespaced_config_map("old", "default", {"data": {"n": str(index)}})
    with pytest.raises(ApiException) as info:
        collect(core, 1, timeout=2, resource_version=first.metadata.resource_version)
    assert info.value.status == 410


def test_watch_without_version_starts_with_the_current_objects(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "now-a"}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "now-b"}})
    assert collect(core, 2) == [("ADDED", "now-a"), ("ADDED", "now-b")]
    assert collect(core, 2, resource_version="0") == [("ADDED", "now-a"), ("ADDED", "now-b")]


def test_bookmarks_carry_only_a_resource_version(core: client.CoreV1Api) -> None:
    listed = core.list_namespaced_config_map("default")
    stream = watch.Watch()
    bookmark = None
    for event in stream.stream(
        core.list_namespaced_config_map,
        "default",
        resource_version=listed.metadata.resource_version,
        allow_watch_bookmarks=True,
        timeout_seconds=3,
    ):
        if event["type"] == "BOOKMARK":
            bookmark = event["raw_object"]
            stream.stop()
    assert bookmark is not None
    assert bookmark["kind"] == "ConfigMap"
    assert set(bookmark["metadata"]) == {"resourceVersion"}
    assert int(bookmark["metadata"]["resourceVersion"]) >= int(listed.metadata.resource_version)
    assert stream.resource_version == bookmark["metadata"]["resourceVersion"]


def test_label_selector_watch_sees_objects_enter_and_leave(core: client.CoreV1Api) -> None:
    start = core.create_namespaced_config_map("default", {"metadata": {"name": "sel"}})
    core.patch_namespaced_config_map("sel", "default", {"metadata": {"labels": {"gpu": "yes"}}})
    core.patch_namespaced_config_map("sel", "default", {"data": {"k": "v"}})
    core.patch_namespaced_config_map("sel", "default", {"metadata": {"labels": {"gpu": None}}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "other"}})
    events = collect(core, 3, resource_version=start.metadata.resource_version, label_selector="gpu=yes")
    assert events == [("ADDED", "sel"), ("MODIFIED", "sel"), ("DELETED", "sel")]


def test_field_selector_watch(core: client.CoreV1Api) -> None:
    start = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map("default", {"metadata": {"name": "f1"}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "f2"}})
    events = collect(core, 1, resource_version=start, field_selector="metadata.name=f2")
    assert events == [("ADDED", "f2")]


def test_timeout_seconds_ends_the_watch(core: client.CoreV1Api) -> None:
    # Nothing is written, so only timeoutSeconds can end this watch: a server that ignored it would keep
    # the watcher thread waiting, which the bounded join reports.
    start = core.list_namespaced_config_map("default").metadata.resource_version
    events: list[list[tuple[str, str]]] = []
    started = time.monotonic()
    watcher = threading.Thread(
        target=lambda: events.append(collect(core, 1, timeout=1, resource_version=start)), daemon=True
    )
    watcher.start()
    watcher.join(30)
    assert not watcher.is_alive(), "the watch outlived its timeoutSeconds"
    assert time.monotonic() - started >= 0.9, "the watch ended before its timeoutSeconds"
    assert events == [[]]


def test_concurrent_watchers_all_see_every_event(core: client.CoreV1Api) -> None:
    start = core.list_namespaced_config_map("default").metadata.resource_version
    results: list[list[tuple[str, str]]] = [[] for _ in range(5)]

    def run(index: int) -> None:
        results[index] = collect(core, 10, timeout=5, resource_version=start)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(5)]
    for thread in threads:
        thread.start()
    for index in range(10):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"c{index}"}})
    for thread in threads:
        thread.join()
    expected = [("ADDED", f"c{i}") for i in range(10)]
    assert results == [expected] * 5


def test_watch_list_ends_initial_events_with_a_bookmark(api_server: LocalAPIServer) -> None:
    with client.ApiClient(client.Configuration(host=api_server.url)) as c:
        core = client.CoreV1Api(c)
        core.create_namespaced_config_map("default", {"metadata": {"name": "wl"}})
        response = core.list_namespaced_config_map(
            "default",
            watch=True,
            send_initial_events=True,
            resource_version_match="NotOlderThan",
            allow_watch_bookmarks=True,
            timeout_seconds=1,
            _preload_content=False,
        )
        lines = [json.loads(line) for line in response.read().splitlines() if line.strip()]
    assert lines[0]["type"] == "ADDED"
    assert lines[0]["object"]["metadata"]["name"] == "wl"
    assert lines[1]["type"] == "BOOKMARK"
    assert lines[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
