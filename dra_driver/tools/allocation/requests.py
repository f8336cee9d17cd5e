"""A claim's requests and sub-requests behind one shape, read once from the claim dict.

Kubernetes' allocator works on ``requestAccessor`` (an ``exactly`` request or one ``firstAvailable``
sub-request); :class:`RequestSpec` is that, with the fields the search reads on every device turned
into plain attributes.  :class:`RequestData` is what validation learns about one of them (its class,
how many devices it needs, the device set of an ``All`` request).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dra_driver.jsontypes import JSON
from dra_driver.tools.allocation.errors import AllocationError

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
    def exact(cls, name: str, exactly: JSON) -> RequestSpec:
        admin = exactly.get("adminAccess")
        return cls(
            name=name,
            class_name=str(exactly.get("deviceClassName") or ""),
            selectors=tuple(exactly.get("selectors") or ()),
            mode=str(exactly.get("allocationMode") or EXACT_COUNT),
            count=_count(exactly),
            admin_access=bool(admin),
            has_admin_access=admin is not None,
            tolerations=tuple(exactly.get("tolerations") or ()),
            capacity=_capacity(exactly),
        )

    @classmethod
    def sub(cls, sub_request: JSON) -> RequestSpec:
        return cls(
            name=str(sub_request.get("name") or ""),
            class_name=str(sub_request.get("deviceClassName") or ""),
            selectors=tuple(sub_request.get("selectors") or ()),
            mode=str(sub_request.get("allocationMode") or EXACT_COUNT),
            count=_count(sub_request),
            admin_access=False,  # not allowed in firstAvailable
            has_admin_access=False,
            tolerations=tuple(sub_request.get("tolerations") or ()),
            capacity=_capacity(sub_request),
        )


def _count(request: JSON) -> int:
    count = request.get("count")
    if count is None:
        return 1
    if isinstance(count, bool) or not isinstance(count, int):
        raise AllocationError(f"request count {count!r} is not an integer")
    return count


def _capacity(request: JSON) -> JSON | None:
    capacity = request.get("capacity")
    if capacity is None:
        return None
    return capacity.get("requests") if isinstance(capacity, Mapping) else None


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


def claim_label(claim: JSON) -> str:
    """``namespace/name`` as klog.KObj prints a claim."""
    metadata = claim.get("metadata") or {}
    namespace = metadata.get("namespace") or ""
    name = metadata.get("name") or ""
    return f"{namespace}/{name}" if namespace else str(name)


def claim_requests(claim: JSON) -> Sequence[JSON]:
    return ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ()


def claim_devices(claim: JSON) -> JSON:
    return (claim.get("spec") or {}).get("devices") or {}
