"""Every write to ResourceSlices as kube-apiserver orders them: a watch read on a thread, and a barrier that
says when every write before it has been seen.

Why a watch: the API server sends one event per write, in the order of their resourceVersions, so the
states a test rebuilds from the events are exactly the states a reader (kube-scheduler's informer) could
see -- no poll can promise that.  Why a barrier: "nothing was written" needs an end to the watching; a
marker slice of another driver, created and seen, ends it, since every earlier write comes before it.
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes import client, watch

from tests.kube_apiserver import KubeApiServer

BARRIER_DRIVER = "barrier.tests.migdra.io"
"""The driver of the marker slices: no component under test lists it."""

Slice = dict[str, Any]


class SliceWatch:
    """The ResourceSlices the server holds, and their state after each write seen (``states``) while
    ``recording``; marker slices are left out of both."""

    def __init__(self, api: KubeApiServer) -> None:
        self._api_client = api.api_client()
        self._resource = client.ResourceV1Api(self._api_client)
        self._watch = watch.Watch()
        self._lock = threading.Lock()
        self._seen = threading.Condition(self._lock)
        self._barriers = itertools.count()
        self._barriers_seen: set[str] = set()
        self.slices: dict[str, Slice] = {}
        self.recording = False
        self._closing = False
        self.states: list[list[Slice]] = []
        self.writes: list[tuple[str, str]] = []  # (event type, slice name) while recording
        listed = self._resource.list_resource_slice()
        for item in listed.items:
            body = self._api_client.sanitize_for_serialization(item)
            self.slices[body["metadata"]["name"]] = body
        self._thread = threading.Thread(target=self._run, args=(listed.metadata.resource_version,), name="slice-watch")
        self._thread.start()

    def _run(self, resource_version: str) -> None:
        try:
            self._follow(resource_version)
        except Exception:
            if not self._closing:  # else the connection closed under the stream: the end asked for
                raise

    def _follow(self, resource_version: str) -> None:
        stream = self._watch.stream(
            self._resource.list_resource_slice, resource_version=resource_version, _request_timeout=(5, 3600)
        )
        for event in stream:
            body = self._api_client.sanitize_for_serialization(event["object"])
            name = body["metadata"]["name"]
            with self._seen:
                if body["spec"].get("driver") == BARRIER_DRIVER:
                    self._barriers_seen.add(name)
                else:
                    if event["type"] == "DELETED":
                        self.slices.pop(name, None)
                    else:
                        self.slices[name] = body
                    if self.recording:
                        self.writes.append((event["type"], name))
                        self.states.append(copy.deepcopy(list(self.slices.values())))
                self._seen.notify_all()

    def barrier(self) -> None:
        """Return once every write made before the call has been seen."""
        name = f"barrier-{next(self._barriers)}"
        self._resource.create_resource_slice(
            {
                "metadata": {"name": name},
                "spec": {
                    "driver": BARRIER_DRIVER,
                    "pool": {"name": name, "generation": 0, "resourceSliceCount": 1},
                    "allNodes": True,
                },
            }
        )
        with self._seen:
            self._seen.wait_for(lambda: name in self._barriers_seen, timeout=60)
            assert name in self._barriers_seen, f"the watch never delivered marker slice {name}"
        self._resource.delete_resource_slice(name)

    def current(self, node: str | None = None) -> list[Slice]:
        with self._lock:
            return [copy.deepcopy(s) for s in self.slices.values() if node is None or s["spec"].get("nodeName") == node]

    def close(self) -> None:
        """Stop the watch (the client closes its connection: the stream ends at once)."""
        self._closing = True
        self._watch.stop()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the slice watch did not stop"
        self._api_client.close()


@contextmanager
def slice_watch(api: KubeApiServer) -> Iterator[SliceWatch]:
    """A :class:`SliceWatch` for the block."""
    recorder = SliceWatch(api)
    try:
        yield recorder
    finally:
        recorder.close()
