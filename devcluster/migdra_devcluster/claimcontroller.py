"""The resourceclaim controller of kube-controller-manager, for the local cluster.

What it does, as Kubernetes does it:

- **Claims from templates**: for each entry of a pod's ``spec.resourceClaims`` that names a
  ``resourceClaimTemplateName``, create the claim -- ``generateName: <pod>-<entry>-`` (shortened to
  leave room for the random suffix), the template's labels and annotations, the annotation
  ``resource.kubernetes.io/pod-claim-name: <entry>``, the pod as controlling owner with
  ``blockOwnerDeletion`` -- and record it in ``pod.status.resourceClaimStatuses``.  A claim created
  earlier for the same pod and entry is found by that annotation and owner and reused (a crash
  between the create and the status write must not make a second claim).
- **Reservations end with their pods**: a pod named in ``status.reservedFor`` that is gone (or has
  another UID), has finished (phase Succeeded/Failed), or is being deleted before it was ever
  scheduled is removed from the list.
- **Deallocation**: when the last reservation of a claim ends, the claim is deallocated (allocation
  and device status cleared) and loses the scheduler's ``resource.kubernetes.io/delete-protection``
  finalizer; an unused claim being deleted loses it too.  Never otherwise: the scheduler adds the
  finalizer *before* it writes the allocation, and removing it in between would race it.  A claim
  generated for a pod that is done (or was replaced by a pod of the same name) is deleted.

Why here and not in the scheduler: a claim outlives a scheduling attempt; only this controller sees
every pod end.  Level-triggered: after any change it looks at every pod and claim again.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

from dra_driver.kube.client import CLAIM_TEMPLATES, CLAIMS, PODS, Client, status_code
from dra_driver.kube.events import WARNING, EventRecorder
from dra_driver.kube.failures import describe_failure
from dra_driver.kube.informer import Changes, Informer
from dra_driver.kube.loop import ControlLoop

log = logging.getLogger(__name__)

POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
DELETE_PROTECTION_FINALIZER = "resource.kubernetes.io/delete-protection"
_GENERATE_NAME_BASE = 57  # 63 characters of a label-sized name, less kube's 5-character random suffix, less 1
RESYNC_SECONDS = 5.0


def pod_is_done(pod: Mapping[str, Any]) -> bool:
    """Finished, or deleted before it was ever bound: its claims are no longer needed (Go: isPodDone)."""
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        return True
    meta = pod.get("metadata") or {}
    return bool(meta.get("deletionTimestamp")) and not (pod.get("spec") or {}).get("nodeName")


def owned_by(claim: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """Whether ``pod`` is the claim's controlling owner (by UID)."""
    uid = pod["metadata"]["uid"]
    return any(
        ref.get("uid") == uid and ref.get("controller") for ref in claim["metadata"].get("ownerReferences") or []
    )


def generated_claim_name(pod: Mapping[str, Any], entry: str) -> str:
    """The ``generateName`` of the claim for ``entry``: ``<pod>-<entry>-``; when longer than 57
    characters, both names are cut in proportion to their lengths (and the trailing ``-`` goes), as the
    resourceclaim controller does, so a long pod name does not swallow the entry's name."""
    pod_name = str(pod["metadata"]["name"])
    base = f"{pod_name}-{entry}-"
    if len(base) <= _GENERATE_NAME_BASE:
        return base
    return (
        pod_name[: len(pod_name) * _GENERATE_NAME_BASE // len(base)]
        + "-"
        + entry[: len(entry) * _GENERATE_NAME_BASE // len(base)]
    )


class ClaimController(ControlLoop):
    """Creates claims from templates and ends reservations and allocations of finished pods."""

    def __init__(self, client: Client, changes: Changes | None = None) -> None:
        self.client = client
        changes = changes or Changes()
        self.pods = Informer(client, PODS, changes)
        self.claims = Informer(client, CLAIMS, changes)
        self.templates = Informer(client, CLAIM_TEMPLATES, changes)
        self.recorder = EventRecorder(client, "resource-claim-controller")
        super().__init__("claim-controller", changes, (self.pods, self.claims, self.templates), RESYNC_SECONDS)

    # -- one pass ------------------------------------------------------------------------------

    def sync(self) -> None:
        """One level-triggered pass over every pod and claim."""
        pods = {(p["metadata"].get("namespace", ""), p["metadata"]["name"]): p for p in self.pods.items()}
        for pod in pods.values():
            if not pod_is_done(pod) and not pod["metadata"].get("deletionTimestamp"):
                self._ensure_claims(pod)
        for claim in self.claims.items():
            self._sync_claim(claim, pods)

    def _ensure_claims(self, pod: dict[str, Any]) -> None:
        namespace = pod["metadata"].get("namespace", "default")
        recorded = {s.get("name"): s for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
        missing: list[dict[str, Any]] = []
        for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
            template_name = entry.get("resourceClaimTemplateName")
            if not template_name:
                continue
            status = recorded.get(entry["name"])
            if status is not None and self.claims.get(namespace, status.get("resourceClaimName") or "") is not None:
                continue
            claim = self._existing_claim(pod, entry["name"]) or self._create_claim(pod, entry["name"], template_name)
            if claim is None:
                return
            missing.append({"name": entry["name"], "resourceClaimName": claim["metadata"]["name"]})
        if missing:
            self._record_statuses(pod, missing)

    def _existing_claim(self, pod: dict[str, Any], entry: str) -> dict[str, Any] | None:
        namespace = pod["metadata"].get("namespace", "default")
        for claim in self.claims.items():
            meta = claim["metadata"]
            if (
                meta.get("namespace") == namespace
                and (meta.get("annotations") or {}).get(POD_CLAIM_NAME_ANNOTATION) == entry
                and owned_by(claim, pod)
            ):
                return claim
        return None

    def _create_claim(self, pod: dict[str, Any], entry: str, template_name: str) -> dict[str, Any] | None:
        namespace = pod["metadata"].get("namespace", "default")
        template = self.templates.get(namespace, template_name)
        if template is None:
            self.recorder.event(
                PODS,
                pod,
                WARNING,
                "FailedResourceClaimCreation",
                f'PodResourceClaim {entry}: resource claim template "{template_name}": '
                f'resourceclaimtemplate.resource.k8s.io "{template_name}" not found',
            )
            return None
        template_meta = (template.get("spec") or {}).get("metadata") or {}
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "generateName": generated_claim_name(pod, entry),
                "namespace": namespace,
                "labels": dict(template_meta.get("labels") or {}),
                "annotations": {**(template_meta.get("annotations") or {}), POD_CLAIM_NAME_ANNOTATION: entry},
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": pod["metadata"]["name"],
                        "uid": pod["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": copy.deepcopy((template.get("spec") or {}).get("spec") or {}),
        }
        try:
            created = self.client.create(CLAIMS, body)
        except Exception as exc:
            self.recorder.event(
                PODS, pod, WARNING, "FailedResourceClaimCreation", f"PodResourceClaim {entry}: {describe_failure(exc)}"
            )
            return None
        self.claims.assume(created)
        return created

    def _record_statuses(self, pod: dict[str, Any], added: list[dict[str, Any]]) -> None:
        names = {s["name"] for s in added}
        kept = [s for s in (pod.get("status") or {}).get("resourceClaimStatuses") or [] if s.get("name") not in names]
        updated = copy.deepcopy(pod)
        updated.setdefault("status", {})["resourceClaimStatuses"] = kept + added
        try:
            self.pods.assume(self.client.update(PODS, updated, "status"))
        except Exception as exc:  # a conflict: the next pass reads the pod again and finds the claim by annotation
            log.debug("pod %s status: %s", pod["metadata"]["name"], describe_failure(exc))

    # -- claims --------------------------------------------------------------------------------

    def _sync_claim(self, claim: dict[str, Any], pods: Mapping[tuple[str, str], dict[str, Any]]) -> None:
        meta = claim["metadata"]
        namespace = meta.get("namespace", "")
        status = claim.get("status") or {}
        reserved = status.get("reservedFor") or []
        valid = []
        for consumer in reserved:
            if consumer.get("resource") != "pods" or consumer.get("apiGroup"):
                valid.append(consumer)  # not ours to judge
                continue
            pod = pods.get((namespace, consumer.get("name", "")))
            if pod is None or pod["metadata"]["uid"] != consumer.get("uid"):
                # The cache may lag behind a pod created a moment ago: ask the server, as Go's controller does.
                try:
                    pod = self.client.get(PODS, namespace, consumer.get("name", ""))
                except Exception as exc:
                    log.debug("pod %s: %s", consumer.get("name"), describe_failure(exc))
                    return
            if pod is None or pod["metadata"]["uid"] != consumer.get("uid") or pod_is_done(pod):
                continue
            valid.append(consumer)
        if len(valid) < len(reserved):
            # The transition from "used" to "used by fewer": with nobody left, deallocate (Go's syncClaim).
            self._write_claim(claim, valid)
            return
        if valid:
            return
        if meta.get("deletionTimestamp"):
            # Being deleted and unused: clear a leftover allocation and let it go.  Never otherwise: the
            # scheduler adds the finalizer *before* it writes the allocation, and must not be raced.
            if DELETE_PROTECTION_FINALIZER in (meta.get("finalizers") or []):
                if status.get("allocation"):
                    self._write_claim(claim, [])
                else:
                    self._drop_finalizer(claim)
            return
        if self._generated_for_finished_pod(claim, pods):
            self._delete(claim)

    def _generated_for_finished_pod(
        self, claim: dict[str, Any], pods: Mapping[tuple[str, str], dict[str, Any]]
    ) -> bool:
        """A claim made from a template for a pod that is done or was replaced (same name, new UID).

        A pod missing from the cache is left to the garbage collector, as Go does: it may be one the
        cache has not seen yet.
        """
        meta = claim["metadata"]
        if POD_CLAIM_NAME_ANNOTATION not in (meta.get("annotations") or {}):
            return False
        owner = next(
            (r for r in meta.get("ownerReferences") or [] if r.get("kind") == "Pod" and r.get("controller")), None
        )
        if owner is None:
            return False
        pod = pods.get((meta.get("namespace", ""), owner.get("name", "")))
        return pod is not None and (pod["metadata"]["uid"] != owner.get("uid") or pod_is_done(pod))

    def _write_claim(self, claim: dict[str, Any], valid: list[dict[str, Any]]) -> None:
        """Remove stale reservations; with none left, deallocate and drop the finalizer."""
        updated = copy.deepcopy(claim)
        status = updated.setdefault("status", {})
        if valid:
            status["reservedFor"] = valid
        else:
            status.pop("reservedFor", None)
            status.pop("allocation", None)
            status.pop("devices", None)
        try:
            written = self.client.update(CLAIMS, updated, "status")
        except Exception as exc:
            log.debug("claim %s status: %s", claim["metadata"]["name"], describe_failure(exc))
            return
        self.claims.assume(written)
        if not valid:
            self._drop_finalizer(written)

    def _drop_finalizer(self, claim: dict[str, Any]) -> None:
        updated = copy.deepcopy(claim)
        finalizers = [f for f in updated["metadata"].get("finalizers") or [] if f != DELETE_PROTECTION_FINALIZER]
        updated["metadata"]["finalizers"] = finalizers
        try:
            written = self.client.update(CLAIMS, updated)
        except Exception as exc:
            if status_code(exc) != 404:
                log.debug("claim %s finalizer: %s", claim["metadata"]["name"], describe_failure(exc))
            return
        self.claims.assume(written)

    def _delete(self, claim: dict[str, Any]) -> None:
        meta = claim["metadata"]
        try:
            self.client.delete(CLAIMS, meta.get("namespace"), meta["name"], uid=meta.get("uid"))
        except Exception as exc:
            log.debug("claim %s delete: %s", meta["name"], describe_failure(exc))
