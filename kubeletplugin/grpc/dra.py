"""The DRAPlugin service kubelet calls to prepare and unprepare claims, in both API versions.

Owns kubelet's call contract (docs/kubelet-grpc.md) on our side of the socket: every claim UID of a
request gets exactly one entry in the response, and nothing short of a bug in this module makes the call
itself fail -- kubelet discards the whole response on a gRPC error, so failures are reported per
claim.  The work is delegated to a :class:`~dra_driver.kubelet.calls.DraService`; this module never
looks at devices.

One implementation, :class:`DraPluginServicer`, serves ``k8s.io.kubelet.pkg.apis.dra.v1``;
:class:`DraPluginV1beta1Servicer` serves ``...v1beta1`` by transcoding to and from it (see
:mod:`kubeletplugin.grpc.convert`), so both versions give identical answers.

Handlers run on the gRPC server's worker threads, concurrently; the service must be thread-safe
(and, in rolling-update mode, safe against the other plugin process calling it too: the prepare
service locks per claim and per GPU across processes, see ``kubeletplugin/prepare/locks.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import grpc

from dra_driver.kubelet.calls import ClaimRef, DraService, PrepareResult, UnprepareResult
from dra_driver.kubelet.protos import dra_v1_pb2 as v1
from dra_driver.kubelet.protos import dra_v1beta1_pb2 as v1beta1
from kubeletplugin.grpc import convert

log = logging.getLogger(__name__)

_Result = TypeVar("_Result", PrepareResult, UnprepareResult)

# The supported_versions strings kubelet matches (docs/kubelet-grpc.md, "Version choice"), in our order
# of preference: a 1.34+ kubelet takes the first one it knows.
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")


def _describe(claim: ClaimRef) -> str:
    return f"{claim.namespace}/{claim.name} (uid {claim.uid})"


def complete_results(
    operation: str,
    claims: Sequence[ClaimRef],
    results: Mapping[str, _Result],
    failed: Callable[[str], _Result],
) -> dict[str, _Result]:
    """Exactly the requested UIDs: a missing result becomes an error, an unrequested one is dropped.

    Why not trust the service: kubelet retries claims without an entry silently, so a missing
    result would turn a driver bug into an endless retry nobody sees.
    """
    completed: dict[str, _Result] = {}
    for claim in claims:
        result = results.get(claim.uid)
        if result is None:
            log.error("the driver returned no %s result for claim %s", operation, _describe(claim))
            result = failed(f"{operation} of claim {_describe(claim)}: the driver returned no result; this is a bug")
        completed[claim.uid] = result
    extra = sorted(set(results) - completed.keys())
    if extra:
        log.warning("ignoring %s results for claims kubelet did not ask about: %s", operation, ", ".join(extra))
    return completed


class DraPluginServicer:
    """``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`` over a :class:`DraService`."""

    def __init__(self, service: DraService) -> None:
        self._service = service

    def _call(
        self,
        operation: str,
        claims: Sequence[ClaimRef],
        call: Callable[[Sequence[ClaimRef]], Mapping[str, _Result]],
        failed: Callable[[str], _Result],
    ) -> dict[str, _Result]:
        if not claims:
            return {}
        try:
            results = call(claims)
        except Exception as e:
            # An unexpected failure fails every claim of this call, not the call: kubelet would
            # otherwise drop the results and retry without telling the user anything.
            log.exception("%s of claims %s failed unexpectedly", operation, ", ".join(c.uid for c in claims))
            return {
                claim.uid: failed(
                    f"{operation} of claim {_describe(claim)} failed unexpectedly in the driver "
                    f"({type(e).__name__}: {e}); see the DRA plugin's log on this node"
                )
                for claim in claims
            }
        return complete_results(operation, claims, results, failed)

    def NodePrepareResources(
        self,
        request: v1.NodePrepareResourcesRequest,
        context: grpc.ServicerContext,
        service: str = SUPPORTED_VERSIONS[0],
    ) -> v1.NodePrepareResourcesResponse:
        claims = convert.claim_refs(request.claims)
        log_call(service, "NodePrepareResources", claims)
        results = self._call("prepare", claims, self._service.prepare, lambda error: PrepareResult(error=error))
        return convert.prepare_response(results)

    def NodeUnprepareResources(
        self,
        request: v1.NodeUnprepareResourcesRequest,
        context: grpc.ServicerContext,
        service: str = SUPPORTED_VERSIONS[0],
    ) -> v1.NodeUnprepareResourcesResponse:
        claims = convert.claim_refs(request.claims)
        log_call(service, "NodeUnprepareResources", claims)
        results = self._call("unprepare", claims, self._service.unprepare, lambda error: UnprepareResult(error=error))
        return convert.unprepare_response(results)


CALL_LOG_PREFIX = "kubelet called"


def log_call(service: str, method: str, claims: Sequence[ClaimRef]) -> None:
    """One INFO line per kubelet call, ``kubelet called v1.DRAPlugin/NodePrepareResources for claims
    ns/name (uid U), ...``: which service version the kubelet chose and what it asked, in the order it
    asked -- how an operator follows the kubelet's calls (``-v``), and how the development cluster's
    simulated kubelet is compared with the real one (docs/real-node.md)."""
    log.info("%s %s/%s for claims %s", CALL_LOG_PREFIX, service, method, ", ".join(_describe(c) for c in claims))


class DraPluginV1beta1Servicer:
    """``k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin``: the v1 servicer behind a transcoding step."""

    def __init__(self, v1_servicer: DraPluginServicer) -> None:
        self._v1 = v1_servicer

    def NodePrepareResources(
        self, request: v1beta1.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1beta1.NodePrepareResourcesResponse:
        response = self._v1.NodePrepareResources(
            convert.prepare_request_from_v1beta1(request), context, SUPPORTED_VERSIONS[1]
        )
        return convert.prepare_response_to_v1beta1(response)

    def NodeUnprepareResources(
        self, request: v1beta1.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1beta1.NodeUnprepareResourcesResponse:
        response = self._v1.NodeUnprepareResources(
            convert.unprepare_request_from_v1beta1(request), context, SUPPORTED_VERSIONS[1]
        )
        return convert.unprepare_response_to_v1beta1(response)
