"""A claim's requests and sub-requests behind one shape, read once from the claim's model.

Kubernetes' allocator works on ``requestAccessor`` (an ``exactly`` request or one ``firstAvailable``
sub-request); :class:`RequestSpec` is that, with the fields the search reads on every device turned
into plain attributes.  :class:`RequestData` is what validation learns about one of them (its class,
how many devices it needs, the device set of an ``All`` request).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dra_driver.jsontypes import JSON
from dra_driver.resourceclaim import DeviceSubRequest, ExactDeviceRequest, ResourceClaimView

if TYPE_CHECKING:
    from dra_driver.tools.allocation.devices import Candidate

EXACT_COUNT = "ExactCount"
ALL = "All"


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One ``exactly`` request or one sub-request: the fields allocation reads."""

    name: str
    class_name: str
    selectors: tuple[JSON, ...]
    mode: str
    count: int
    admin_access: bool
    has_admin_access: bool
    tolerations: tuple[JSON, ...]
    capacity: JSON | None  # ``capacity.requests`` (DRAConsumableCapacity), or None

    @classmethod
    def exact(cls, name: str, exactly: ExactDeviceRequest) -> RequestSpec:
        return cls(
            name=name,
            class_name=exactly.device_class_name,
            selectors=exactly.selectors,
            mode=exactly.allocation_mode or EXACT_COUNT,
            count=1 if exactly.count is None else exactly.count,
            admin_access=bool(exactly.admin_access),
            has_admin_access=exactly.admin_access is not None,
            tolerations=exactly.tolerations,
            capacity=exactly.capacity.requests if exactly.capacity is not None else None,
        )

    @classmethod
    def sub(cls, sub_request: DeviceSubRequest) -> RequestSpec:
        return cls(
            name=sub_request.name,
            class_name=sub_request.device_class_name,
            selectors=sub_request.selectors,
            mode=sub_request.allocation_mode or EXACT_COUNT,
            count=1 if sub_request.count is None else sub_request.count,
            admin_access=False,  # not allowed in firstAvailable
            has_admin_access=False,
            tolerations=sub_request.tolerations,
            capacity=sub_request.capacity.requests if sub_request.capacity is not None else None,
        )


@dataclass(slots=True)
class RequestData:
    """What validation determined about one request or sub-request of one claim."""

    request: RequestSpec
    parent: RequestSpec | None
    device_class: JSON | None = None
    class_selectors: tuple[JSON, ...] = ()
    class_expressions: tuple[str, ...] = ()  # the CEL text of class_selectors, then of the request's
    request_expressions: tuple[str, ...] = ()
    class_owner: str = ""  # "class X" / "claim ns/name", for error messages
    claim_owner: str = ""
    num_devices: int = 0
    selected_sub_request: int = 0
    all_devices: list[Candidate] = field(default_factory=list)

    @property
    def request_name(self) -> str:
        if self.parent is not None:
            return f"{self.parent.name}/{self.request.name}"
        return self.request.name


def claim_label(claim: ResourceClaimView) -> str:
    """``namespace/name`` as klog.KObj prints a claim."""
    return claim.metadata.label
