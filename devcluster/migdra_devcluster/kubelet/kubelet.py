"""The kubelet of one simulated node: its Node object, its DRA plugins, and the pods bound to it.

No containers run anywhere; everything else a DRA driver sees of kubelet is real.  The node plugin is
reached only through its unix sockets and gRPC (:mod:`.pluginwatcher`), and the claims of a pod are
prepared and unprepared as kubelet's DRA manager does it (``pkg/kubelet/cm/dra``):

- a pod bound to this node starts once each of its claims exists, is allocated and is reserved for
  the pod; the claims are grouped by the drivers of their allocation results and each driver's plugin
  gets one NodePrepareResources call.  A claim already prepared on this node (a claim shared by two
  pods) is not prepared again: kubelet's claim info cache, kept here by claim UID with the pods using
  it.  Failures are retried with capped exponential backoff per pod and reported as Warning Events
  ``FailedPrepareDynamicResources`` (kubelet's reason).  On success the pod gets the CDI device IDs in
  the annotation :data:`CDI_ANNOTATION` (what a container runtime would have been handed) and a
  Running status;
- a pod being deleted (``deletionTimestamp``), gone, or finished (phase Succeeded/Failed) has its
  containers "stopped", then each claim no other pod of this node still uses is unprepared -- for
  every driver of the allocation, also one whose prepare never answered (it may have created the
  instance before a timeout); once everything is unprepared a pod being deleted is deleted with
  ``gracePeriodSeconds=0`` and a UID precondition, which is what finishes a graceful deletion;
- at start-up every ResourceSlice of the node is deleted (kubelet wipes them so a restarted node does
  not advertise devices of plugins that are gone); a driver whose plugins all stay away for
  ``wipe_delay`` seconds has its slices deleted too.

Why one sync loop, level-triggered: after any change (a pod, a claim, a plugin registering) the loop
looks at every pod of the node and does what is missing, so a missed or coalesced watch event cannot
lose work, and a restart of the loop's inputs (a relist) needs no special case.  The loop waits on the
shared :class:`~dra_driver.kube.informer.Changes` signal with a bounded timeout, never on
a fixed sleep.  It handles one pod at a time: a plugin call that hangs delays the node's other pods
(for at most the 45 s call timeout), which is acceptable for a simulated node and keeps the claim
cache free of races.

The node stays alive to the controllers as a real one does: its Lease in ``kube-node-lease`` is renewed
every 10 s and its status posted every 5 minutes (:mod:`.heartbeat`), from the same loop.

Not simulated: container images, probes, restarts, kubelet's own
checkpoint of the claim cache (a restarted Kubelet prepares the claims of running pods again; plugins
answer that idempotently), the health stream, and ``skipNodeOperations``.
"""

from __future__ import annotations

import json
import logging
import threading
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dra_driver.kube.client import CLAIMS, NODES, PODS, SLICES, Client, status_code
from dra_driver.kube.events import NORMAL, WARNING, EventRecorder
from dra_driver.kube.failures import BackoffPolicy, describe_failure
from dra_driver.kube.informer import Changes, Informer
from dra_driver.kubelet.calls import ClaimRef, PreparedDevice
from dra_driver.resourceclaim import ResourceClaimView, describe_validation_error
from migdra_devcluster.kubelet.heartbeat import NodeHeartbeat
from migdra_devcluster.kubelet.node import kubelet_version, node_labels, node_status
from migdra_devcluster.kubelet.pluginclient import CALL_TIMEOUT_SECONDS
from migdra_devcluster.kubelet.pluginwatcher import DEFAULT_WIPE_DELAY_SECONDS, PluginWatcher
from migdra_devcluster.kubelet.podstatus import creating_status, running_status
from migdra_devcluster.kubelet.retries import RetryTracker

log = logging.getLogger(__name__)

COMPONENT = "kubelet"
CDI_ANNOTATION = "sim.migdra.io/cdi-devices"
"""Pod annotation: JSON object ``{"<claim name>/<request name>": [CDI device IDs]}``."""
FAILED_PREPARE = "FailedPrepareDynamicResources"
"""kubelet's Event reason when NodePrepareResources (or waiting for a plugin) fails."""
FAILED_UNPREPARE = "FailedUnprepareDynamicResources"
"""This kubelet's Event reason when NodeUnprepareResources fails for a pod being deleted."""
DEFAULT_CAPACITY: Mapping[str, str] = {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"}
DEFAULT_BACKOFF = BackoffPolicy(initial=0.5, maximum=30.0)
SYNC_PERIOD_SECONDS = 1.0
"""The longest the loop waits without a change: a bound, not a poll anything relies on."""
START_TIMEOUT_SECONDS = 30.0
_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass
class PreparedClaim:
    """kubelet's claim info cache entry: what each driver prepared, and which pods of the node use it."""

    ref: ClaimRef
    requests: tuple[str, ...]
    devices: dict[str, tuple[PreparedDevice, ...]] = field(default_factory=dict)  # by driver
    users: set[str] = field(default_factory=set)  # pod UIDs
    drivers: set[str] = field(default_factory=set)
    """Every driver of the allocation, prepared or not: each gets NodeUnprepareResources in the end,
    since a prepare that timed out may still have created the instance (kubelet's DriverState)."""


@dataclass
class _PodRecord:
    """A pod this kubelet has done something for: the claims it holds a reference to."""

    namespace: str
    name: str
    uid: str
    containers: tuple[str, ...]
    claims: set[str] = field(default_factory=set)  # claim UIDs
    running: bool = False
    stopped: bool = False


class Kubelet:
    """The kubelet of node ``node_name``; :meth:`start` it, :meth:`stop` it (both bounded).

    ``client`` reaches the API server (shared; not closed here).  ``registry_dir`` is the node's plugin
    registration directory (the plugin's ``--registry-dir``).  ``labels`` are added to the Node's
    (``kubernetes.io/hostname`` and ``kubernetes.io/os=linux`` are always set); ``capacity`` is the
    Node's capacity and allocatable.  ``wipe_delay``: seconds without a connected plugin before a
    driver's slices of this node are deleted (kubelet's 30 s; tests use about 1 s).  ``backoff``: the
    retry policy for a pod whose prepare, unprepare or status write failed.  ``call_timeout``: per
    DRAPlugin call (kubelet's 45 s).
    """

    def __init__(
        self,
        client: Client,
        node_name: str,
        registry_dir: Path,
        *,
        labels: Mapping[str, str] | None = None,
        capacity: Mapping[str, str] = DEFAULT_CAPACITY,
        wipe_delay: float = DEFAULT_WIPE_DELAY_SECONDS,
        backoff: BackoffPolicy = DEFAULT_BACKOFF,
        call_timeout: float = CALL_TIMEOUT_SECONDS,
    ) -> None:
        self.client = client
        self.node_name = node_name
        self.registry_dir = registry_dir
        self.labels = dict(labels or {})
        self.capacity = dict(capacity)
        self.changes = Changes()
        self.events = EventRecorder(client, COMPONENT, node_name)
        self.heartbeat = NodeHeartbeat(client, node_name)
        self.plugins = PluginWatcher(
            registry_dir,
            wipe_delay=wipe_delay,
            on_wipe=self._wipe_driver_slices,
            changes=self.changes,
            call_timeout=call_timeout,
        )
        self._pods = Informer(client, PODS, self.changes, field_selector=f"spec.nodeName={node_name}")
        self._claims = Informer(client, CLAIMS, self.changes)
        self._retries = RetryTracker(backoff)
        self._prepared: dict[str, PreparedClaim] = {}  # by claim UID
        self._records: dict[str, _PodRecord] = {}  # by pod UID
        self._awaited_drivers: dict[str, frozenset[str]] = {}  # pod UID -> drivers it waits to register
        self._finished: set[str] = set()  # pod UIDs deleted by us, until the cache forgets them too
        self._pod_ips: dict[str, str] = {}
        self._lock = threading.Lock()  # guards _prepared and _records for readers outside the loop
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"kubelet-{node_name}", daemon=True)
        subnet = zlib.crc32(node_name.encode()) % 250 + 1
        self.host_ip = f"172.30.{subnet}.1"
        self._pod_subnet = f"10.244.{subnet}"
        self._next_pod_host = 2

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Register the Node, wipe the node's slices, start the caches, the plugin watcher and the loop.

        Raises the client's error when the API server refuses or cannot be reached for the Node or the
        wipe, and ``TimeoutError`` when the caches do not fill within 30 s.
        """
        self._register_node()
        wiped = self._delete_slices(f"spec.nodeName={self.node_name}")
        log.info("node %s registered; %d ResourceSlice(s) of it wiped at start-up", self.node_name, wiped)
        self._pods.start()
        self._claims.start()
        for informer in (self._pods, self._claims):
            if not informer.wait_synced(START_TIMEOUT_SECONDS):
                self.stop()
                raise TimeoutError(f"kubelet {self.node_name}: no list of {informer.kind.plural} within 30 s")
        self.plugins.start()
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop, the plugin watcher (closing its channels) and the caches.  Pods are left as
        they are, as a stopped kubelet leaves its containers running."""
        self._stopping.set()
        self.changes.bump()
        if self._thread.is_alive():
            self._thread.join(timeout=CALL_TIMEOUT_SECONDS + 15)
        self.plugins.stop()
        self._pods.stop()
        self._claims.stop()

    def __enter__(self) -> Kubelet:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- reading (tests, diagnostics) ------------------------------------------------------------

    def prepared_claims(self) -> dict[str, PreparedClaim]:
        """The claim info cache by claim UID (a copy)."""
        with self._lock:
            return {
                uid: PreparedClaim(c.ref, c.requests, dict(c.devices), set(c.users), set(c.drivers))
                for uid, c in self._prepared.items()
            }

    # -- node ----------------------------------------------------------------------------------

    def _register_node(self) -> None:
        """Create the Node, or (someone created it first: a test, a previous run) update it to ours."""
        labels = node_labels(self.node_name, self.labels)
        version = kubelet_version(self.client.server_version())
        status = node_status(self.node_name, self.capacity, self.host_ip, version)
        if self.client.get(NODES, None, self.node_name) is None:
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": self.node_name, "labels": labels},
                "spec": {"podCIDR": f"{self._pod_subnet}.0/24", "podCIDRs": [f"{self._pod_subnet}.0/24"]},
                "status": status,
            }
            try:
                self.client.create(NODES, body)
            except Exception as exc:
                if status_code(exc) != 409:
                    raise
        else:
            self.client.merge_patch(NODES, None, self.node_name, {"metadata": {"labels": labels}})
        # Always through the status subresource too: the server may keep only what it owns on create.
        self.client.merge_patch(NODES, None, self.node_name, {"status": status}, "status")

    def _delete_slices(self, field_selector: str) -> int:
        slices, _ = self.client.list(SLICES, field_selector=field_selector)
        deleted = 0
        for item in slices:
            deleted += self.client.delete(SLICES, None, item["metadata"]["name"], uid=item["metadata"].get("uid"))
        return deleted

    def _wipe_driver_slices(self, driver: str) -> None:
        deleted = self._delete_slices(f"spec.nodeName={self.node_name},spec.driver={driver}")
        log.info(
            "node %s: no plugin of %s connected for a while: %d ResourceSlice(s) wiped", self.node_name, driver, deleted
        )

    # -- the loop ------------------------------------------------------------------------------

    def _run(self) -> None:
        seen = self.changes.count
        while not self._stopping.is_set():
            self.heartbeat.beat()
            try:
                wake = self._sync()
            except Exception:  # a bug or an unforeseen answer: log it, look again soon
                log.exception("kubelet %s: sync failed", self.node_name)
                wake = SYNC_PERIOD_SECONDS
            timeout = SYNC_PERIOD_SECONDS if wake is None else min(max(wake, 0.01), SYNC_PERIOD_SECONDS)
            seen = self.changes.wait_past(seen, timeout)

    def _sync(self) -> float | None:
        """Look at every pod of the node once; returns seconds until the next retry is due (or None)."""
        pods = {
            pod["metadata"]["uid"]: pod
            for pod in self._pods.items()
            if (pod.get("spec") or {}).get("nodeName") == self.node_name
        }
        self._finished.intersection_update(pods)
        for uid in list(self._records):
            if self._stopping.is_set():
                return None
            pod = pods.get(uid)
            if pod is None or _deleting(pod) or _terminal(pod):
                self._tear_down(uid, pod)
        for uid, pod in pods.items():
            if self._stopping.is_set():
                return None
            if uid in self._finished or (uid in self._records and (self._records[uid].running or _deleting(pod))):
                continue
            if _deleting(pod):
                self._delete_pod(uid, pod)
            elif (pod.get("status") or {}).get("phase") not in _TERMINAL_PHASES:
                self._start(uid, pod)
        live = pods.keys() | self._records.keys()
        self._retries.forget(lambda key: isinstance(key, tuple) and key[1] in live)
        for uid in [u for u in self._awaited_drivers if u not in live]:
            del self._awaited_drivers[uid]
        return self._retries.next_due()

    # -- starting a pod ------------------------------------------------------------------------

    def _claims_of(self, pod: dict[str, Any]) -> tuple[list[ResourceClaimView], str | None]:
        """The pod's claims from the cache, or why the pod cannot start yet (a later change wakes us)."""
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        generated = {s.get("name"): s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []}
        names: list[str] = []
        for entry in spec.get("resourceClaims") or []:
            if entry.get("resourceClaimName"):
                names.append(entry["resourceClaimName"])
            elif entry.get("resourceClaimTemplateName"):
                if entry.get("name") not in generated:
                    return [], f"the claim of {entry.get('name')!r} has not been created from its template yet"
                if generated[entry.get("name")]:  # no name: the template's claim is not needed
                    names.append(generated[entry["name"]])
        extended = (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
        if extended:
            names.append(extended)
        claims: list[ResourceClaimView] = []
        for name in dict.fromkeys(names):
            obj = self._claims.get(meta["namespace"], name)
            if obj is None:
                return [], f"resourceclaim {meta['namespace']}/{name} does not exist"
            try:
                claim = ResourceClaimView.model_validate(obj)
            except ValidationError as e:  # kube-apiserver validated it: only a server that does not conform
                return [], f"resourceclaim {meta['namespace']}/{name} cannot be read: {describe_validation_error(e)}"
            if not claim.allocated:
                return [], f"resourceclaim {meta['namespace']}/{name} is not allocated"
            if not claim.reserved_for(meta["uid"]):
                return [], f"resourceclaim {meta['namespace']}/{name} is not reserved for the pod"
            claims.append(claim)
        return claims, None

    def _start(self, uid: str, pod: dict[str, Any]) -> None:
        key = ("prepare", uid)
        awaited = self._awaited_drivers.get(uid, frozenset())
        if not self._retries.due(key) and not awaited & self.plugins.drivers():
            return
        claims, waiting = self._claims_of(pod)
        if waiting is not None:
            log.debug("pod %s/%s waits: %s", pod["metadata"]["namespace"], pod["metadata"]["name"], waiting)
            return
        meta = pod["metadata"]
        with self._lock:
            record = self._records.setdefault(
                uid,
                _PodRecord(
                    meta["namespace"],
                    meta["name"],
                    uid,
                    tuple(c["name"] for c in (pod.get("spec") or {}).get("containers") or []),
                ),
            )
        if not (pod.get("status") or {}).get("containerStatuses"):
            self._write_creating(pod)
        errors, missing = self._prepare(record, claims)
        if errors:
            self._awaited_drivers[uid] = frozenset(missing)
            delay = self._retries.failed(key)
            message = "; ".join(errors)
            log.warning("pod %s/%s: %s; trying again in %.1f s", record.namespace, record.name, message, delay)
            self.events.event(PODS, pod, WARNING, FAILED_PREPARE, message)
            return
        self._awaited_drivers.pop(uid, None)
        try:
            self._write_running(pod, claims)
        except Exception as exc:
            delay = self._retries.failed(key, exc)
            log.warning(
                "pod %s/%s: status not written: %s; trying again in %.1f s",
                record.namespace,
                record.name,
                describe_failure(exc),
                delay,
            )
            return
        self._retries.succeeded(key)
        record.running = True
        log.info("pod %s/%s is running on %s", record.namespace, record.name, self.node_name)

    def _prepare(self, record: _PodRecord, claims: list[ResourceClaimView]) -> tuple[list[str], list[str]]:
        """NodePrepareResources for the claims not prepared yet, one call per driver; (errors, drivers
        that have no registered plugin)."""
        by_driver: dict[str, list[ClaimRef]] = {}
        for claim in claims:
            meta = claim.metadata
            ref = ClaimRef(meta.namespace, meta.name, meta.uid)
            results = claim.results
            requests = tuple(r.name for r in claim.spec.devices.requests)
            with self._lock:
                entry = self._prepared.setdefault(ref.uid, PreparedClaim(ref, requests))
                entry.users.add(record.uid)
                record.claims.add(ref.uid)
            drivers = {r.driver for r in results}
            with self._lock:
                entry.drivers.update(drivers)
            for driver in sorted(drivers):
                if driver not in entry.devices:
                    by_driver.setdefault(driver, []).append(ref)
        errors: list[str] = []
        missing: list[str] = []
        for driver, refs in sorted(by_driver.items()):
            plugin = self.plugins.client(driver)
            if plugin is None:
                errors.append(f"DRA driver {driver} is not registered")
                missing.append(driver)
                continue
            try:
                answers = plugin.prepare(refs)
            except Exception as exc:  # grpc.RpcError, or a channel the watcher closed meanwhile
                errors.append(f"NodePrepareResources of {driver} failed: {_describe_call_failure(exc)}")
                continue
            for ref in refs:
                answer = answers[ref.uid]
                if answer.error:
                    errors.append(f"prepare of claim {ref.namespace}/{ref.name} by {driver} failed: {answer.error}")
                    continue
                with self._lock:
                    self._prepared[ref.uid].devices[driver] = answer.devices
        return errors, missing

    def _cdi_devices(self, claims: list[ResourceClaimView]) -> dict[str, list[str]]:
        mapping: dict[str, list[str]] = {}
        for claim in claims:
            entry = self._prepared[claim.metadata.uid]
            for devices in entry.devices.values():
                for device in devices:
                    for request in device.request_names or entry.requests:
                        ids = mapping.setdefault(f"{entry.ref.name}/{request}", [])
                        ids.extend(i for i in device.cdi_device_ids if i not in ids)
        return mapping

    def _pod_ip(self, uid: str, pod: dict[str, Any]) -> str:
        existing = (pod.get("status") or {}).get("podIP")
        if existing:
            return str(existing)
        if uid not in self._pod_ips:
            self._pod_ips[uid] = f"{self._pod_subnet}.{self._next_pod_host}"
            self._next_pod_host = self._next_pod_host % 253 + 2
        return self._pod_ips[uid]

    def _write_creating(self, pod: dict[str, Any]) -> None:
        """``ContainerCreating`` while the claims are prepared (best effort: Running replaces it)."""
        meta = pod["metadata"]
        try:
            written = self.client.merge_patch(
                PODS, meta["namespace"], meta["name"], {"status": creating_status(pod, self.host_ip)}, "status"
            )
        except Exception as exc:
            log.debug(
                "pod %s/%s: ContainerCreating not written: %s", meta["namespace"], meta["name"], describe_failure(exc)
            )
            return
        self._pods.assume(written)

    def _write_running(self, pod: dict[str, Any], claims: list[ResourceClaimView]) -> None:
        """The CDI annotation (merge patch on the pod), then the Running status (status subresource)."""
        meta, spec, old = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        annotation = json.dumps(self._cdi_devices(claims), sort_keys=True)
        if (meta.get("annotations") or {}).get(CDI_ANNOTATION) != annotation:
            patched = self.client.merge_patch(
                PODS, meta["namespace"], meta["name"], {"metadata": {"annotations": {CDI_ANNOTATION: annotation}}}
            )
            self._pods.assume(patched)
        if old.get("phase") == "Running":
            return  # a restarted kubelet: the status is ours already
        status = running_status(pod, self.host_ip, self._pod_ip(meta["uid"], pod))
        # The containers "start" (their Events come first, as in kubelet), then the status says so.
        for container in spec.get("containers") or []:
            name, image = container.get("name"), container.get("image", "")
            self.events.event(PODS, pod, NORMAL, "Pulled", f'Container image "{image}" already present on machine')
            self.events.event(PODS, pod, NORMAL, "Created", f"Created container: {name}")
            self.events.event(PODS, pod, NORMAL, "Started", f"Started container {name}")
        # The pod may have changed since the cache saw it: the status write carries no resourceVersion.
        written = self.client.merge_patch(PODS, meta["namespace"], meta["name"], {"status": status}, "status")
        self._pods.assume(written)

    # -- stopping a pod ------------------------------------------------------------------------

    def _tear_down(self, uid: str, pod: dict[str, Any] | None) -> None:
        """Stop the pod's containers, release its claims (unpreparing unused ones), and, when it is being
        deleted, delete it for good (a pod that finished stays, as in Kubernetes)."""
        record = self._records[uid]
        if pod is not None and not record.stopped and record.running and not _terminal(pod):
            for container in record.containers:
                self.events.event(PODS, pod, NORMAL, "Killing", f"Stopping container {container}")
        record.stopped = True
        key = ("unprepare", uid)
        if not self._retries.due(key):
            return
        errors = self._release_claims(record)
        if errors:
            delay = self._retries.failed(key)
            message = "; ".join(errors)
            log.warning("pod %s/%s: %s; trying again in %.1f s", record.namespace, record.name, message, delay)
            if pod is not None:
                self.events.event(PODS, pod, WARNING, FAILED_UNPREPARE, message)
            return
        self._retries.succeeded(key)
        if pod is not None and _deleting(pod) and not self._delete_pod(uid, pod):
            return
        with self._lock:
            del self._records[uid]
        self._pod_ips.pop(uid, None)
        log.info("pod %s/%s stopped and its claims released", record.namespace, record.name)

    def _release_claims(self, record: _PodRecord) -> list[str]:
        """Drop the pod's claim references; NodeUnprepareResources for claims nobody uses any more."""
        unused: list[PreparedClaim] = []
        with self._lock:
            for claim_uid in sorted(record.claims):
                entry = self._prepared.get(claim_uid)
                if entry is None:
                    record.claims.discard(claim_uid)
                    continue
                entry.users.discard(record.uid)
                if entry.users:  # a shared claim another pod of the node still uses
                    record.claims.discard(claim_uid)
                else:
                    unused.append(entry)
        by_driver: dict[str, list[ClaimRef]] = {}
        for entry in unused:
            for driver in entry.drivers | entry.devices.keys():
                by_driver.setdefault(driver, []).append(entry.ref)
        errors: list[str] = []
        for driver, refs in sorted(by_driver.items()):
            plugin = self.plugins.client(driver)
            if plugin is None:
                errors.append(f"DRA driver {driver} is not registered")
                continue
            try:
                answers = plugin.unprepare(refs)
            except Exception as exc:
                errors.append(f"NodeUnprepareResources of {driver} failed: {_describe_call_failure(exc)}")
                continue
            for ref in refs:
                if answers[ref.uid].error:
                    errors.append(
                        f"unprepare of claim {ref.namespace}/{ref.name} by {driver} failed: {answers[ref.uid].error}"
                    )
                    continue
                with self._lock:
                    self._prepared[ref.uid].devices.pop(driver, None)
                    self._prepared[ref.uid].drivers.discard(driver)
        with self._lock:
            for entry in unused:
                if not entry.devices and not entry.drivers:
                    self._prepared.pop(entry.ref.uid, None)
                    record.claims.discard(entry.ref.uid)
        return errors

    def _delete_pod(self, uid: str, pod: dict[str, Any]) -> bool:
        """The final delete (grace 0, only this UID); whether the pod is gone now."""
        key = ("delete", uid)
        if not self._retries.due(key):
            return False
        meta = pod["metadata"]
        try:
            self.client.delete(PODS, meta["namespace"], meta["name"], grace_period_seconds=0, uid=uid)
        except Exception as exc:
            if status_code(exc) != 409:  # 409: the UID precondition failed, so our pod is gone already
                delay = self._retries.failed(key, exc)
                log.warning(
                    "pod %s/%s not deleted: %s; trying again in %.1f s",
                    meta["namespace"],
                    meta["name"],
                    describe_failure(exc),
                    delay,
                )
                return False
        self._retries.succeeded(key)
        self._finished.add(uid)
        return True


def _deleting(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def _terminal(pod: dict[str, Any]) -> bool:
    """Succeeded or Failed: its containers have ended, so its claims are released (not the pod)."""
    return (pod.get("status") or {}).get("phase") in _TERMINAL_PHASES


def _describe_call_failure(exc: BaseException) -> str:
    """A gRPC failure in one line (``UNAVAILABLE: ...``); anything else by its message."""
    code, details = getattr(exc, "code", None), getattr(exc, "details", None)
    if callable(code) and callable(details):
        return f"{code().name}: {details()}"
    return f"{type(exc).__name__}: {exc}"
