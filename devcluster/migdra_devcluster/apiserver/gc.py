"""The garbage collector: everything this server deletes on its own, in one background thread.

- Owner references: an object all of whose owners (by UID) are gone is deleted (Background).  An owner
  deleted with ``propagationPolicy=Foreground`` carries the ``foregroundDeletion`` finalizer; its
  dependents are deleted first and the finalizer is removed once none is left.  (``Orphan`` is done
  synchronously by the delete itself.)
- Namespaces: a namespace with a ``deletionTimestamp`` has its contents deleted (objects with finalizers
  are only marked), and is removed once it is empty and has no finalizers of its own.

The thread wakes on every deletion (a store listener) and at least every ``interval`` seconds; a pass
scans all objects, which is fine at this server's scale.  It must never hold the store lock while
waiting.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from migdra_devcluster.apiserver.errors import ApiError
from migdra_devcluster.apiserver.operations import FOREGROUND_FINALIZER, DeleteOptions, Operations
from migdra_devcluster.apiserver.watch import DELETED, MODIFIED, Event

log = logging.getLogger(__name__)


class GarbageCollector:
    """Owner-reference and namespace clean-up, run by one background thread until :meth:`stop`."""

    def __init__(self, operations: Operations, interval: float = 1.0) -> None:
        self.operations = operations
        self.interval = interval
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="apiserver-gc", daemon=True)
        operations.store.add_listener(self._on_event)

    def start(self) -> None:
        """Start the collector thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop and join the collector thread."""
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()

    def _on_event(self, event: Event) -> None:
        if event.type == DELETED or (event.type == MODIFIED and event.obj["metadata"].get("deletionTimestamp")):
            self._wake.set()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stopping.is_set():
                return
            try:
                while self.collect_once():
                    pass
            except Exception:  # a bug here must not kill the server silently; log and keep collecting
                log.exception("garbage collection pass failed")

    def collect_once(self) -> bool:
        """One pass; True if it changed anything (so another pass may find more)."""
        store = self.operations.store
        changed = False
        objects = store.all_objects()
        with store.lock:
            live_uids = {obj["metadata"]["uid"] for _, obj in objects}
        dependents: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for key, obj in objects:
            for ref in obj["metadata"].get("ownerReferences") or []:
                dependents.setdefault(ref.get("uid", ""), []).append((key, obj))
        for key, obj in objects:
            meta = obj["metadata"]
            refs = meta.get("ownerReferences") or []
            if refs and not meta.get("deletionTimestamp") and not any(ref.get("uid") in live_uids for ref in refs):
                changed |= self._delete(key, obj)
            if meta.get("deletionTimestamp") and FOREGROUND_FINALIZER in (meta.get("finalizers") or []):
                waiting = [d for d in dependents.get(meta["uid"], []) if d[1]["metadata"]["uid"] in live_uids]
                for dep_key, dep in waiting:
                    if not dep["metadata"].get("deletionTimestamp"):
                        changed |= self._delete(dep_key, dep)
                if not waiting:
                    self.operations.remove_finalizer(key, obj, FOREGROUND_FINALIZER)
                    changed = True
            if key == "namespaces" and meta.get("deletionTimestamp"):
                changed |= self._clean_namespace(objects, obj)
        return changed

    def _delete(self, key: str, obj: dict[str, Any]) -> bool:
        resource = self.operations.registry.by_key(key)
        meta = obj["metadata"]
        try:
            self.operations.delete(
                resource, meta.get("namespace", ""), meta["name"], DeleteOptions(precondition_uid=meta["uid"])
            )
        except ApiError:  # already gone or replaced by a new object of the same name: nothing to collect
            return False
        return True

    def _clean_namespace(self, objects: list[tuple[str, dict[str, Any]]], namespace: dict[str, Any]) -> bool:
        name = namespace["metadata"]["name"]
        contents = [(k, o) for k, o in objects if k != "namespaces" and o["metadata"].get("namespace") == name]
        changed = False
        for key, obj in contents:
            if not obj["metadata"].get("deletionTimestamp"):
                changed |= self._delete(key, obj)
        if contents or namespace["metadata"].get("finalizers"):
            return changed
        store = self.operations.store
        with store.lock:
            current = store.get("namespaces", "", name)
            if current is not None and current["metadata"]["uid"] == namespace["metadata"]["uid"]:
                if any(o["metadata"].get("namespace") == name for _, o in store.all_objects()):
                    return changed
                store.remove("namespaces", current)
                return True
        return changed
