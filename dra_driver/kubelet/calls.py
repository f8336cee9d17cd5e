"""The DRAPlugin calls in plain Python types, the same for every API version (v1, v1beta1).

What kubelet sends about a claim (:class:`ClaimRef`) and what a plugin answers per claim
(:class:`PrepareResult` with :class:`PreparedDevice` entries, :class:`UnprepareResult`), and the
:class:`DraService` a plugin implements.  Two sides use them: the node plugin, whose gRPC layer
(``kubeletplugin.grpc``) converts both DRAPlugin versions to and from these types and calls its prepare
service (``kubeletplugin.prepare``) through :class:`DraService` -- neither knows the other's details --
and the development cluster's kubelet, which calls plugins (package ``migdra-devcluster``).  One
definition, so both ends of the protocol agree.

The contract, from kubelet's side (docs/prepare.md):

- every claim in a request gets a result keyed by its UID, and a failure of one claim is reported in
  that claim's ``error`` -- never by failing the call, which would make kubelet discard every result;
- ``prepare`` and ``unprepare`` are idempotent: kubelet retries after timeouts and restarts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """What kubelet sends for a claim: the plugin reads the allocation from the API server itself."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One allocated device as kubelet needs it: which requests it serves (empty: every request of the
    claim) and its CDI device IDs."""

    pool_name: str
    device_name: str
    request_names: tuple[str, ...] = ()
    cdi_device_ids: tuple[str, ...] = ()
    share_id: str | None = None  # v1 only (DRAConsumableCapacity): the allocation's shareID of a share


@dataclass(frozen=True, slots=True)
class PrepareResult:
    """Outcome for one claim: devices, or an error message a cluster admin can act on."""

    devices: tuple[PreparedDevice, ...] = field(default=())
    error: str = ""


@dataclass(frozen=True, slots=True)
class UnprepareResult:
    """Outcome of NodeUnprepareResources for one claim; a non-empty ``error`` means it failed."""

    error: str = ""


class DraService(Protocol):
    """What the gRPC servers call.  Implementations must be thread-safe (calls arrive concurrently)."""

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        """Prepare every claim; the result has exactly one entry per claim UID."""
        ...

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, UnprepareResult]:
        """Unprepare every claim; unknown claims succeed (idempotence)."""
        ...
