"""The one model of a ResourceClaim in migdra: a pydantic view of the fields migdra reads.

Every part reads a claim through :class:`ResourceClaimView` -- the node plugin (prepare, its claim
status, the placement occupancy, realize before bind), the reservation controller (its index parses a
claim once, when the informer says it changed), the cluster view (``migdra status``, the occupancy
metrics) and the tools (the allocator port, packing, ``migdra allocate``).  The API server's JSON is
the wire format only: a claim is read into the view where it enters a process (an informer's change, a
GET, a manifest file), and a status writer applies only its own part (:mod:`dra_driver.claimstatus`),
built from what it read.  Fields migdra does not read are ignored, never refused; a claim whose fields
have the wrong shape is not one the API server would hold, and is skipped where many are read
(:func:`parse_claims`) or refused in one line naming the field where one is (:func:`describe_validation_error`).

Why here, beneath everything that reads claims: the model is pure data (pydantic alone), so the
allocator port and the device model, which must not load the Kubernetes client, read the same type as
the processes that do.  What of a claim is this driver's on a node, and its rules, is
:mod:`kubeletplugin.prepare.claims`'s; the ``status.devices`` schema migdra writes is
:mod:`dra_driver.claimstatus`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dra_driver.gcpause import garbage_collector_paused

log = logging.getLogger(__name__)

EntryKey = tuple[str, str, str, str | None]
"""(driver, pool, device, shareID or None): how the API server tells ``status.devices`` entries apart."""


class _ApiView(BaseModel):
    # A view, not a copy: fields migdra does not read are ignored, never refused.
    model_config = ConfigDict(frozen=True, extra="ignore", validate_by_name=True, validate_by_alias=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        """A field written as ``null`` is an absent one in the API's JSON (clients serialize unset
        optional fields so): its default applies."""
        if isinstance(data, Mapping):
            return {key: value for key, value in data.items() if value is not None}
        return data


# -- spec ----------------------------------------------------------------------------------------------


class CapacityRequirements(_ApiView):
    requests: dict[str, Any] | None = Field(
        default=None, description="capacity name -> quantity (DRAConsumableCapacity)"
    )


class DeviceSubRequest(_ApiView):
    """One alternative of a ``firstAvailable`` request (``spec.devices.requests[].firstAvailable[]``)."""

    name: str = ""
    device_class_name: str = Field(default="", alias="deviceClassName")
    selectors: tuple[dict[str, Any], ...] = ()
    allocation_mode: str | None = Field(default=None, alias="allocationMode")
    count: int | None = None
    tolerations: tuple[dict[str, Any], ...] = ()
    capacity: CapacityRequirements | None = None


class ExactDeviceRequest(DeviceSubRequest):
    """``spec.devices.requests[].exactly``: a sub-request's fields and ``adminAccess``."""

    admin_access: bool | None = Field(default=None, alias="adminAccess")


class DeviceRequest(_ApiView):
    name: str = ""
    exactly: ExactDeviceRequest | None = None
    first_available: tuple[DeviceSubRequest, ...] = Field(default=(), alias="firstAvailable")


class DeviceConstraint(_ApiView):
    requests: tuple[str, ...] = ()
    match_attribute: str | None = Field(default=None, alias="matchAttribute")
    distinct_attribute: str | None = Field(default=None, alias="distinctAttribute")


class OpaqueDeviceConfiguration(_ApiView):
    driver: str
    parameters: Any = None


class DeviceClaimConfiguration(_ApiView):
    """``spec.devices.config[]`` (and a class's ``spec.config[]``, which has no ``requests``)."""

    requests: tuple[str, ...] = ()
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClaim(_ApiView):
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[DeviceConstraint, ...] = ()
    config: tuple[DeviceClaimConfiguration, ...] = ()


class ResourceClaimSpecView(_ApiView):
    devices: DeviceClaim = DeviceClaim()


# -- status ----------------------------------------------------------------------------------------------


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

    @property
    def share(self) -> str | None:
        """The ``shareID`` of a share of a device that allows multiple allocations; None for any other."""
        return self.share_id if isinstance(self.share_id, str) and self.share_id else None

    def consumed(self, name: str, driver: str) -> str | None:
        """The amount of capacity ``name`` consumed, written bare or qualified with the driver (as
        schedulers write it), as text; None when not consumed."""
        consumed = self.consumed_capacity if isinstance(self.consumed_capacity, Mapping) else {}
        value = consumed.get(name, consumed.get(f"{driver}/{name}"))
        return None if value is None else str(value)


class DeviceAllocationResult(_ApiView):
    results: tuple[DeviceRequestAllocationResult, ...] = ()
    config: tuple[DeviceAllocationConfiguration, ...] = ()


class AllocationResult(_ApiView):
    devices: DeviceAllocationResult | None = None


class ConditionView(_ApiView):
    """A ``metav1.Condition`` of a ``status.devices[]`` entry."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    observed_generation: int | None = Field(default=None, alias="observedGeneration")
    last_transition_time: str | None = Field(default=None, alias="lastTransitionTime")


class AllocatedDeviceStatus(_ApiView):
    """One ``status.devices[]`` entry (the schema of migdra's is :mod:`dra_driver.claimstatus`'s)."""

    driver: str
    pool: str
    device: str
    share_id: str | None = Field(default=None, alias="shareID")
    conditions: tuple[ConditionView, ...] = ()
    data: Any = None

    @property
    def key(self) -> EntryKey:
        return (self.driver, self.pool, self.device, self.share_id or None)

    def condition(self, condition_type: str) -> ConditionView | None:
        return next((c for c in self.conditions if c.type == condition_type), None)

    @property
    def data_fields(self) -> Mapping[str, Any]:
        """``data`` as an object (empty when absent or not one)."""
        return self.data if isinstance(self.data, Mapping) else {}


class ResourceClaimConsumerReference(_ApiView):
    """One ``status.reservedFor`` entry: who may use the claim (a pod, for kubelet)."""

    resource: str = ""
    name: str = ""
    uid: str = ""


class ResourceClaimStatusView(_ApiView):
    allocation: AllocationResult | None = None
    reserved_for: tuple[ResourceClaimConsumerReference, ...] = Field(default=(), alias="reservedFor")
    devices: tuple[AllocatedDeviceStatus, ...] = ()


POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
"""Set by the resource claim controller on a claim it generates from a template: the pod's name for it."""


class ManagedFieldsEntry(_ApiView):
    manager: str = ""
    fields_v1: Any = Field(default=None, alias="fieldsV1")


class ObjectMetaView(_ApiView):
    """A claim's metadata.  A claim read from a manifest (the tools') has no ``uid`` and may have no
    ``namespace`` until the API server stores it: both are then empty, and a UID compared with kubelet's
    or a label printed says so."""

    name: str
    namespace: str = ""
    uid: str = ""
    generation: int | None = None
    resource_version: str | None = Field(default=None, alias="resourceVersion")
    annotations: dict[str, str] | None = None
    managed_fields: tuple[ManagedFieldsEntry, ...] = Field(default=(), alias="managedFields")

    @property
    def pod_claim_name(self) -> str | None:
        """``pod.spec.resourceClaims[].name`` of a claim generated from a template; None for any other claim."""
        return (self.annotations or {}).get(POD_CLAIM_NAME_ANNOTATION) or None

    @property
    def label(self) -> str:
        """``namespace/name`` as logs and messages name a claim (klog's ``KObj``: the name alone
        without a namespace)."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def involved(self) -> dict[str, Any]:
        """The claim's identity as an Event recorder takes an object (``metadata`` alone)."""
        identity = {"name": self.name, "namespace": self.namespace, "uid": self.uid}
        if self.resource_version:
            identity["resourceVersion"] = self.resource_version
        return {"metadata": identity}


class ResourceClaimView(_ApiView):
    metadata: ObjectMetaView
    spec: ResourceClaimSpecView = ResourceClaimSpecView()
    status: ResourceClaimStatusView | None = None

    @property
    def allocated(self) -> bool:
        return self.status is not None and self.status.allocation is not None

    def reserved_for(self, uid: str) -> bool:
        """Whether ``status.reservedFor`` names the consumer of this UID (kubelet's check for a pod)."""
        return self.status is not None and any(consumer.uid == uid for consumer in self.status.reserved_for)

    @property
    def results(self) -> tuple[DeviceRequestAllocationResult, ...]:
        """Every allocation result (of any driver and pool); none before the claim is allocated."""
        allocation = self.status.allocation if self.status is not None else None
        devices = allocation.devices if allocation is not None else None
        return devices.results if devices is not None else ()

    def results_of(self, driver_name: str, pool_name: str | None = None) -> tuple[DeviceRequestAllocationResult, ...]:
        """The allocation results of this driver (in this pool, if given), in allocation order."""
        return tuple(r for r in self.results if r.driver == driver_name and (pool_name is None or r.pool == pool_name))

    @property
    def status_devices(self) -> tuple[AllocatedDeviceStatus, ...]:
        """``status.devices`` as stored."""
        return self.status.devices if self.status is not None else ()

    def status_entry(
        self, driver: str, pool: str, device: str, share_id: str | None = None
    ) -> AllocatedDeviceStatus | None:
        """The ``status.devices`` entry of ``device`` and ``share_id`` (None: the entry without a shareID)."""
        wanted = (driver, pool, device, share_id)
        return next((entry for entry in self.status_devices if entry.key == wanted), None)


def parse_claims(objects: Iterable[Mapping[str, Any]]) -> list[ResourceClaimView]:
    """The claims among ``objects`` (as an informer or a list holds them) that migdra can read; one it
    cannot (a field of the wrong shape) names no device of ours it could act on, and is skipped."""
    claims: list[ResourceClaimView] = []
    with garbage_collector_paused():  # many small acyclic objects: dra_driver/gcpause.py
        for obj in objects:
            claim = parse_claim(obj)
            if claim is not None:
                claims.append(claim)
    return claims


def parse_claim(obj: Mapping[str, Any]) -> ResourceClaimView | None:
    """One claim as :func:`parse_claims` reads it: None (logged at debug) when migdra cannot read it."""
    try:
        return ResourceClaimView.model_validate(obj)
    except ValidationError as e:
        log.debug("skipping a ResourceClaim migdra cannot read: %s", describe_validation_error(e))
        return None


def describe_validation_error(error: ValidationError) -> str:
    """The first problem of a pydantic error in one line, ``metadata.name: Field required``, and how many more."""
    problems = error.errors()
    first = problems[0]
    where = ".".join(str(part) for part in first["loc"]) or "(the document)"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{where}: {first['msg']}{more}"
