"""Which ResourceClaims a pod uses, and why a pod cannot be scheduled yet (kube-scheduler's PreEnqueue).

Pure: the caller passes a lookup over its cache.  Messages follow kube-scheduler's dynamicresources
plugin, so a user who knows Kubernetes recognises them in ``kubectl describe pod``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

JSON = Mapping[str, Any]
ClaimLookup = Callable[[str, str], "dict[str, Any] | None"]


@dataclass
class PodClaims:
    """The pod's claims (user-created and generated from templates), or why it has to wait."""

    claims: list[dict[str, Any]] = field(default_factory=list)
    waiting: str | None = None


def _controlled_by(claim: JSON, pod: JSON) -> bool:
    uid = pod["metadata"]["uid"]
    return any(r.get("uid") == uid and r.get("controller") for r in claim["metadata"].get("ownerReferences") or [])


def pod_claims(pod: JSON, lookup: ClaimLookup) -> PodClaims:
    """Resolve ``spec.resourceClaims``: a claim name as given, a template through ``status.resourceClaimStatuses``."""
    namespace = pod["metadata"].get("namespace", "default")
    statuses = {s.get("name"): s for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
    found = PodClaims()
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        if entry.get("resourceClaimName"):
            name = entry["resourceClaimName"]
            generated = False
        else:
            status = statuses.get(entry["name"])
            if status is None:
                found.waiting = f'pod "{namespace}/{pod["metadata"]["name"]}": ResourceClaim not created yet'
                return found
            if not status.get("resourceClaimName"):
                continue  # the controller decided that no claim is needed
            name = status["resourceClaimName"]
            generated = True
        claim = lookup(namespace, name)
        if claim is None:
            found.waiting = f'resourceclaim "{name}" not found'
            return found
        if claim["metadata"].get("deletionTimestamp"):
            found.waiting = f'resourceclaim "{name}" is being deleted'
            return found
        if generated and not _controlled_by(claim, pod):
            pod_name = pod["metadata"]["name"]
            found.waiting = (
                f"ResourceClaim {namespace}/{name} was not created for pod {namespace}/{pod_name} (pod is not owner)"
            )
            return found
        found.claims.append(dict(claim))
    return found


def reserved_for(claim: JSON, pod: JSON) -> bool:
    uid = pod["metadata"]["uid"]
    return any(r.get("uid") == uid for r in (claim.get("status") or {}).get("reservedFor") or [])


def pod_reference(pod: JSON) -> dict[str, str]:
    """The ``status.reservedFor`` entry of a pod."""
    return {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
