"""Read a ResourceClaim and extract what this driver was allocated on this node.

This module owns the boundary with the claim as the API server stores it: a pydantic view of the
fields migdra reads (``metadata``, ``status.allocation.devices.{results,config}``), one read through
the official client, and the pure extraction :func:`compute_claim_allocation`.  It never writes to
the API server (``reporter.py`` does) and never interprets opaque parameters (``config.py`` does).

Rules (kubelet-grpc.md §3, resource-api.md §5):

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
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from urllib3.exceptions import HTTPError

from dra_driver.kubeapi import call_json, describe_failure
from dra_driver.kubeletcalls import ClaimRef
from kubeletplugin.prepare.errors import ClaimMismatchError, ClaimReadError

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


class DeviceAllocationResult(_ApiView):
    results: tuple[DeviceRequestAllocationResult, ...] = ()
    config: tuple[DeviceAllocationConfiguration, ...] = ()


class AllocationResult(_ApiView):
    devices: DeviceAllocationResult | None = None


class ResourceClaimStatusView(_ApiView):
    allocation: AllocationResult | None = None


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


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One allocation result of this driver in this node's pool."""

    request: str
    device_name: str
    admin_access: bool


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

    kubelet always sends namespace, name and UID (kubelet-grpc.md §3); an empty one would otherwise
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


def describe_validation_error(error: ValidationError) -> str:
    """The first problem of a pydantic error in one line, ``metadata.name: Field required``, and how many more."""
    problems = error.errors()
    first = problems[0]
    where = ".".join(str(part) for part in first["loc"]) or "(the document)"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{where}: {first['msg']}{more}"


class ClaimApi:
    """ResourceClaims as raw JSON, both ways.

    The official client's models refuse unknown fields on the way out and drop them on the way in,
    so a read-modify-write of ``status`` through them would fail or lose what a newer API server
    added; this goes through the client's transport (auth, TLS, timeouts) without its models.
    """

    _PATH = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"

    def __init__(self, api_client: client.ApiClient, timeout: float) -> None:
        self._api_client = api_client
        self._timeout = timeout

    @property
    def server(self) -> str:
        return str(self._api_client.configuration.host)

    def read(self, namespace: str, name: str) -> dict[str, Any]:
        return self._call("GET", self._PATH, namespace, name, None)

    def replace_status(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT ``/status`` (optimistic concurrency: ``body``'s resourceVersion, 409 on a race)."""
        return self._call("PUT", self._PATH + "/status", namespace, name, body)

    def _call(self, method: str, path: str, namespace: str, name: str, body: dict[str, Any] | None) -> dict[str, Any]:
        resource_path = path.format(namespace=quote(namespace, safe=""), name=quote(name, safe=""))
        return call_json(self._api_client, method, resource_path, body=body, timeout=self._timeout)


def read_claim(api: ClaimApi, ref: ClaimRef) -> ResourceClaimView:
    """GET the claim; every failure is a per-claim :class:`ClaimReadError` (kubelet retries)."""
    try:
        raw = api.read(ref.namespace, ref.name)
    except ApiException as e:
        if e.status == 404:
            raise ClaimReadError(f"not found in the API server (kubelet asked for UID {ref.uid})") from e
        raise ClaimReadError(f"reading it failed: {describe_failure(e, api.server)}") from e
    except (HTTPError, OSError) as e:  # no answer (an outage): one line naming the server, not urllib3's dump
        raise ClaimReadError(f"reading it failed: {describe_failure(e, api.server)}") from e
    except ValueError as e:
        raise ClaimReadError(f"reading it from the API server failed: {e}") from e
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
        ours.append(AllocatedDevice(result.request, result.device, bool(result.admin_access)))
    configs = tuple(
        DriverConfigEntry(position, entry.source, entry.requests, entry.opaque.parameters)
        for position, entry in enumerate(devices.config)
        if entry.opaque is not None and entry.opaque.driver == driver_name
    )
    return ClaimAllocation(ref, claim.metadata.generation, tuple(ours), configs, tuple(sorted(others)))
