"""The local cluster's scheduler: kube-scheduler's decisions for pods with ResourceClaims, in one loop.

For every pending pod, in arrival order: resolve its claims (PreFilter), then for each node in a
seeded random order (kube-scheduler's scoring is out of scope, and a fixed order would hide
placement bugs) check node selector, affinity, taints and unschedulable (Filter), and run kube's
structured allocator (:func:`dra_driver.allocation.allocate`) for the claims that are not allocated
yet, plus the special claim for extended resources backed by DRA; the first node where all of it
fits wins.  Then (Reserve/PreBind) the claims get the ``delete-protection`` finalizer, their
``status.allocation`` and the pod in ``status.reservedFor``; devices with binding conditions are
waited for without blocking other pods; finally the pod is bound.  A pod that fits nowhere stays
Pending: a ``PodScheduled=False`` condition and a Warning ``FailedScheduling`` Event saying per node
what could not be satisfied, from the allocator's explanation.

Why one thread and level-triggered: every decision reads the whole cached cluster, writes through
the API with resourceVersion checks (a stale cache ends in a 409, and the pod is tried again), and
takes its own writes into the cache at once (:meth:`Informer.assume`), so a device is never given
twice.  The loop looks again after any change, and at least every ``resync`` seconds.
"""

from __future__ import annotations

import copy
import logging
import random
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from dra_driver.allocation import DEFAULT_FEATURES, AllocationError, allocate
from dra_driver.allocation.explain import explain
from dra_driver.allocation.nodes import selector_matches
from dra_driver.kube.client import CLAIMS, DEVICE_CLASSES, NODES, PODS, SLICES, Client
from dra_driver.kube.events import NORMAL, WARNING, EventRecorder
from dra_driver.kube.failures import DEFAULT_CONFLICT_RETRIES, ApiFailure, classify_failure, describe_failure
from dra_driver.kube.informer import Changes, Informer
from dra_driver.kube.loop import ControlLoop
from migdra_devcluster.claimcontroller import DELETE_PROTECTION_FINALIZER
from migdra_devcluster.scheduler.binding import Binding, binding_state
from migdra_devcluster.scheduler.extended import (
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    device_class_mapping,
    extended_claim_requests,
    find_extended_claim,
    new_extended_claim,
    request_mappings,
    unmapped_extended_resources,
)
from migdra_devcluster.scheduler.messages import (
    CANNOT_ALLOCATE,
    explanation_clause,
    failed_scheduling_message,
)
from migdra_devcluster.scheduler.nodefit import node_fit_problem
from migdra_devcluster.scheduler.podclaims import pod_claims, pod_reference, reserved_for

log = logging.getLogger(__name__)

SCHEDULER_NAME = "default-scheduler"
BINDING_TIMEOUT_SECONDS = 600.0  # kube-scheduler's DynamicResources bindingTimeout default
RESYNC_SECONDS = 5.0
MAX_RESERVED_FOR = 256
AVOID_SECONDS = 60.0
"""How long a pod's next attempts avoid the devices whose binding conditions failed for it: long enough
to go elsewhere now, short enough that a device whose failure was passing is not lost to the pod."""
_IN_MEMORY_CLAIM = "<extended-resources>"


@dataclass
class _Placement:
    """One pod's chosen node and the claims allocated for it there (not yet written)."""

    node: str
    allocations: list[tuple[dict[str, Any], dict[str, Any]]]  # (claim, allocation result) to write
    reserve: list[dict[str, Any]]  # claims already allocated that only need the pod in reservedFor
    extended: dict[str, Any] | None = None  # the special claim to create, with its allocation


@dataclass
class _Binding:
    """A pod whose claims are written and which waits for binding conditions."""

    node: str
    claims: list[tuple[str, str]]  # (namespace, name) of every claim of the pod
    allocated: list[tuple[str, str]]  # the ones this attempt allocated (deallocated on failure)
    deadline: float


@dataclass
class _Attempt:
    """What an unschedulable pod was last tried against, so an unchanged cluster is not tried again."""

    fingerprint: tuple[Any, ...]
    message: str


@dataclass
class SchedulerStats:
    attempts: int = 0
    bound: int = 0
    unschedulable: int = 0
    binding_failures: int = 0
    last_node_order: list[str] = field(default_factory=list)


def _rv(obj: dict[str, Any]) -> int:
    return int(obj["metadata"].get("resourceVersion") or 0)


def _arrival(pod: dict[str, Any]) -> tuple[str, str, str]:
    meta = pod["metadata"]
    return meta.get("creationTimestamp", ""), meta.get("namespace", ""), meta["name"]


class Scheduler(ControlLoop):
    """Schedules pending pods onto nodes; :meth:`start` runs it, :meth:`stop` joins it."""

    def __init__(
        self,
        client: Client,
        *,
        seed: int = 0,
        features: Iterable[str] = DEFAULT_FEATURES,
        binding_timeout: float = BINDING_TIMEOUT_SECONDS,
        resync: float = RESYNC_SECONDS,
        changes: Changes | None = None,
    ) -> None:
        self.client = client
        self.features = frozenset(features)
        self.binding_timeout = binding_timeout
        changes = changes or Changes()
        self.rng = random.Random(seed)
        self.pods = Informer(client, PODS, changes)
        self.nodes = Informer(client, NODES, changes)
        self.claims = Informer(client, CLAIMS, changes)
        self.slices = Informer(client, SLICES, changes)
        self.classes = Informer(client, DEVICE_CLASSES, changes)
        self.recorder = EventRecorder(client, SCHEDULER_NAME)
        self.stats = SchedulerStats()
        self._binding: dict[str, _Binding] = {}  # pod UID -> waiting for binding conditions
        self._attempts: dict[str, _Attempt] = {}  # pod UID -> last unschedulable attempt
        self._avoid: dict[str, list[tuple[float, dict[str, Any]]]] = {}  # pod UID -> (until, allocation)
        informers = (self.pods, self.nodes, self.claims, self.slices, self.classes)
        super().__init__("scheduler", changes, informers, resync)

    def next_wake(self) -> float:
        """The resync period, or sooner when a pod's binding-condition deadline comes first."""
        if not self._binding:
            return self.resync
        return min(self.resync, min(b.deadline for b in self._binding.values()) - time.monotonic())

    def sync(self) -> None:
        self.schedule_pending()

    # -- one pass ------------------------------------------------------------------------------

    def schedule_pending(self) -> None:
        """Look at every pod once: finish bindings that may proceed, then try every pending pod."""
        pods = sorted(self.pods.items(), key=_arrival)
        live = {p["metadata"]["uid"] for p in pods}
        for uid in [u for u in self._binding if u not in live]:
            del self._binding[uid]
        for stale in [u for u in self._attempts if u not in live]:
            del self._attempts[stale]
        now = time.monotonic()
        for uid in list(self._avoid):
            kept = [entry for entry in self._avoid[uid] if uid in live and entry[0] > now]
            if kept:
                self._avoid[uid] = kept
            else:
                del self._avoid[uid]
        for pod in pods:
            if self.stopping:
                return
            spec, meta = pod.get("spec") or {}, pod["metadata"]
            if spec.get("nodeName") or meta.get("deletionTimestamp"):
                continue
            if (spec.get("schedulerName") or SCHEDULER_NAME) != SCHEDULER_NAME:
                continue
            if meta["uid"] in self._binding:
                self._continue_binding(pod)
            else:
                self._schedule(pod)

    def _fingerprint(self, pod: dict[str, Any]) -> tuple[Any, ...]:
        newest = max(
            (_rv(obj) for informer in (self.nodes, self.claims, self.slices, self.classes) for obj in informer.items()),
            default=0,
        )
        return newest, repr(pod.get("spec")), repr((pod.get("status") or {}).get("resourceClaimStatuses"))

    def _schedule(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        fingerprint = self._fingerprint(pod)
        last = self._attempts.get(uid)
        if last is not None and last.fingerprint == fingerprint:
            return
        self.stats.attempts += 1
        stale = find_extended_claim(pod, self.claims.items())
        if stale is not None:
            # Left by an attempt that did not finish (Go deletes it in PostFilter and tries again); the
            # pod is tried again once it is gone.
            try:
                self._discard_extended_claim(dict(stale))
            except Exception as exc:
                log.info("pod %s: removing its stale special claim: %s", pod["metadata"]["name"], describe_failure(exc))
            return
        resolved = pod_claims(pod, self.claims.get)
        if resolved.waiting is not None:
            # PreEnqueue: the pod is not tried at all (no Event, no condition) until its claims exist.
            log.debug("pod %s: %s", pod["metadata"]["name"], resolved.waiting)
            self._attempts[uid] = _Attempt(fingerprint, resolved.waiting)
            return
        nodes = sorted(self.nodes.items(), key=lambda n: n["metadata"]["name"])
        self.rng.shuffle(nodes)
        self.stats.last_node_order = [n["metadata"]["name"] for n in nodes]
        reasons: dict[str, str] = {}
        details: dict[str, str] = {}
        for node in nodes:
            name = node["metadata"]["name"]
            try:
                placement = self._fit(pod, resolved.claims, node, reasons, details)
            except AllocationError as exc:  # kube-scheduler aborts the attempt for this pod
                self._unschedulable(pod, fingerprint, f"{name}: {exc}")
                return
            if placement is not None:
                self._attempts.pop(uid, None)
                self._reserve(pod, resolved.claims, placement)
                return
        self._unschedulable(pod, fingerprint, failed_scheduling_message(reasons, details))

    def _fit(
        self,
        pod: dict[str, Any],
        claims: list[dict[str, Any]],
        node: dict[str, Any],
        reasons: dict[str, str],
        details: dict[str, str],
    ) -> _Placement | None:
        name = node["metadata"]["name"]
        problem = node_fit_problem(pod, node)
        if problem is not None:
            reasons[name] = problem
            return None
        mapping = device_class_mapping(self.classes.items())
        missing = unmapped_extended_resources(pod, mapping, node)
        if missing:
            reasons[name] = f"Insufficient {missing[0]}"
            return None
        to_allocate: list[dict[str, Any]] = []
        reserve: list[dict[str, Any]] = []
        for claim in claims:
            status = claim.get("status") or {}
            allocation = status.get("allocation")
            if allocation is None:
                to_allocate.append(claim)
                continue
            selector = allocation.get("nodeSelector")
            if selector is not None and not selector_matches(node, selector):
                reasons[name] = "resourceclaim not available on the node"
                return None
            if not reserved_for(claim, pod):
                if len(status.get("reservedFor") or []) >= MAX_RESERVED_FOR:
                    reasons[name] = "resourceclaim in use"
                    return None
                reserve.append(claim)
        extended_requests = extended_claim_requests(pod, mapping, node)
        extended: dict[str, Any] | None = None
        if extended_requests:
            extended = new_extended_claim(pod, extended_requests)
            extended["metadata"]["name"] = _IN_MEMORY_CLAIM
            extended["metadata"]["uid"] = str(uuid.uuid4())
            to_allocate.append(extended)
        if not to_allocate:
            return _Placement(name, [], reserve)
        pending = {id(c) for c in to_allocate}
        allocated = [
            c for c in self.claims.items() if (c.get("status") or {}).get("allocation") and id(c) not in pending
        ]
        now = time.monotonic()
        allocated += [held for until, held in self._avoid.get(pod["metadata"]["uid"], []) if until > now]
        slices = self.slices.items()
        classes = self.classes.items()
        results = allocate(to_allocate, node, slices, classes, allocated, self.features)
        if results is None:
            reasons[name] = CANNOT_ALLOCATE
            try:
                details[name] = explanation_clause(
                    explain(to_allocate, node, slices, classes, allocated, self.features)
                )
            except AllocationError as exc:
                details[name] = str(exc)
            return None
        pairs = list(zip(to_allocate, results, strict=True))
        extended_pair = next(((c, r) for c, r in pairs if c is extended), None)
        placement = _Placement(name, [(c, r) for c, r in pairs if c is not extended], reserve)
        if extended_pair is not None:
            claim = copy.deepcopy(extended_pair[0])
            claim["status"] = {"allocation": extended_pair[1]}
            placement.extended = claim
        return placement

    # -- writing a placement -------------------------------------------------------------------

    def _reserve(self, pod: dict[str, Any], claims: list[dict[str, Any]], placement: _Placement) -> None:
        """Write the allocations and reservations, then bind now or wait for binding conditions."""
        written: list[tuple[str, str]] = []
        allocated: list[tuple[str, str]] = []
        try:
            for claim, result in placement.allocations:
                stored = self._write_allocation(claim, result, pod)
                key = (stored["metadata"]["namespace"], stored["metadata"]["name"])
                written.append(key)
                allocated.append(key)
            for claim in placement.reserve:
                stored = self._write_allocation(claim, None, pod)
                written.append((stored["metadata"]["namespace"], stored["metadata"]["name"]))
            if placement.extended is not None:
                self._create_extended_claim(pod, placement.extended, written, allocated)
        except Exception as exc:
            # A conflict (someone changed a claim since our cache saw it) or an API failure: undo what this
            # attempt allocated and try again on the next pass with fresh data.
            log.info(
                "pod %s: reserving on %s failed: %s", pod["metadata"]["name"], placement.node, describe_failure(exc)
            )
            self._deallocate(pod, allocated)
            return
        every = list(dict.fromkeys([(c["metadata"]["namespace"], c["metadata"]["name"]) for c in claims] + written))
        self._binding[pod["metadata"]["uid"]] = _Binding(
            placement.node, every, allocated, time.monotonic() + self.binding_timeout
        )
        state, _ = binding_state(self.claims.get(ns, name) or {} for ns, name in every)
        if state is Binding.WAITING:
            message = f"waiting for binding conditions for device on node {placement.node}"
            self.recorder.event(PODS, pod, NORMAL, "BindingConditionsPending", message)
        self._continue_binding(pod)

    def _write_allocation(
        self, claim: dict[str, Any], result: dict[str, Any] | None, pod: dict[str, Any]
    ) -> dict[str, Any]:
        """Finalizer first (a claim being allocated must not vanish), then allocation and reservation."""
        current = claim
        finalizers = current["metadata"].get("finalizers") or []
        if result is not None and DELETE_PROTECTION_FINALIZER not in finalizers:
            protected = copy.deepcopy(current)
            protected["metadata"]["finalizers"] = [*finalizers, DELETE_PROTECTION_FINALIZER]
            current = self.client.update(CLAIMS, protected)
            self.claims.assume(current)
        updated = copy.deepcopy(current)
        status = updated.setdefault("status", {})
        if result is not None:
            status["allocation"] = result
        status["reservedFor"] = [*(status.get("reservedFor") or []), pod_reference(pod)]
        written = self.client.update(CLAIMS, updated, "status")
        self.claims.assume(written)
        return written

    def _create_extended_claim(
        self,
        pod: dict[str, Any],
        planned: dict[str, Any],
        written: list[tuple[str, str]],
        allocated: list[tuple[str, str]],
    ) -> None:
        """Create the special claim, allocate and reserve it, then record it on the pod.

        The claim is added to ``written`` and ``allocated`` as soon as it exists, so a later failure
        (a status write, the pod's patch) undoes it with the rest of the attempt.
        """
        body = copy.deepcopy(planned)
        allocation = body.pop("status")["allocation"]
        body["metadata"].pop("name", None)
        body["metadata"].pop("uid", None)
        body["metadata"]["finalizers"] = [DELETE_PROTECTION_FINALIZER]
        created = self.client.create(CLAIMS, body)
        self.claims.assume(created)
        key = (created["metadata"]["namespace"], created["metadata"]["name"])
        written.append(key)
        allocated.append(key)
        updated = copy.deepcopy(created)
        updated["status"] = {"allocation": allocation, "reservedFor": [pod_reference(pod)]}
        stored = self.client.update(CLAIMS, updated, "status")
        self.claims.assume(stored)
        patch = {
            "status": {
                "extendedResourceClaimStatus": {
                    "resourceClaimName": stored["metadata"]["name"],
                    "requestMappings": request_mappings(stored, pod),
                }
            }
        }
        self.pods.assume(
            self.client.merge_patch(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"], patch, "status")
        )

    def _continue_binding(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        waiting = self._binding[uid]
        claims = [self.claims.get(ns, name) for ns, name in waiting.claims]
        if any(c is None for c in claims):
            self._fail_binding(pod, waiting, "a claim of the pod disappeared while binding")
            return
        state, message = binding_state([c for c in claims if c is not None])
        if state is Binding.FAILED:
            self._fail_binding(pod, waiting, message)
            return
        if state is Binding.WAITING:
            if time.monotonic() >= waiting.deadline:
                self._fail_binding(pod, waiting, f"device binding timeout: claim={message}")
            return
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        try:
            self.client.bind(namespace, name, waiting.node)
        except Exception as exc:
            current = self._read_pod(namespace, name)
            if current is None or (current.get("spec") or {}).get("nodeName") != waiting.node:
                self._fail_binding(pod, waiting, f"binding rejected: {describe_failure(exc)}")
                return
            # Already bound there (by an earlier pass whose answer was lost): that is success.
        del self._binding[uid]
        # Read the bound pod into the cache now: a later pass must not see it pending (the watch may lag)
        # and schedule it again (kube-scheduler's "assumed pod").
        bound = self._read_pod(namespace, name)
        if bound is not None:
            self.pods.assume(bound)
        self._avoid.pop(uid, None)
        self.stats.bound += 1
        self.recorder.event(
            PODS,
            pod,
            NORMAL,
            "Scheduled",
            f"Successfully assigned {pod['metadata']['namespace']}/{pod['metadata']['name']} to {waiting.node}",
        )

    def _read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.client.get(PODS, namespace, name)
        except Exception as exc:
            log.debug("pod %s: %s", name, describe_failure(exc))
            return None

    def _fail_binding(self, pod: dict[str, Any], waiting: _Binding, message: str) -> None:
        """Deallocate what this attempt allocated, remember its devices so the retry goes elsewhere."""
        uid = pod["metadata"]["uid"]
        self.stats.binding_failures += 1
        failed: list[dict[str, Any]] = []
        for namespace, name in waiting.allocated:
            claim = self.claims.get(namespace, name)
            if claim is not None and (claim.get("status") or {}).get("allocation"):
                failed.append(
                    {
                        "metadata": {"name": f"{name}-binding-failed"},
                        "status": {"allocation": claim["status"]["allocation"]},
                    }
                )
        until = time.monotonic() + AVOID_SECONDS
        self._avoid.setdefault(uid, []).extend((until, held) for held in failed)
        del self._binding[uid]
        self._deallocate(pod, waiting.allocated, unreserve=waiting.claims)
        self.recorder.event(
            PODS, pod, WARNING, "FailedScheduling", f'running PreBind plugin "DynamicResources": {message}'
        )

    def _deallocate(
        self, pod: dict[str, Any], allocated: list[tuple[str, str]], unreserve: list[tuple[str, str]] | None = None
    ) -> None:
        """Undo a reservation: claims this attempt allocated lose allocation and reservation (the special
        claim is deleted); claims it only reserved lose the pod from reservedFor."""
        uid = pod["metadata"]["uid"]
        for namespace, name in set(allocated) | set(unreserve or []):
            claim = self.claims.get(namespace, name)
            if claim is None:
                continue
            try:
                extended = (claim["metadata"].get("annotations") or {}).get(EXTENDED_RESOURCE_CLAIM_ANNOTATION)
                if extended == "true" and (namespace, name) in allocated:
                    self._discard_extended_claim(claim)
                    continue
                deallocate = (namespace, name) in allocated
                # Other writers (the plugin, the reservation controller) update the status meanwhile: a 409
                # is read again and undone again, as kube-scheduler's Unreserve does, not left half-done.
                self._undo_reservation(claim, uid, deallocate)
            except Exception as exc:  # the claim controller deallocates unreserved claims in the end
                log.info("claim %s/%s: undoing the reservation failed: %s", namespace, name, describe_failure(exc))

    def _undo_reservation(self, claim: dict[str, Any], uid: str, deallocate: bool) -> None:
        current: dict[str, Any] | None = claim
        for attempt in range(1, DEFAULT_CONFLICT_RETRIES + 1):
            if current is None:
                return  # gone meanwhile: nothing left to undo
            updated = copy.deepcopy(current)
            status = updated.setdefault("status", {})
            status["reservedFor"] = [r for r in status.get("reservedFor") or [] if r.get("uid") != uid]
            if not status["reservedFor"]:
                status.pop("reservedFor")
            if deallocate:
                status.pop("allocation", None)
                status.pop("devices", None)
            try:
                self.claims.assume(self.client.update(CLAIMS, updated, "status"))
                return
            except Exception as exc:
                if classify_failure(exc) is not ApiFailure.CONFLICT or attempt == DEFAULT_CONFLICT_RETRIES:
                    raise
            meta = current["metadata"]
            current = self.client.get(CLAIMS, meta["namespace"], meta["name"])

    def _discard_extended_claim(self, claim: dict[str, Any]) -> None:
        """Deallocate and delete a special claim: unreserved first, so the claim controller lets it go
        (it keeps the delete-protection finalizer of a claim reserved for a live pod)."""
        meta = claim["metadata"]
        if (claim.get("status") or {}).get("allocation") or (claim.get("status") or {}).get("reservedFor"):
            updated = copy.deepcopy(claim)
            updated["status"] = {}
            claim = self.client.update(CLAIMS, updated, "status")
            self.claims.assume(claim)
        if not meta.get("deletionTimestamp"):
            self.client.delete(CLAIMS, meta["namespace"], meta["name"], uid=meta.get("uid"))

    def _unschedulable(self, pod: dict[str, Any], fingerprint: tuple[Any, ...], message: str) -> None:
        uid = pod["metadata"]["uid"]
        self.stats.unschedulable += 1
        self._attempts[uid] = _Attempt(fingerprint, message)
        self.recorder.event(PODS, pod, WARNING, "FailedScheduling", message)
        conditions = (pod.get("status") or {}).get("conditions") or []
        current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        if current is not None and current.get("status") == "False" and current.get("message") == message:
            return
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        updated = copy.deepcopy(pod)
        status = updated.setdefault("status", {})
        status["conditions"] = [c for c in conditions if c.get("type") != "PodScheduled"] + [condition]
        try:
            self.pods.assume(self.client.update(PODS, updated, "status"))
        except Exception as exc:
            log.debug("pod %s status: %s", pod["metadata"]["name"], describe_failure(exc))
