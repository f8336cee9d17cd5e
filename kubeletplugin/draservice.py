"""The seam between kubelet's gRPC API and migdra's prepare logic, in plain Python types.

The gRPC layer (``kubeletplugin.grpc``) converts both DRAPlugin versions (v1 and v1beta1) to and from
these types (defined in :mod:`dra_driver.kubeletcalls`, shared with the local cluster's kubelet) and
calls a :class:`DraService`; the prepare logic (``kubeletplugin.prepare``) implements
it.  Neither side knows the other's details, and one implementation serves every API version.

Contract (from kubelet's side: docs/kubelet-grpc.md, "DRAPlugin messages"):

- every claim in a request gets a result keyed by its UID, and a failure of one claim is reported in
  that claim's ``error`` -- never by failing the call, which would make kubelet discard every result;
- ``prepare`` and ``unprepare`` are idempotent: kubelet retries after timeouts and restarts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from dra_driver.kubeletcalls import ClaimRef, PreparedDevice, PrepareResult, UnprepareResult

__all__ = ["ClaimRef", "DraService", "PrepareResult", "PreparedDevice", "UnprepareResult"]


class DraService(Protocol):
    """What the gRPC servers call.  Implementations must be thread-safe (calls arrive concurrently)."""

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        """Prepare every claim; the result has exactly one entry per claim UID."""
        ...

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, UnprepareResult]:
        """Unprepare every claim; unknown claims succeed (idempotence)."""
        ...
