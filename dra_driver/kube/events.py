"""Events, as client-go's recorder writes them: core/v1 Events, repeats counted on one object.

Why counting: the scheduler retries an unschedulable pod after every change in the cluster; one
``FailedScheduling`` Event per attempt would bury the message under copies (``kubectl describe pod``
shows ``(x7 over 2m)`` instead, from ``count`` and ``firstTimestamp``).  A failed write of an Event is
logged and dropped: Events are best effort in Kubernetes too.
"""

from __future__ import annotations

import logging
import secrets
import threading
from datetime import UTC, datetime
from typing import Any

from dra_driver.kube.client import EVENTS, Client, Kind
from dra_driver.kube.failures import describe_failure

log = logging.getLogger(__name__)
NORMAL = "Normal"
WARNING = "Warning"
_REMEMBERED = 4096  # distinct (object, reason, message) whose Event is counted rather than repeated


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    """Writes the Events of one component (``source.component``, e.g. ``default-scheduler``)."""

    def __init__(self, client: Client, component: str, host: str | None = None) -> None:
        self.client = client
        self.component = component
        self.host = host
        self._seen: dict[tuple[str, str, str, str], tuple[str, str, int]] = {}
        self._lock = threading.Lock()

    def event(self, kind: Kind, obj: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        """Record ``reason``/``message`` about ``obj`` of ``kind`` (a dict as the API server returned it)."""
        meta = obj["metadata"]
        namespace = meta.get("namespace") or "default"
        key = (meta.get("uid", ""), event_type, reason, message)
        now = _now()
        with self._lock:
            seen = self._seen.get(key)
        try:
            if seen is not None:
                name, first, count = seen
                patch = {"count": count + 1, "lastTimestamp": now}
                self.client.merge_patch(EVENTS, namespace, name, patch)
                self._remember(key, (name, first, count + 1))
                return
            body = self._new_event(kind, obj, namespace, event_type, reason, message, now)
            created = self.client.create(EVENTS, body)
            self._remember(key, (created["metadata"]["name"], now, 1))
        except Exception as exc:
            log.warning(
                "event %s %s on %s/%s not recorded: %s",
                event_type,
                reason,
                namespace,
                meta.get("name"),
                describe_failure(exc),
            )
            with self._lock:
                self._seen.pop(key, None)

    def _remember(self, key: tuple[str, str, str, str], value: tuple[str, str, int]) -> None:
        with self._lock:
            if key not in self._seen and len(self._seen) >= _REMEMBERED:
                self._seen.pop(next(iter(self._seen)))
            self._seen[key] = value

    def _new_event(
        self, kind: Kind, obj: dict[str, Any], namespace: str, event_type: str, reason: str, message: str, now: str
    ) -> dict[str, Any]:
        meta = obj["metadata"]
        involved = {
            "apiVersion": kind.api_version,
            "kind": kind.kind,
            "name": meta["name"],
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        }
        if meta.get("namespace"):
            involved["namespace"] = meta["namespace"]
        source: dict[str, str] = {"component": self.component}
        if self.host:
            source["host"] = self.host
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{secrets.token_hex(8)}", "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:1024],
            "type": event_type,
            "source": source,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": self.component,
            "reportingInstance": self.host or self.component,
        }
