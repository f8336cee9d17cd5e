"""The object store: every object, the one global resourceVersion, the event history and watchers.

All state sits behind one re-entrant lock (``Store.lock``); the API operations hold it across a whole
read-modify-write so optimistic concurrency is exact.  Every write takes the next resourceVersion,
records an :class:`Event` in a bounded history (older versions then answer 410 Expired) and offers it
to the resource's watchers without blocking.  The store knows nothing of Kubernetes rules beyond
``metadata.resourceVersion``; those live in ``operations.py``.  Objects handed in become the store's
and must not be mutated afterwards; objects handed out must not be mutated by callers.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from migdra_devcluster.apiserver.errors import Gone
from migdra_devcluster.apiserver.watch import ADDED, DELETED, MODIFIED, Event, Watcher

ObjectKey = tuple[str, str]  # (namespace or "", name)


class Store:
    """In-memory objects by resource key, with history for watch resumption."""

    def __init__(self, history_limit: int = 10_000) -> None:
        self.lock = threading.RLock()
        self._objects: dict[str, dict[ObjectKey, dict[str, Any]]] = {}
        self._by_uid: dict[str, tuple[str, str, str]] = {}
        self._resource_version = 0
        self._history: deque[Event] = deque()
        self._history_limit = history_limit
        self._compacted = 0
        self._watchers: dict[str, list[Watcher]] = {}
        self._listeners: list[Callable[[Event], None]] = []
        self.writes = 0

    @property
    def resource_version(self) -> int:
        """The newest resourceVersion handed out."""
        return self._resource_version

    @property
    def compacted_resource_version(self) -> int:
        """Versions at or below this one are no longer in the history."""
        return self._compacted

    def add_listener(self, listener: Callable[[Event], None]) -> None:
        """Call ``listener(event)`` (under the lock; it must not block) after every write."""
        self._listeners.append(listener)

    # -- reads -------------------------------------------------------------------------------------

    def get(self, resource_key: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored object, or None."""
        return self._objects.get(resource_key, {}).get((namespace, name))

    def objects(self, resource_key: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Objects of a resource (in one namespace, or all), ordered by namespace then name."""
        objects = self._objects.get(resource_key, {})
        keys = sorted(k for k in objects if namespace is None or k[0] == namespace)
        return [objects[k] for k in keys]

    def locate_uid(self, uid: str) -> tuple[str, str, str] | None:
        """``(resource_key, namespace, name)`` of the object with this UID, if it exists."""
        return self._by_uid.get(uid)

    def all_objects(self) -> list[tuple[str, dict[str, Any]]]:
        """Every stored object with its resource key (for the garbage collector and snapshots)."""
        with self.lock:
            return [(key, obj) for key, objects in self._objects.items() for obj in objects.values()]

    # -- writes ------------------------------------------------------------------------------------

    def put(self, resource_key: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace ``obj``, stamping the next resourceVersion; returns the stored object."""
        with self.lock:
            meta = obj["metadata"]
            key = (meta.get("namespace", ""), meta["name"])
            objects = self._objects.setdefault(resource_key, {})
            old = objects.get(key)
            self._resource_version += 1
            meta["resourceVersion"] = str(self._resource_version)
            objects[key] = obj
            self._by_uid[meta["uid"]] = (resource_key, key[0], key[1])
            self._record(Event(MODIFIED if old else ADDED, resource_key, key[0], obj, old, self._resource_version))
            return obj

    def remove(self, resource_key: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Delete ``obj``; its final state carries the resourceVersion of the deletion."""
        with self.lock:
            meta = obj["metadata"]
            key = (meta.get("namespace", ""), meta["name"])
            old = self._objects.get(resource_key, {}).pop(key)
            self._by_uid.pop(old["metadata"]["uid"], None)
            self._resource_version += 1
            final = {**old, "metadata": {**old["metadata"], "resourceVersion": str(self._resource_version)}}
            self._record(Event(DELETED, resource_key, key[0], final, old, self._resource_version))
            return final

    def _record(self, event: Event) -> None:
        self.writes += 1
        self._history.append(event)
        while len(self._history) > self._history_limit:
            self._compacted = self._history.popleft().resource_version
        watchers = self._watchers.get(event.resource_key)
        if watchers:
            for watcher in list(watchers):
                if not watcher.offer(event):
                    watchers.remove(watcher)
        for listener in self._listeners:
            listener(event)

    # -- watches -----------------------------------------------------------------------------------

    def start_watch(self, watcher: Watcher, since: int | None) -> tuple[int, int]:
        """Register ``watcher`` and queue what it must see first, atomically with respect to writes.

        ``since=None`` queues a synthetic ADDED for every existing object (kube's "" and "0"); otherwise
        it replays history after ``since``, or raises :class:`Gone` if that part was compacted.  Returns
        how many synthetic events were queued and the resourceVersion the watch starts at.
        """
        with self.lock:
            initial = 0
            if since is None:
                for obj in self.objects(watcher.resource_key, watcher.namespace):
                    rv = int(obj["metadata"]["resourceVersion"])
                    ns = obj["metadata"].get("namespace", "")
                    watcher.offer(Event(ADDED, watcher.resource_key, ns, obj, None, rv))
                    initial += 1
            else:
                if since < self._compacted:
                    raise Gone(f"too old resource version: {since} ({self._compacted + 1})")
                for event in self._history:
                    if event.resource_version > since and event.resource_key == watcher.resource_key:
                        watcher.offer(event)
            self._watchers.setdefault(watcher.resource_key, []).append(watcher)
            return initial, self._resource_version

    def stop_watch(self, watcher: Watcher) -> None:
        """Unregister ``watcher`` (idempotent)."""
        with self.lock:
            watchers = self._watchers.get(watcher.resource_key, [])
            if watcher in watchers:
                watchers.remove(watcher)
        watcher.close()

    def close_all_watches(self) -> None:
        """End every open watch (server shutdown)."""
        with self.lock:
            watchers = [w for ws in self._watchers.values() for w in ws]
            self._watchers.clear()
        for watcher in watchers:
            watcher.close()

    def bookmark_version(self, watcher: Watcher) -> int | None:
        """A resourceVersion the watcher has provably seen everything up to, or None if it is behind."""
        with self.lock:
            return self._resource_version if watcher.is_idle() else None

    # -- snapshots ---------------------------------------------------------------------------------

    def restore(self, resource_version: int, objects: list[tuple[str, dict[str, Any]]]) -> None:
        """Load a snapshot into an empty store; history starts empty, so older versions are compacted."""
        with self.lock:
            for resource_key, obj in objects:
                meta = obj["metadata"]
                self._objects.setdefault(resource_key, {})[(meta.get("namespace", ""), meta["name"])] = obj
                self._by_uid[meta["uid"]] = (resource_key, meta.get("namespace", ""), meta["name"])
            self._resource_version = resource_version
            self._compacted = resource_version
