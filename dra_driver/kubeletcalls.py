"""The DRAPlugin calls in plain Python types, the same for every API version (v1, v1beta1).

What kubelet sends about a claim (:class:`ClaimRef`) and what a plugin answers per claim
(:class:`PrepareResult` with :class:`PreparedDevice` entries, :class:`UnprepareResult`).  Two sides use
them: the node plugin's seam between its gRPC layer and its prepare logic
(``kubeletplugin.draservice``), and the development cluster's kubelet, which calls plugins
(package ``migdra-devcluster``).  One definition, so both ends of the protocol agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
    share_id: str | None = None  # v1 only (DRAConsumableCapacity); never set by migdra today


@dataclass(frozen=True, slots=True)
class PrepareResult:
    """Outcome for one claim: devices, or an error message a cluster admin can act on."""

    devices: tuple[PreparedDevice, ...] = field(default=())
    error: str = ""


@dataclass(frozen=True, slots=True)
class UnprepareResult:
    """Outcome of NodeUnprepareResources for one claim; a non-empty ``error`` means it failed."""

    error: str = ""
