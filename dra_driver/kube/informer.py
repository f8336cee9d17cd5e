"""List-then-watch caches of API objects, and the one change signal the components wait on.

Why level-triggered: every loop that reads a cache (the reservation controller; in the node plugin
the claim status reconciliation, the placement occupancy and realize before bind; the development
cluster's parts too) looks at the whole cached state after any change and does what is missing, so a
missed or coalesced event can never lose work; the caches only decide *when* to look again.  A watch that the
server ends, breaks or refuses as too old (410 Gone) is followed by a fresh list, as client-go's
reflector does; objects in the cache newer than that list (our own writes, assumed) are kept.

Which objects changed: every change is numbered (:meth:`Informer.changed_since`), so a loop whose
pass must not cost in proportion to the whole cache (the reservation controller at thousands of claims)
looks again only at the objects that changed since its last pass, and at everything when the cache no
longer remembers that far back.

Read your own writes: a component that wrote an object hands the server's answer to
:meth:`Informer.assume` so its next look sees the write even before the watch delivers it (the
scheduler must never allocate a device twice because its cache lagged behind its own allocation:
kube-scheduler's "assume cache" exists for the same reason).  Recent deletions are remembered, so the
late answer to a write cannot bring back an object the watch has already seen deleted.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
from typing import Any

from dra_driver.kube.client import Client, Kind, WatchStream, status_code
from dra_driver.kube.failures import BackoffPolicy, describe_failure

log = logging.getLogger(__name__)
WATCH_TIMEOUT_SECONDS = 60
_RELIST_BACKOFF = BackoffPolicy(initial=0.1, maximum=2.0)
_TOMBSTONES = 4096  # recent deletions remembered, so a late answer to our own write cannot revive the object


class Changes:
    """A counter every informer bumps after each change; waiters sleep until it moves past what they saw."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._count = 0

    def bump(self) -> None:
        with self._condition:
            self._count += 1
            self._condition.notify_all()

    @property
    def count(self) -> int:
        with self._condition:
            return self._count

    def wait_past(self, seen: int, timeout: float) -> int:
        """Block until the count is past ``seen`` or ``timeout`` passed; returns the count now."""
        with self._condition:
            self._condition.wait_for(lambda: self._count != seen, timeout)
            return self._count


def object_key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


def _resource_version(obj: dict[str, Any]) -> int:
    return int(obj["metadata"].get("resourceVersion") or 0)


class Informer:
    """One kind's objects (optionally narrowed by a field selector), kept current by a thread."""

    def __init__(
        self,
        client: Client,
        kind: Kind,
        changes: Changes,
        *,
        field_selector: str | None = None,
        watch_timeout: int = WATCH_TIMEOUT_SECONDS,
    ) -> None:
        self._client = client.fork()
        self.kind = kind
        self.changes = changes
        self._listeners: list[Changes] = []  # more loops waiting on this cache (one informer per kind, shared)
        self.field_selector = field_selector
        self.watch_timeout = watch_timeout
        self._objects: dict[tuple[str, str], dict[str, Any]] = {}
        self._deleted: dict[tuple[str, str], int] = {}  # key -> resourceVersion of its deletion (recent ones)
        self._revision = 0  # the number of the last change to the cache
        self._changed: dict[tuple[str, str], int] = {}  # key -> the number of its last change, oldest first
        self._forgotten = 0  # changes up to this number may be missing from ``_changed``
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stopping = threading.Event()
        self._stream: WatchStream | None = None
        self._thread = threading.Thread(target=self._run, name=f"informer-{kind.plural}", daemon=True)

    # -- reading -------------------------------------------------------------------------------

    def items(self) -> list[dict[str, Any]]:
        """The cached objects (shared: copy before changing one)."""
        with self._lock:
            return list(self._objects.values())

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._objects.get((namespace or "", name))

    def changed_since(self, revision: int) -> tuple[int, set[tuple[str, str]] | None]:
        """The number of the cache's last change, and the keys (namespace, name) of the objects added,
        changed or deleted after change ``revision`` -- or None for the keys when the cache no longer
        remembers every change since then (look at everything).  0 asks for everything ever seen."""
        with self._lock:
            if revision < self._forgotten:
                return self._revision, None
            keys: set[tuple[str, str]] = set()
            for key, number in reversed(self._changed.items()):
                if number <= revision:
                    break
                keys.add(key)
            return self._revision, keys

    def _mark_locked(self, key: tuple[str, str]) -> None:
        """Number a change of ``key`` (the lock held).  Only the last change of each key is kept, for at
        most the cached objects plus the recent deletions; older numbers are forgotten in order."""
        self._revision += 1
        self._changed.pop(key, None)
        self._changed[key] = self._revision
        while len(self._changed) > len(self._objects) + _TOMBSTONES:
            self._forgotten = self._changed.pop(next(iter(self._changed)))

    def wait_synced(self, timeout: float) -> bool:
        """Whether the first list arrived within ``timeout`` seconds."""
        return self._synced.wait(timeout)

    def listen(self, changes: Changes) -> None:
        """Bump ``changes`` too after every change: another loop shares this cache (one informer per kind
        in a process; whoever made it starts and stops it)."""
        self._listeners.append(changes)

    def _bump(self) -> None:
        self.changes.bump()
        for changes in self._listeners:
            changes.bump()

    def assume(self, obj: dict[str, Any]) -> None:
        """Take the server's answer to our own write now, unless the cache already holds something newer."""
        key = object_key(obj)
        meta = obj["metadata"]
        with self._lock:
            if meta.get("deletionTimestamp") and not meta.get("finalizers"):
                if self._objects.pop(key, None) is not None:  # the write removed the last finalizer: gone
                    self._mark_locked(key)
            elif self._deleted.get(key, -1) < _resource_version(obj):  # not deleted since this write
                cached = self._objects.get(key)
                if cached is None or _resource_version(obj) >= _resource_version(cached):
                    self._objects[key] = copy.deepcopy(obj)
                    if cached is None or _resource_version(obj) > _resource_version(cached):
                        self._mark_locked(key)
        self._bump()

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        """Its thread runs (it stops only when told to: list and watch errors are retried)."""
        return self._thread.is_alive()

    def stop(self) -> None:
        self._stopping.set()
        stream = self._stream
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        if not self._thread.is_alive():  # its own connection pool (``fork``): closed once nothing uses it
            self._client.close()

    def _run(self) -> None:
        backoff = _RELIST_BACKOFF.start()
        while not self._stopping.is_set():
            try:
                resource_version = self._relist()
                backoff.reset()
                while not self._stopping.is_set():
                    resource_version = self._watch(resource_version)
            except _Expired:
                log.debug("%s: watch expired; listing again", self.kind.plural)
            except Exception as exc:  # the API server went away or answered an error: list again later
                if self._stopping.is_set():
                    return
                delay = backoff.next_delay(exc)
                log.debug("%s: %s; listing again in %.1f s", self.kind.plural, describe_failure(exc), delay)
                self._stopping.wait(delay)

    def _relist(self) -> str:
        items, resource_version = self._client.list(self.kind, field_selector=self.field_selector)
        listed_at = int(resource_version or 0)
        with self._lock:
            fresh = {object_key(obj): obj for obj in items}
            # A write assumed while the list was on its way is newer than the list: keep it (the watch
            # from the list's version delivers it again), or the cache would forget our own allocation.
            for key, cached in self._objects.items():
                if _resource_version(cached) > listed_at and (
                    key not in fresh or _resource_version(fresh[key]) < _resource_version(cached)
                ):
                    fresh[key] = cached
            old = self._objects
            self._objects = fresh
            for key in old.keys() | fresh.keys():
                before, after = old.get(key), fresh.get(key)
                if before is None or after is None or _resource_version(before) != _resource_version(after):
                    self._mark_locked(key)
        self._synced.set()
        self._bump()
        return resource_version

    def _watch(self, resource_version: str) -> str:
        try:
            stream = self._client.watch(
                self.kind, resource_version, timeout_seconds=self.watch_timeout, field_selector=self.field_selector
            )
        except Exception as exc:
            if status_code(exc) == 410:
                raise _Expired from exc
            raise
        self._stream = stream
        try:
            if self._stopping.is_set():  # stop() ran while the watch was being opened: it saw no stream
                stream.close()
                return resource_version
            for event in stream:
                resource_version = self._apply(event, resource_version)
        finally:
            self._stream = None
        return resource_version

    def _apply(self, event: dict[str, Any], resource_version: str) -> str:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Expired
            raise RuntimeError(f"watch error: {obj.get('message')}")
        new_version = str(obj.get("metadata", {}).get("resourceVersion") or resource_version)
        if kind == "BOOKMARK":
            return new_version
        key = object_key(obj)
        with self._lock:
            if kind == "DELETED":
                self._objects.pop(key, None)
                if len(self._deleted) >= _TOMBSTONES:
                    self._deleted.pop(next(iter(self._deleted)))
                self._deleted[key] = _resource_version(obj)
                self._mark_locked(key)
            else:
                cached = self._objects.get(key)
                if cached is None or _resource_version(obj) >= _resource_version(cached):
                    self._objects[key] = obj
                    if cached is None or _resource_version(obj) > _resource_version(cached):
                        self._mark_locked(key)  # not the echo of our own write, assumed already
        self._bump()
        return new_version


class _Expired(Exception):
    """The server no longer has the history to continue a watch from our resourceVersion."""
