"""Conversions between kubelet's gRPC messages and the plain types of :mod:`dra_driver.kubelet.calls`.

Owns the field mapping for both DRAPlugin versions and for the health stream.  One conversion, on
v1 messages: v1beta1 is the same wire format without ``Device.share_id`` (field 5), so v1beta1
messages are transcoded to and from v1 through their bytes.  ``tests/unit/test_protos_wire.py``
guards that premise.  Pure functions: no I/O, no logging, no gRPC calls.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, TypeAlias, TypeVar

from dra_driver.kubelet.calls import ClaimRef, PreparedDevice, PrepareResult, UnprepareResult
from dra_driver.kubelet.protos import dra_health_v1alpha1_pb2 as health_pb2
from dra_driver.kubelet.protos import dra_v1_pb2 as v1
from dra_driver.kubelet.protos import dra_v1beta1_pb2 as v1beta1

# (pool_name, device_name, healthy); ``None`` means the driver cannot tell (reported as UNKNOWN).
DeviceHealthEntry: TypeAlias = tuple[str, str, bool | None]


def claim_refs(claims: Iterable[v1.Claim]) -> list[ClaimRef]:
    """The claims of a request, in kubelet's order."""
    return [ClaimRef(namespace=claim.namespace, name=claim.name, uid=claim.uid) for claim in claims]


def _device(device: PreparedDevice) -> v1.Device:
    message = v1.Device(
        request_names=device.request_names,
        pool_name=device.pool_name,
        device_name=device.device_name,
        cdi_device_ids=device.cdi_device_ids,
    )
    if device.share_id is not None:
        message.share_id = device.share_id
    return message


_SHARE_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def share_id_problem(claim_uid: str, devices: Sequence[PreparedDevice]) -> str | None:
    """Why a claim's devices cannot go to kubelet with their share IDs (one line naming the field), or None.

    kubelet keys what it prepared by driver, pool, device and share ID (a UUID in normalized form, as
    the API server validates ``shareID``); a share ID that is not one would make kubelet track a share
    that does not exist, so that claim fails alone and the others of the call are answered."""
    for position, device in enumerate(devices):
        if device.share_id is not None and not _SHARE_ID.match(device.share_id):
            return (
                f"claim {claim_uid}: devices[{position}].share_id: {device.share_id!r} of device "
                f"{device.device_name} is not a UUID in normalized form (lower-case 8-4-4-4-12 hex digits)"
            )
    return None


def prepare_response(results: Mapping[str, PrepareResult]) -> v1.NodePrepareResourcesResponse:
    """One entry per claim UID; a failed claim carries only its error (kubelet ignores its devices)."""
    response = v1.NodePrepareResourcesResponse()
    for claim_uid, result in results.items():
        entry = response.claims[claim_uid]
        problem = None if result.error else share_id_problem(claim_uid, result.devices)
        if result.error or problem:
            entry.error = result.error or problem or ""
        else:
            entry.devices.extend(_device(device) for device in result.devices)
    return response


def unprepare_response(results: Mapping[str, UnprepareResult]) -> v1.NodeUnprepareResourcesResponse:
    """One entry per claim UID; an empty entry means success."""
    response = v1.NodeUnprepareResourcesResponse()
    for claim_uid, result in results.items():
        response.claims[claim_uid].error = result.error
    return response


class _Message(Protocol):
    def SerializeToString(self) -> bytes: ...
    def ParseFromString(self, serialized: bytes) -> object: ...


_M = TypeVar("_M", bound=_Message)


def _transcode(message: _Message, target: type[_M]) -> _M:
    """The same bytes read as another version's message (same field numbers: docs/kubelet-grpc.md)."""
    converted = target()
    converted.ParseFromString(message.SerializeToString())
    return converted


def prepare_request_from_v1beta1(request: v1beta1.NodePrepareResourcesRequest) -> v1.NodePrepareResourcesRequest:
    return _transcode(request, v1.NodePrepareResourcesRequest)


def unprepare_request_from_v1beta1(
    request: v1beta1.NodeUnprepareResourcesRequest,
) -> v1.NodeUnprepareResourcesRequest:
    return _transcode(request, v1.NodeUnprepareResourcesRequest)


def prepare_response_to_v1beta1(
    response: v1.NodePrepareResourcesResponse,
) -> v1beta1.NodePrepareResourcesResponse:
    """The same response for a v1beta1 kubelet, which cannot receive ``share_id``.

    A claim whose devices carry a share ID fails instead of losing it silently: without it kubelet
    would treat a shared slice of a device as the whole device.
    """
    downgraded = v1.NodePrepareResourcesResponse()
    downgraded.CopyFrom(response)
    for claim_uid, entry in downgraded.claims.items():
        shared = [device.device_name for device in entry.devices if device.HasField("share_id")]
        if shared:
            del entry.devices[:]
            entry.error = (
                f"claim {claim_uid}: devices {', '.join(shared)} are shared (share_id), which the v1beta1 "
                "DRAPlugin API cannot express; kubelet 1.35 or newer (v1.DRAPlugin) is needed"
            )
    return _transcode(downgraded, v1beta1.NodePrepareResourcesResponse)


def unprepare_response_to_v1beta1(
    response: v1.NodeUnprepareResourcesResponse,
) -> v1beta1.NodeUnprepareResourcesResponse:
    return _transcode(response, v1beta1.NodeUnprepareResourcesResponse)


_HEALTH_STATUS = {True: health_pb2.HEALTHY, False: health_pb2.UNHEALTHY, None: health_pb2.UNKNOWN}


def health_response(
    devices: Sequence[DeviceHealthEntry], observed_at: int, check_timeout_seconds: int = 0
) -> health_pb2.NodeWatchResourcesResponse:
    """The full device list as kubelet expects it on every message; ``observed_at`` is Unix seconds."""
    return health_pb2.NodeWatchResourcesResponse(
        devices=[
            health_pb2.DeviceHealth(
                device=health_pb2.DeviceIdentifier(pool_name=pool_name, device_name=device_name),
                health=_HEALTH_STATUS[healthy],
                last_updated_time=observed_at,
                health_check_timeout_seconds=check_timeout_seconds,
            )
            for pool_name, device_name, healthy in devices
        ]
    )
