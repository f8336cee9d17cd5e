"""Identity on the claim: ``status.devices[]`` entries and Events, written in the background.

After prepare migdra records on the ResourceClaim what each device *is* (NVIDIA #1456): for every
device an entry ``{driver, pool, device, conditions: [Ready=True], data: {gpuUUID, profile,
placement: {start, size}, migUUID, gpuInstanceID, computeInstanceID, node}}``, and a core/v1 Event
(``involvedObject`` = the claim, so ``kubectl describe resourceclaim`` shows it) for prepare success,
prepare failure and unprepare.  On unprepare our data keys and our ``Ready`` condition are removed
again (an entry with nothing left goes).

Writes are read-modify-write through the ``status`` subresource with the ``resourceVersion`` read
(409 → read again), and merge: other drivers' entries, other writers' conditions and data keys are
kept.  They run on one background thread in order; a failure is logged and retried with capped
backoff and **never** fails prepare.  A claim that is gone (404) or was re-created (other UID) is
left alone.

``build_``/``compute_`` functions are pure; :class:`ClaimReporter` does the I/O.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubeletplugin.prepare.checkpoint import ClaimRecord, DeviceRecord
from kubeletplugin.prepare.claims import ClaimApi
from kubeletplugin.service import ClaimRef

log = logging.getLogger(__name__)

READY = "Ready"
EVENT_PREPARED = "MigDevicesPrepared"
EVENT_PREPARE_FAILED = "MigDevicesPrepareFailed"
EVENT_UNPREPARED = "MigDevicesUnprepared"
EVENT_UNPREPARE_FAILED = "MigDevicesUnprepareFailed"
# The data keys migdra owns in a device status entry: cleared on unprepare, others kept.
DATA_KEYS = ("gpuUUID", "profile", "placement", "migUUID", "gpuInstanceID", "computeInstanceID", "node", "adminAccess")
_MAX_EVENT_MESSAGE = 1024


def rfc3339(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_device_data(device: DeviceRecord, node_name: str) -> dict[str, Any]:
    """The ``data`` object of one prepared device; pure."""
    intent = device.intent
    data: dict[str, Any] = {"gpuUUID": intent.gpu_uuid, "node": node_name}
    if intent.is_mig:
        assert intent.placement is not None
        data["profile"] = intent.profile_name
        data["placement"] = {"start": intent.placement.start, "size": intent.placement.size}
    if device.mig_uuid is not None:
        data["migUUID"] = device.mig_uuid
        data["gpuInstanceID"] = device.gpu_instance_id
        data["computeInstanceID"] = device.compute_instance_id
    if intent.admin_access:
        data["adminAccess"] = True
    return data


def build_ready_condition(device: DeviceRecord, generation: int | None, now: str) -> dict[str, Any]:
    intent = device.intent
    if intent.admin_access:
        reason, message = "AdminAccessReady", "admin access to what exists; migdra created nothing for this claim"
    elif intent.is_mig:
        reason = "MigInstanceReady"
        message = (
            f"{intent.profile_name} at placement {intent.placement}: GI {device.gpu_instance_id}, "
            f"CI {device.compute_instance_id}, {device.mig_uuid}"
        )
    else:
        reason, message = "GpuReady", f"whole GPU {intent.gpu_uuid}"
    condition: dict[str, Any] = {
        "type": READY,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return condition


@dataclass(frozen=True, slots=True)
class DeviceStatusUpdate:
    """What migdra wants one device entry to say."""

    device_name: str
    data: Mapping[str, Any]
    condition: Mapping[str, Any]


def build_status_updates(
    record: ClaimRecord, node_name: str, generation: int | None, now: str
) -> list[DeviceStatusUpdate]:
    return [
        DeviceStatusUpdate(
            device.intent.device_name,
            build_device_data(device, node_name),
            build_ready_condition(device, generation, now),
        )
        for device in record.devices
    ]


def compute_merged_devices(
    existing: Sequence[Mapping[str, Any]], driver_name: str, pool_name: str, updates: Sequence[DeviceStatusUpdate]
) -> list[dict[str, Any]]:
    """``status.devices`` with ``updates`` merged in; pure.

    Entries of other drivers / pools / devices are kept as they are.  In ours, data keys are
    merged (ours overwrite), other condition types are kept, and ``Ready`` keeps its
    ``lastTransitionTime`` when its status does not change.
    """
    result = [dict(entry) for entry in existing]
    for update in updates:
        index = _find_entry(result, driver_name, pool_name, update.device_name)
        if index is None:
            result.append(
                {
                    "driver": driver_name,
                    "pool": pool_name,
                    "device": update.device_name,
                    "conditions": [dict(update.condition)],
                    "data": dict(update.data),
                }
            )
            continue
        entry = result[index]
        old_data = entry.get("data")
        entry["data"] = {**(old_data if isinstance(old_data, Mapping) else {}), **update.data}
        conditions = [dict(c) for c in entry.get("conditions") or [] if isinstance(c, Mapping)]
        condition = dict(update.condition)
        old_ready = next((c for c in conditions if c.get("type") == condition["type"]), None)
        if old_ready is not None and old_ready.get("status") == condition["status"]:
            condition["lastTransitionTime"] = old_ready.get("lastTransitionTime", condition["lastTransitionTime"])
        entry["conditions"] = [c for c in conditions if c.get("type") != condition["type"]] + [condition]
    return result


def compute_cleared_devices(
    existing: Sequence[Mapping[str, Any]], driver_name: str, pool_name: str, device_names: Sequence[str]
) -> list[dict[str, Any]]:
    """``status.devices`` without migdra's data keys and ``Ready`` in these devices' entries; pure."""
    result: list[dict[str, Any]] = []
    wanted = set(device_names)
    for entry in existing:
        if entry.get("driver") != driver_name or entry.get("pool") != pool_name or entry.get("device") not in wanted:
            result.append(dict(entry))
            continue
        data = entry.get("data")
        kept_data = {k: v for k, v in data.items() if k not in DATA_KEYS} if isinstance(data, Mapping) else {}
        kept_conditions = [
            c for c in entry.get("conditions") or [] if isinstance(c, Mapping) and c.get("type") != READY
        ]
        others = {k: v for k, v in entry.items() if k not in {"driver", "pool", "device", "data", "conditions"}}
        if not kept_data and not kept_conditions and not others:
            continue
        cleared = {k: v for k, v in entry.items() if k not in {"data", "conditions"}}
        if kept_data:
            cleared["data"] = kept_data
        if kept_conditions:
            cleared["conditions"] = kept_conditions
        result.append(cleared)
    return result


def _find_entry(entries: Sequence[Mapping[str, Any]], driver: str, pool: str, device: str) -> int | None:
    for index, entry in enumerate(entries):
        if (
            entry.get("driver") == driver
            and entry.get("pool") == pool
            and entry.get("device") == device
            and entry.get("shareID") is None
        ):
            return index
    return None


def build_event(
    ref: ClaimRef, reason: str, message: str, event_type: str, driver_name: str, node_name: str, now: dt.datetime
) -> dict[str, Any]:
    """A core/v1 Event about the claim, named the way client-go's recorder names them."""
    stamp = rfc3339(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{ref.name}.{time.time_ns():x}", "namespace": ref.namespace},
        "involvedObject": {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "name": ref.name,
            "namespace": ref.namespace,
            "uid": ref.uid,
        },
        "reason": reason,
        "message": message[:_MAX_EVENT_MESSAGE],
        "type": event_type,
        "source": {"component": f"{driver_name}-kubeletplugin", "host": node_name},
        "reportingComponent": f"{driver_name}/kubeletplugin",
        "reportingInstance": node_name,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


@dataclass
class _Job:
    key: tuple[str, ...]
    describe: str
    run: Callable[[], None]
    attempts: int = 0
    not_before: float = 0.0
    sequence: int = field(default=0)


class _Gone(Exception):
    """The claim is gone or was re-created: nothing to write."""


class ClaimReporter:
    """Writes claim status and Events on one background thread, in order, with retries.

    ``flush()`` waits for the queue to drain (tests, shutdown); ``close()`` stops the thread, logging
    what was still pending.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        driver_name: str,
        node_name: str,
        *,
        max_attempts: int = 8,
        backoff_seconds: float = 0.2,
        max_backoff_seconds: float = 10.0,
        request_timeout: float = 10.0,
    ) -> None:
        self._claims = ClaimApi(api_client, request_timeout)
        self._core = client.CoreV1Api(api_client)
        self.driver_name = driver_name
        self.node_name = node_name
        self._max_attempts = max_attempts
        self._backoff = backoff_seconds
        self._max_backoff = max_backoff_seconds
        self._timeout = request_timeout
        self._jobs: list[_Job] = []
        self._running = 0
        self._sequence = 0
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    # -- public --------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="migdra-claim-reporter", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stopping = True
            pending = [job.describe for job in self._jobs]
            self._jobs.clear()
            self._cond.notify_all()
        if pending:
            log.warning("dropping %d unwritten claim report(s) at shutdown: %s", len(pending), "; ".join(pending))
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued report was written (or given up); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._jobs or self._running:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def report_prepared(self, ref: ClaimRef, record: ClaimRecord, generation: int | None) -> None:
        now = dt.datetime.now(dt.UTC)
        updates = build_status_updates(record, self.node_name, generation, rfc3339(now))
        if updates:
            self._enqueue_status(
                ref,
                f"status of {ref.namespace}/{ref.name}: {len(updates)} device(s) ready",
                lambda existing: compute_merged_devices(existing, self.driver_name, self.node_name, updates),
            )
        names = ", ".join(device.intent.device_name for device in record.devices) or "no devices of this driver"
        self._enqueue_event(ref, EVENT_PREPARED, f"prepared on node {self.node_name}: {names}", "Normal", now)

    def report_failure(self, ref: ClaimRef, reason: str, message: str) -> None:
        """A Warning Event (``EVENT_PREPARE_FAILED`` / ``EVENT_UNPREPARE_FAILED``) with the per-claim error."""
        self._enqueue_event(ref, reason, message, "Warning", dt.datetime.now(dt.UTC))

    def report_unprepared(self, ref: ClaimRef, record: ClaimRecord) -> None:
        names = [device.intent.device_name for device in record.devices]
        if names:
            self._enqueue_status(
                ref,
                f"status of {ref.namespace}/{ref.name}: clear {len(names)} device(s)",
                lambda existing: compute_cleared_devices(existing, self.driver_name, self.node_name, names),
            )
        self._enqueue_event(
            ref,
            EVENT_UNPREPARED,
            f"unprepared on node {self.node_name}: {', '.join(names) or 'no devices'}",
            "Normal",
            dt.datetime.now(dt.UTC),
        )

    def report_cleared(self, ref: ClaimRef, record: ClaimRecord) -> None:
        """Clear the status of a claim whose instances recovery rolled back (no Event: it was logged)."""
        names = [device.intent.device_name for device in record.devices]
        if names:
            self._enqueue_status(
                ref,
                f"status of {ref.namespace}/{ref.name}: clear {len(names)} device(s) after recovery",
                lambda existing: compute_cleared_devices(existing, self.driver_name, self.node_name, names),
            )

    # -- writing -------------------------------------------------------------------------------

    def _enqueue_status(
        self, ref: ClaimRef, describe: str, change: Callable[[list[Mapping[str, Any]]], list[dict[str, Any]]]
    ) -> None:
        # A newer status write for the claim supersedes a pending one: it is computed from a fresh read.
        self._enqueue(_Job(("status", ref.uid), describe, lambda: self._write_status(ref, change)), replace=True)

    def _enqueue_event(self, ref: ClaimRef, reason: str, message: str, event_type: str, now: dt.datetime) -> None:
        body = build_event(ref, reason, message, event_type, self.driver_name, self.node_name, now)
        describe = f"event {reason} on {ref.namespace}/{ref.name}"
        event = client.CoreV1Event.from_dict(body)
        assert event is not None  # from_dict returns None only for None

        def create() -> None:
            self._core.create_namespaced_event(ref.namespace, event, _request_timeout=self._timeout)

        self._enqueue(_Job(("event", ref.uid, body["metadata"]["name"]), describe, create), replace=False)

    def _enqueue(self, job: _Job, replace: bool) -> None:
        with self._cond:
            if self._stopping:
                log.warning("not writing %s: shutting down", job.describe)
                return
            self._sequence += 1
            job.sequence = self._sequence
            if replace:
                self._jobs = [j for j in self._jobs if j.key != job.key]
            self._jobs.append(job)
            self._cond.notify_all()

    def _write_status(self, ref: ClaimRef, change: Callable[[list[Mapping[str, Any]]], list[dict[str, Any]]]) -> None:
        for _ in range(self._max_attempts):
            try:
                claim = self._claims.read(ref.namespace, ref.name)
            except ApiException as e:
                if e.status == 404:
                    raise _Gone(f"claim {ref.namespace}/{ref.name} no longer exists") from e
                raise
            metadata = claim.get("metadata") or {}
            if metadata.get("uid") != ref.uid:
                raise _Gone(f"claim {ref.namespace}/{ref.name} now has UID {metadata.get('uid')}, not {ref.uid}")
            status = claim.get("status") or {}
            claim["status"] = status
            existing = [d for d in status.get("devices") or [] if isinstance(d, Mapping)]
            devices = change(existing)
            if devices == existing:
                return
            if devices:
                status["devices"] = devices
            else:
                status.pop("devices", None)
            try:
                self._claims.replace_status(ref.namespace, ref.name, claim)
                return
            except ApiException as e:
                if e.status == 409:
                    continue  # someone wrote in between: read again and merge again
                if e.status == 404:
                    raise _Gone(f"claim {ref.namespace}/{ref.name} no longer exists") from e
                raise
        raise RuntimeError(f"status of {ref.namespace}/{ref.name}: still conflicting after {self._max_attempts} tries")

    def _loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopping:
                        return
                    now = time.monotonic()
                    ready = [j for j in self._jobs if j.not_before <= now]
                    if ready:
                        job = min(ready, key=lambda j: j.sequence)
                        self._jobs.remove(job)
                        self._running += 1
                        break
                    wait = min((j.not_before for j in self._jobs), default=now + 3600) - now
                    self._cond.wait(max(wait, 0.001))
            try:
                self._run(job)
            finally:
                with self._cond:
                    self._running -= 1
                    self._cond.notify_all()

    def _run(self, job: _Job) -> None:
        job.attempts += 1
        try:
            job.run()
        except _Gone as e:
            log.info("not writing %s: %s", job.describe, e)
            return
        except ApiException as e:
            if e.status is not None and 400 <= e.status < 500 and e.status not in (408, 429):
                log.error("writing %s was refused, not retrying: %s %s %s", job.describe, e.status, e.reason, e.body)
                return
            self._retry(job, f"{e.status} {e.reason}")
        except Exception as e:  # a reporter must never die: connection errors, timeouts, bugs alike
            self._retry(job, repr(e))
        else:
            log.debug("wrote %s", job.describe)

    def _retry(self, job: _Job, why: str) -> None:
        if job.attempts >= self._max_attempts:
            log.error("giving up writing %s after %d attempts: %s", job.describe, job.attempts, why)
            return
        delay = min(self._backoff * 2 ** (job.attempts - 1), self._max_backoff)
        log.warning("writing %s failed (%s); retrying in %.1f s", job.describe, why, delay)
        job.not_before = time.monotonic() + delay
        with self._cond:
            if self._stopping:
                return
            if any(j.key == job.key for j in self._jobs):
                return  # superseded by a newer write while this one ran
            self._jobs.append(job)
            self._cond.notify_all()
