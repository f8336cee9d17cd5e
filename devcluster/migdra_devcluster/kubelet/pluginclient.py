"""Kubelet's side of one DRA plugin: registration (GetInfo, version choice, NotifyRegistrationStatus) and
the DRAPlugin calls on the chosen version, with answers as plain dataclasses.

Why a module of its own: the simulated kubelet's plugin watcher and the tests' stand-alone kubelet
client (``tests/kubelet_client.py``) must agree on how a plugin is registered and which version is
spoken, so that logic lives here once.  Version choice is kubelet 1.34/1.35's
(``pkg/kubelet/cm/dra/plugin``): the *first entry of the plugin's* ``supported_versions`` that this
kubelet knows; none known (an empty list included) fails the registration with kubelet's message.

Results are keyed by claim UID, as on the wire.  A claim the plugin did not answer for gets an error
result here (kubelet treats such a claim as failed and retries it), so callers never have to tell
"missing" from "failed".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from dra_driver.kubelet.calls import ClaimRef, PreparedDevice, PrepareResult, UnprepareResult
from dra_driver.kubelet.protos import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
from dra_driver.kubelet.protos import pluginregistration_v1_pb2 as registration_pb2
from dra_driver.kubelet.protos import pluginregistration_v1_pb2_grpc as registration_grpc

DRA_PLUGIN_TYPE = "DRAPlugin"
"""``PluginInfo.type`` routed to kubelet's DRA handler (Go ``registerapi.DRAPlugin``)."""

KNOWN_VERSIONS: tuple[str, ...] = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
"""The DRAPlugin services kubelet 1.34/1.35 speaks."""

CALL_TIMEOUT_SECONDS = 45.0
"""Kubelet's ``defaultClientCallTimeout`` for every DRAPlugin call."""

_STUBS: dict[str, tuple[Any, Any]] = {
    "v1.DRAPlugin": (dra_v1_pb2, dra_v1_pb2_grpc),
    "v1beta1.DRAPlugin": (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc),
}


class RegistrationRejected(Exception):
    """This kubelet refused the plugin (after telling it so through NotifyRegistrationStatus).

    ``info`` is the plugin's ``PluginInfo`` message, for callers that report what was refused.
    """

    def __init__(self, message: str, info: Any = None) -> None:
        super().__init__(message)
        self.info = info


@dataclass(frozen=True, slots=True)
class PluginInfo:
    """What the plugin said in GetInfo, and the version this kubelet chose from it."""

    driver: str
    endpoint: str
    supported_versions: tuple[str, ...]
    version: str


NO_ANSWER = "the plugin's answer has no entry for this claim"


def choose_version(supported: Sequence[str], known: Sequence[str] = KNOWN_VERSIONS) -> str | None:
    """Kubelet 1.34+'s rule: the plugin's first listed version that this kubelet knows, else None.

    The plugin's order decides, not kubelet's: a plugin listing ``v1beta1`` before ``v1`` is spoken to
    in v1beta1 by a kubelet knowing both.
    """
    return next((version for version in supported if version in known), None)


def validate_plugin_info(info: Any, known: Sequence[str] = KNOWN_VERSIONS) -> str | None:
    """Why kubelet's DRA handler would refuse this ``PluginInfo`` message, or None when it accepts it."""
    if info.type != DRA_PLUGIN_TYPE:
        return f"plugin type {info.type!r} is not handled by the DRA handler"
    if not info.name:
        return "the plugin did not give a driver name"
    if choose_version(info.supported_versions, known) is None:
        return (
            f"none of services supported by the plugin ({', '.join(info.supported_versions)}) "
            f"are supported by the kubelet ({', '.join(known)})"
        )
    return None


def register(
    channel: grpc.Channel,
    registration_socket: Path,
    *,
    known: Sequence[str] = KNOWN_VERSIONS,
    reject_with: str | None = None,
    timeout: float = CALL_TIMEOUT_SECONDS,
) -> tuple[Any, PluginInfo]:
    """The registration handshake on ``channel`` (connected to ``registration_socket``).

    GetInfo, validation (``reject_with`` refuses even a valid plugin, like a failing
    ``ValidatePlugin``), then NotifyRegistrationStatus with the verdict.  Returns the raw ``PluginInfo``
    message and its plain reading; an empty endpoint means the registration socket itself serves
    DRAPlugin.  Raises :class:`RegistrationRejected` after notifying a rejection, and gRPC's
    ``RpcError`` when the plugin does not answer.
    """
    stub = registration_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
    info = stub.GetInfo(registration_pb2.InfoRequest(), timeout=timeout)
    error = reject_with or validate_plugin_info(info, known)
    stub.NotifyRegistrationStatus(
        registration_pb2.RegistrationStatus(plugin_registered=error is None, error=error or ""), timeout=timeout
    )
    if error is not None:
        raise RegistrationRejected(error, info)
    version = choose_version(info.supported_versions, known)
    assert version is not None  # validate_plugin_info checked it
    plain = PluginInfo(
        driver=info.name,
        endpoint=info.endpoint or str(registration_socket),
        supported_versions=tuple(info.supported_versions),
        version=version,
    )
    return info, plain


def _share_id(device: Any) -> str | None:
    """v1 devices may carry a share ID (1.35+); v1beta1 devices have no such field."""
    if "share_id" in device.DESCRIPTOR.fields_by_name and device.HasField("share_id"):
        return str(device.share_id)
    return None


class PluginClient:
    """The DRAPlugin service of one registered plugin instance, on the version chosen at registration.

    Owns its gRPC channel to the DRA endpoint (:meth:`close` it).  Thread-safe, as gRPC channels are.
    """

    def __init__(self, info: PluginInfo, *, timeout: float = CALL_TIMEOUT_SECONDS) -> None:
        if info.version not in _STUBS:
            raise ValueError(f"no stubs for {info.version!r}; this kubelet speaks {', '.join(_STUBS)}")
        self.info = info
        self.timeout = timeout
        self.channel = grpc.insecure_channel(f"unix://{info.endpoint}")
        self._pb2, grpc_module = _STUBS[info.version]
        self._stub = grpc_module.DRAPluginStub(self.channel)

    @property
    def driver(self) -> str:
        return self.info.driver

    @property
    def version(self) -> str:
        return self.info.version

    def _claims(self, claims: Sequence[ClaimRef]) -> list[Any]:
        return [self._pb2.Claim(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]

    def prepare_response(self, claims: Sequence[ClaimRef]) -> Any:
        """NodePrepareResources; the response message as received (raises ``grpc.RpcError``)."""
        request = self._pb2.NodePrepareResourcesRequest(claims=self._claims(claims))
        return self._stub.NodePrepareResources(request, timeout=self.timeout)

    def unprepare_response(self, claims: Sequence[ClaimRef]) -> Any:
        """NodeUnprepareResources; the response message as received (raises ``grpc.RpcError``)."""
        request = self._pb2.NodeUnprepareResourcesRequest(claims=self._claims(claims))
        return self._stub.NodeUnprepareResources(request, timeout=self.timeout)

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        """NodePrepareResources: every requested claim's result by UID (unanswered ones failed)."""
        response = self.prepare_response(claims)
        results = {uid: prepare_result(entry) for uid, entry in response.claims.items()}
        return {c.uid: results.get(c.uid, PrepareResult(error=NO_ANSWER)) for c in claims}

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, UnprepareResult]:
        """NodeUnprepareResources: every requested claim's result by UID (unanswered ones failed)."""
        response = self.unprepare_response(claims)
        results = {uid: UnprepareResult(error=entry.error) for uid, entry in response.claims.items()}
        return {c.uid: results.get(c.uid, UnprepareResult(error=NO_ANSWER)) for c in claims}

    def close(self) -> None:
        self.channel.close()


def prepare_result(entry: Any) -> PrepareResult:
    """One ``NodePrepareResourceResponse`` message (either version) as a :class:`PrepareResult`."""
    if entry.error:
        return PrepareResult(error=entry.error)
    return PrepareResult(
        devices=tuple(
            PreparedDevice(
                pool_name=d.pool_name,
                device_name=d.device_name,
                request_names=tuple(d.request_names),
                cdi_device_ids=tuple(d.cdi_device_ids),
                share_id=_share_id(d),
            )
            for d in entry.devices
        )
    )
