"""The optional DRA resource-health stream (``v1alpha1.DRAResourceHealth/NodeWatchResources``).

Owns turning a device-health source -- a callable returning ``(pool_name, device_name, healthy)``
for every device, ``healthy=None`` when unknown -- into kubelet's stream: the full list right away,
again as soon as it changes, and at least every ``interval`` seconds even when nothing changed
(kubelet turns devices it has not heard about for a while into Unknown).  It never decides what is
healthy; the source does.

Concurrency: each open stream occupies one worker thread of the DRA server for its lifetime and
polls the source every ``poll_interval`` seconds, so the source must be cheap and thread-safe.
A stream ends when kubelet cancels it or :meth:`HealthServicer.stop` is called (server shutdown).
A source that raises ends the stream with ``UNAVAILABLE``; kubelet reopens it after 5 s.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeAlias

import grpc

from dra_driver.kubelet.protos import dra_health_v1alpha1_pb2 as health_pb2
from kubeletplugin.grpc import convert
from kubeletplugin.grpc.convert import DeviceHealthEntry

log = logging.getLogger(__name__)

DeviceHealthSource: TypeAlias = Callable[[], Sequence[DeviceHealthEntry]]

# The supported_versions string that makes kubelet open the stream (docs/kubelet-grpc.md, "Health stream").
HEALTH_SERVICE_VERSION = "v1alpha1.DRAResourceHealth"


class HealthServicer:
    """``v1alpha1.DRAResourceHealth`` over a :data:`DeviceHealthSource`."""

    def __init__(
        self,
        source: DeviceHealthSource,
        *,
        interval: float = 10.0,
        poll_interval: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if interval <= 0 or poll_interval <= 0:
            raise ValueError("health intervals must be positive")
        self._source = source
        self._interval = interval
        self._poll_interval = poll_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._streams: set[threading.Event] = set()
        self._stopped = False

    def stop(self) -> None:
        """End every open stream and refuse new ones, so server shutdown need not wait for them."""
        with self._lock:
            self._stopped = True
            streams = list(self._streams)
        for wake in streams:
            wake.set()

    def _snapshot(self, context: grpc.ServicerContext) -> tuple[DeviceHealthEntry, ...]:
        try:
            return tuple(self._source())
        except Exception as e:
            log.exception("device health source failed; ending the health stream")
            context.abort(grpc.StatusCode.UNAVAILABLE, f"device health unavailable: {type(e).__name__}: {e}")
            raise  # abort raises; this line only tells type checkers so

    def NodeWatchResources(
        self, request: health_pb2.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[health_pb2.NodeWatchResourcesResponse]:
        done = threading.Event()
        with self._lock:
            if self._stopped:
                context.abort(grpc.StatusCode.UNAVAILABLE, "the plugin is shutting down")
            self._streams.add(done)
        context.add_callback(done.set)  # kubelet went away: stop polling for it
        try:
            last_sent: tuple[DeviceHealthEntry, ...] | None = None
            last_sent_at = 0.0
            while True:
                devices = self._snapshot(context)
                now = time.monotonic()
                if devices != last_sent or now - last_sent_at >= self._interval:
                    yield convert.health_response(devices, observed_at=int(self._clock()))
                    last_sent, last_sent_at = devices, now
                if done.wait(self._poll_interval):
                    return
        finally:
            with self._lock:
                self._streams.discard(done)
