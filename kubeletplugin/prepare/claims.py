"""A claim's read and what this driver was allocated on this node.

:func:`read_claim` reads a claim into the product's one model of it
(:class:`dra_driver.resourceclaim.ResourceClaimView`); the pure extraction
:func:`compute_claim_allocation` says what of a claim is this driver's on this node.  It never
writes to the API server (``reporter.py`` and ``realize_before_bind.py`` do) and never interprets
opaque parameters (``config.py`` does).

Rules (docs/kubelet-grpc.md, "DRAPlugin messages"; docs/resource-api.md, "ResourceClaim and
ResourceClaimTemplate"):

- kubelet names the claim by namespace, name *and* UID; a claim of that name with another UID is a
  different (re-created) claim and is refused;
- only results whose ``driver`` is this driver are ours; results of other drivers are ignored and
  never touched (NVIDIA #1328 rolled back other drivers' results);
- our results must be in this node's pool (pool name = node name); anything else is an error;
- configs are this driver's ``opaque`` entries of ``allocation.devices.config``, in order, each with
  its ``source`` and ``requests``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from urllib3.exceptions import HTTPError

from dra_driver.kube.client import CLAIMS, Client
from dra_driver.kube.failures import describe_failure
from dra_driver.kubelet.calls import ClaimRef
from dra_driver.resourceclaim import (
    DeviceAllocationResult,
    DeviceRequestAllocationResult,
    ResourceClaimView,
    describe_validation_error,
)
from kubeletplugin.prepare.errors import ClaimMismatchError, ClaimReadError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One allocation result of this driver in this node's pool."""

    request: str
    device_name: str
    admin_access: bool
    share_id: str | None = None  # a share of a multi-allocatable device (DRAConsumableCapacity)
    share_size: int | None = None  # its consumedCapacity computeSlices
    position: int = field(default=0, compare=False)  # in status.allocation.devices.results, for errors


SHARE_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
"""A share ID as the API server validates it: an RFC 4122 UUID in normalized form (36 characters, lower case)."""
COMPUTE_SLICES = "computeSlices"


def compute_share(
    result: DeviceRequestAllocationResult, position: int, driver_name: str
) -> tuple[str | None, int | None]:
    """(shareID, consumed compute slices) of one of our results; pure.  (None, None) without a shareID.

    The slices come from ``consumedCapacity`` under ``computeSlices`` or ``<driver>/computeSlices``
    (both spellings reach a driver); a share must name them.  Anything malformed is a
    :class:`ClaimMismatchError` naming the field, so that claim fails alone.
    """
    where = f"status.allocation.devices.results[{position}]"
    if result.share_id is None:
        return None, None
    if not isinstance(result.share_id, str) or not SHARE_ID.match(result.share_id):
        raise ClaimMismatchError(
            f"{where}.shareID: {result.share_id!r} is not a UUID in normalized form (xxxxxxxx-xxxx-xxxx-xxxx-"
            f"xxxxxxxxxxxx, lower-case hex) (device {result.device})"
        )
    consumed = result.consumed_capacity if isinstance(result.consumed_capacity, Mapping) else {}
    keys = [k for k in (COMPUTE_SLICES, f"{driver_name}/{COMPUTE_SLICES}") if k in consumed]
    if not keys:
        raise ClaimMismatchError(
            f"{where}.consumedCapacity: a share (shareID {result.share_id}) of device {result.device} must name "
            f"{COMPUTE_SLICES}; found {sorted(consumed) if consumed else 'none'}"
        )
    values = {str(consumed[k]) for k in keys}
    text = values.pop() if len(values) == 1 else None
    if text is None or not text.isdigit() or int(text) <= 0:
        shown = ", ".join(f"{k}={consumed[k]!r}" for k in keys)
        raise ClaimMismatchError(
            f"{where}.consumedCapacity.{keys[0]}: {shown} is not one positive whole number of compute slices "
            f"(device {result.device})"
        )
    return result.share_id, int(text)


@dataclass(frozen=True, slots=True)
class DriverConfigEntry:
    """One opaque config of this driver; ``index`` is its position in ``allocation.devices.config``."""

    index: int
    source: str
    requests: tuple[str, ...]
    parameters: Any


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    claim: ClaimRef
    generation: int | None
    devices: tuple[AllocatedDevice, ...]
    configs: tuple[DriverConfigEntry, ...]
    other_drivers: tuple[str, ...] = ()  # drivers of the results that are not ours, sorted, once each


def claim_namespaced_name(ref: ClaimRef) -> str:
    return f"{ref.namespace}/{ref.name}"


# A claim UID names files (the CDI spec, the claim's lock): nothing that could leave their directory.
_CLAIM_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


def compute_claim_ref_problem(ref: ClaimRef) -> str | None:
    """What is wrong with a claim as kubelet sent it (one line naming the field), or None; pure.

    kubelet always sends namespace, name and UID (docs/kubelet-grpc.md); an empty one would otherwise
    turn into a read of the claim *list* and a pydantic dump as the claim's error.
    """
    for field_name, value in (("namespace", ref.namespace), ("name", ref.name), ("uid", ref.uid)):
        if not value:
            return (
                f"kubelet sent a claim with an empty {field_name} "
                f"(namespace {ref.namespace!r}, name {ref.name!r}, uid {ref.uid!r})"
            )
    if not _CLAIM_UID.match(ref.uid):
        return (
            f"kubelet sent claim {claim_namespaced_name(ref)} with uid {ref.uid!r}, which is not a Kubernetes UID "
            "(letters, digits and '-', '.', '_', ':', at most 128)"
        )
    return None


def claim_ref(claim: ResourceClaimView) -> ClaimRef:
    """The claim as kubelet names it in its calls."""
    return ClaimRef(claim.metadata.namespace, claim.metadata.name, claim.metadata.uid)


def read_claim(client: Client, ref: ClaimRef) -> ResourceClaimView:
    """GET the claim; every failure is a per-claim :class:`ClaimReadError` (kubelet retries)."""
    try:
        raw = client.get(CLAIMS, ref.namespace, ref.name)
    except ApiException as e:
        raise ClaimReadError(f"reading it failed: {describe_failure(e, client.server)}") from e
    except (HTTPError, OSError) as e:  # no answer (an outage): one line naming the server, not urllib3's dump
        raise ClaimReadError(f"reading it failed: {describe_failure(e, client.server)}") from e
    except ValueError as e:
        raise ClaimReadError(f"reading it from the API server failed: {e}") from e
    if raw is None:
        raise ClaimReadError(f"not found in the API server (kubelet asked for UID {ref.uid})")
    try:
        return ResourceClaimView.model_validate(raw)
    except ValidationError as e:
        raise ClaimReadError(
            f"the API server returned a claim migdra cannot read: {describe_validation_error(e)}"
        ) from e


def compute_claim_allocation(
    claim: ResourceClaimView, ref: ClaimRef, driver_name: str, pool_name: str
) -> ClaimAllocation:
    """This driver's results and configs of ``claim``; pure (raises :class:`ClaimMismatchError`)."""
    if claim.metadata.uid != ref.uid:
        raise ClaimMismatchError(
            f"claim {claim_namespaced_name(ref)} has UID {claim.metadata.uid}, kubelet asked for {ref.uid}",
            names_claim=True,
        )
    allocation = claim.status.allocation if claim.status is not None else None
    if allocation is None:
        raise ClaimMismatchError("is not allocated (no status.allocation); nothing to prepare")
    devices = allocation.devices or DeviceAllocationResult()
    ours: list[AllocatedDevice] = []
    others: set[str] = set()
    for position, result in enumerate(devices.results):
        if result.driver != driver_name:
            others.add(result.driver)
            continue  # another driver's device: not ours to prepare, check or touch
        if result.pool != pool_name:
            raise ClaimMismatchError(
                f"status.allocation.devices.results[{position}]: device {result.device} of driver {driver_name} "
                f"is in pool {result.pool!r}, but this node's pool is {pool_name!r}"
            )
        share_id, share_size = compute_share(result, position, driver_name)
        ours.append(
            AllocatedDevice(result.request, result.device, bool(result.admin_access), share_id, share_size, position)
        )
    configs = tuple(
        DriverConfigEntry(position, entry.source, entry.requests, entry.opaque.parameters)
        for position, entry in enumerate(devices.config)
        if entry.opaque is not None and entry.opaque.driver == driver_name
    )
    return ClaimAllocation(ref, claim.metadata.generation, tuple(ours), configs, tuple(sorted(others)))
