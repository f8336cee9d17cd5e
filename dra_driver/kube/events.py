"""Events, as client-go's recorder writes them: core/v1 Events, repeats counted on one object.

Why counting: the scheduler retries an unschedulable pod after every change in the cluster; one
``FailedScheduling`` Event per attempt would bury the message under copies (``kubectl describe pod``
shows ``(x7 over 2m)`` instead, from ``count`` and ``firstTimestamp``).  A failed write of an Event is
logged and dropped: Events are best effort in Kubernetes too.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from dra_driver.claimstatus import rfc3339
from dra_driver.kube.client import EVENTS, Client, Kind
from dra_driver.kube.failures import describe_failure

log = logging.getLogger(__name__)
NORMAL = "Normal"
WARNING = "Warning"
_REMEMBERED = 4096  # distinct (object, reason, message) whose Event is counted rather than repeated
MAX_MESSAGE = 1024  # what kube-apiserver accepts of a core/v1 Event's message


def build_event(
    involved: dict[str, str],
    event_type: str,
    reason: str,
    message: str,
    *,
    component: str,
    host: str | None,
    now: datetime,
    reporting_component: str | None = None,
) -> dict[str, Any]:
    """A new core/v1 Event about ``involved`` (its ``involvedObject``: apiVersion, kind, name, uid,
    namespace when namespaced), named as client-go's recorder names them (``<name>.<UnixNano in hex>``,
    so the names of one object's Events sort in time order): the one way every migdra component builds
    an Event."""
    stamp = rfc3339(now)
    namespace = involved.get("namespace") or "default"
    source = {"component": component, **({"host": host} if host else {})}
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{involved['name']}.{time.time_ns():x}", "namespace": namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "type": event_type,
        "source": source,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "reportingComponent": reporting_component or component,
        "reportingInstance": host or component,
    }


class EventRecorder:
    """Writes the Events of one component (``source.component``, e.g. ``default-scheduler``); the same
    (object, type, reason, message) again is counted on the Event already written."""

    def __init__(
        self, client: Client, component: str, host: str | None = None, reporting_component: str | None = None
    ) -> None:
        self.client = client
        self.component = component
        self.host = host
        self.reporting_component = reporting_component
        self._seen: dict[tuple[str, str, str, str], tuple[str, str, int]] = {}
        self._lock = threading.Lock()

    def event(self, kind: Kind, obj: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        """Record ``reason``/``message`` about ``obj`` of ``kind`` (a dict as the API server returned it);
        a failed write is logged and dropped (Events are best effort)."""
        meta = obj["metadata"]
        try:
            self.write(kind, obj, event_type, reason, message)
        except Exception as exc:
            log.warning(
                "event %s %s on %s/%s not recorded: %s",
                event_type,
                reason,
                meta.get("namespace") or "default",
                meta.get("name"),
                describe_failure(exc),
            )

    def write(self, kind: Kind, obj: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        """:meth:`event`, raising what the API server answered (for a writer that retries, as the node
        plugin's claim reporter does through an API outage).  A counted Event that expired meanwhile (the
        API server keeps Events an hour) is written anew."""
        meta = obj["metadata"]
        namespace = meta.get("namespace") or "default"
        key = (meta.get("uid", ""), event_type, reason, message)
        moment = datetime.now(UTC)
        now = rfc3339(moment)
        with self._lock:
            seen = self._seen.get(key)
        try:
            if seen is not None:
                name, first, count = seen
                try:
                    self.client.merge_patch(EVENTS, namespace, name, {"count": count + 1, "lastTimestamp": now})
                except ApiException as exc:
                    if exc.status != 404:
                        raise
                else:
                    self._remember(key, (name, first, count + 1))
                    return
            body = self._new_event(kind, obj, event_type, reason, message, moment)
            created = self.client.create(EVENTS, body)
            self._remember(key, (created["metadata"]["name"], now, 1))
        except Exception:
            with self._lock:
                self._seen.pop(key, None)
            raise

    def _remember(self, key: tuple[str, str, str, str], value: tuple[str, str, int]) -> None:
        with self._lock:
            if key not in self._seen and len(self._seen) >= _REMEMBERED:
                self._seen.pop(next(iter(self._seen)))
            self._seen[key] = value

    def _new_event(
        self, kind: Kind, obj: dict[str, Any], event_type: str, reason: str, message: str, now: datetime
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
        if not involved["resourceVersion"]:
            del involved["resourceVersion"]
        return build_event(
            involved,
            event_type,
            reason,
            message,
            component=self.component,
            host=self.host,
            now=now,
            reporting_component=self.reporting_component,
        )
