"""The one model of a ResourceClaim in the product: a pydantic view of the fields migdra reads.

:class:`ResourceClaimView` reads ``metadata``, ``status.allocation.devices.{results,config}`` and
``status.devices``; every other field is ignored, never refused.  Every part of the node plugin reads a
claim through it -- prepare (:func:`kubeletplugin.prepare.claims.read_claim`), the claim status
reporter, the placement occupancy and realize before bind (:func:`parse_claims`, over the process's
claim informer).  The API server's JSON is the wire format only: a claim is read into the view at once;
a status writer applies only its own part (:mod:`dra_driver.claimstatus`), built from what it read.
What of a claim is this driver's on a node, and its rules, is :mod:`kubeletplugin.prepare.claims`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dra_driver.kubelet.calls import ClaimRef

log = logging.getLogger(__name__)


class _ApiView(BaseModel):
    # A view, not a copy: fields migdra does not read are ignored, never refused.
    model_config = ConfigDict(frozen=True, extra="ignore", validate_by_name=True, validate_by_alias=True)


class OpaqueDeviceConfiguration(_ApiView):
    driver: str
    parameters: Any = None


class DeviceAllocationConfiguration(_ApiView):
    source: str
    requests: tuple[str, ...] = ()
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceRequestAllocationResult(_ApiView):
    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool | None = Field(default=None, alias="adminAccess")
    binding_conditions: tuple[str, ...] = Field(default=(), alias="bindingConditions")
    share_id: Any = Field(default=None, alias="shareID", description="checked by compute_claim_allocation")
    consumed_capacity: Any = Field(default=None, alias="consumedCapacity", description="checked there too")


class DeviceAllocationResult(_ApiView):
    results: tuple[DeviceRequestAllocationResult, ...] = ()
    config: tuple[DeviceAllocationConfiguration, ...] = ()


class AllocationResult(_ApiView):
    devices: DeviceAllocationResult | None = None


class ResourceClaimStatusView(_ApiView):
    allocation: AllocationResult | None = None
    devices: tuple[dict[str, Any], ...] | None = Field(
        default=None, description="status.devices entries as stored: merged, never interpreted, by the writers"
    )


POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
"""Set by the resource claim controller on a claim it generates from a template: the pod's name for it."""


class ObjectMetaView(_ApiView):
    name: str
    namespace: str
    uid: str
    generation: int | None = None
    resource_version: str | None = Field(default=None, alias="resourceVersion")
    annotations: dict[str, str] | None = None

    @property
    def pod_claim_name(self) -> str | None:
        """``pod.spec.resourceClaims[].name`` of a claim generated from a template; None for any other claim."""
        return (self.annotations or {}).get(POD_CLAIM_NAME_ANNOTATION) or None


class ResourceClaimView(_ApiView):
    metadata: ObjectMetaView
    status: ResourceClaimStatusView | None = None

    @property
    def ref(self) -> ClaimRef:
        return ClaimRef(self.metadata.namespace, self.metadata.name, self.metadata.uid)

    @property
    def results(self) -> tuple[DeviceRequestAllocationResult, ...]:
        """Every allocation result (of any driver and pool); none before the claim is allocated."""
        allocation = self.status.allocation if self.status is not None else None
        devices = allocation.devices if allocation is not None else None
        return devices.results if devices is not None else ()

    def results_of(self, driver_name: str, pool_name: str) -> tuple[DeviceRequestAllocationResult, ...]:
        """The allocation results of this driver in this pool, in allocation order."""
        return tuple(r for r in self.results if r.driver == driver_name and r.pool == pool_name)

    @property
    def status_devices(self) -> list[dict[str, Any]]:
        """``status.devices`` as stored (entries that are not objects left out)."""
        devices = self.status.devices if self.status is not None else None
        return [dict(entry) for entry in devices or () if isinstance(entry, Mapping)]


def parse_claims(objects: Iterable[Mapping[str, Any]]) -> list[ResourceClaimView]:
    """The claims among ``objects`` (as an informer or a list holds them) that migdra can read; one it
    cannot (a field of the wrong shape) names no device of ours it could act on, and is skipped."""
    return [claim for claim, _ in parse_claims_with_objects(objects)]


def parse_claims_with_objects(
    objects: Iterable[Mapping[str, Any]],
) -> list[tuple[ResourceClaimView, Mapping[str, Any]]]:
    """:func:`parse_claims`, each claim beside the object it was read from (a status writer compares
    its part with the object's ``managedFields``, which the view does not model)."""
    claims: list[tuple[ResourceClaimView, Mapping[str, Any]]] = []
    for obj in objects:
        try:
            claims.append((ResourceClaimView.model_validate(obj), obj))
        except ValidationError as e:
            log.debug("skipping a ResourceClaim migdra cannot read: %s", describe_validation_error(e))
    return claims


def describe_validation_error(error: ValidationError) -> str:
    """The first problem of a pydantic error in one line, ``metadata.name: Field required``, and how many more."""
    problems = error.errors()
    first = problems[0]
    where = ".".join(str(part) for part in first["loc"]) or "(the document)"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{where}: {first['msg']}{more}"
