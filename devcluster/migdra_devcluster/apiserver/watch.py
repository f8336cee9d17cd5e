"""One watch: its pending events, its filters, and how a stored event becomes the line a client reads.

The store offers every event of a resource to each of its watchers without blocking (``offer``); a
watcher that falls ``max_pending`` events behind is *dropped* rather than slowing writers down, and its
client then reads an ERROR event (410 Expired) and relists, as client-go does after a too-slow watch.
Selector semantics follow kube-apiserver: an object that starts matching reads as ADDED, one that stops
matching as DELETED.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from migdra_devcluster.apiserver.selectors import FieldSelector, LabelSelector

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"
BOOKMARK = "BOOKMARK"
ERROR = "ERROR"


@dataclass(slots=True)
class Event:
    """A change to one object, numbered by the resourceVersion the change produced.

    ``old`` is the state before a MODIFIED change (needed for selector transitions).  The serialized line
    is computed once and shared by every watcher that needs it unchanged.
    """

    type: str
    resource_key: str
    namespace: str
    obj: dict[str, Any]
    old: dict[str, Any] | None
    resource_version: int
    _line: bytes | None = field(default=None, repr=False)

    def line(self) -> bytes:
        """``{"type": ..., "object": ...}`` plus newline: one frame of the watch stream."""
        if self._line is None:
            self._line = encode_event(self.type, self.obj)
        return self._line


def encode_event(event_type: str, obj: dict[str, Any]) -> bytes:
    """Serialize one watch event frame."""
    return json.dumps({"type": event_type, "object": obj}, separators=(",", ":")).encode() + b"\n"


class Watcher:
    """The server side of one open watch: a bounded queue fed by the store, drained by one HTTP thread."""

    def __init__(
        self,
        resource_key: str,
        namespace: str | None,
        label_selector: LabelSelector,
        field_selector: FieldSelector,
        max_pending: int,
        view: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.resource_key = resource_key
        self.view = view
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.max_pending = max_pending
        self._pending: deque[Event] = deque()
        self._ready = threading.Condition(threading.Lock())
        self.dropped = False
        self.closed = False
        self.last_resource_version = 0
        self._filtered = bool(label_selector.requirements or field_selector.requirements)

    def offer(self, event: Event) -> bool:
        """Queue ``event`` without blocking; False (and the watcher is dropped) when it is too far behind."""
        with self._ready:
            if self.closed:
                return False
            if len(self._pending) >= self.max_pending:
                self.dropped = True
                self.closed = True
                self._ready.notify()
                return False
            self._pending.append(event)
            self._ready.notify()
            return True

    def close(self) -> None:
        """End the watch (server shutdown, or the client went away)."""
        with self._ready:
            self.closed = True
            self._ready.notify()

    def is_idle(self) -> bool:
        """No events wait to be sent (so a bookmark at the store's current version is truthful)."""
        with self._ready:
            return not self._pending

    def next_event(self, timeout: float) -> Event | None:
        """The next pending event, or None after ``timeout`` seconds or once closed and drained."""
        with self._ready:
            if not self._pending and not self.closed:
                self._ready.wait(timeout)
            if self._pending and not self.dropped:
                return self._pending.popleft()
            return None

    def render(self, event: Event) -> bytes | None:
        """The frame this watcher's client should read for ``event``, or None if it is filtered out."""
        self.last_resource_version = event.resource_version
        if self.namespace is not None and event.namespace != self.namespace:
            return None
        if self.view is None and not self._filtered:
            return event.line()
        obj = event.obj if self.view is None else self.view(event.obj)
        old = event.old if self.view is None or event.old is None else self.view(event.old)
        matches_now = self._matches(obj)
        if event.type == MODIFIED:
            matched_before = old is not None and self._matches(old)
            if matches_now and matched_before:
                return encode_event(MODIFIED, obj)
            if matches_now:
                return encode_event(ADDED, obj)
            if matched_before:
                return encode_event(DELETED, obj)
            return None
        return encode_event(event.type, obj) if matches_now else None

    def _matches(self, obj: dict[str, Any]) -> bool:
        return self.label_selector.matches(obj) and self.field_selector.matches(obj)
