"""Our .proto files are wire-identical to kubelet's (docs/kubelet-grpc.md).

Kubelet never sees our files, only bytes and method paths: a renamed package, a renumbered field or
a changed type breaks the plugin silently.  The tables below are those of docs/kubelet-grpc.md,
written out again independently of protos/ so that an edit to either shows up here.
"""

from __future__ import annotations

import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FieldDescriptor

from dra_driver.kubelet.protos import dra_health_v1alpha1_pb2, dra_v1_pb2, dra_v1beta1_pb2, pluginregistration_v1_pb2

DRA_V1 = "k8s.io.kubelet.pkg.apis.dra.v1"
DRA_V1BETA1 = "k8s.io.kubelet.pkg.apis.dra.v1beta1"

# method path -> (request, response, server streaming)
METHODS = {
    f"/{DRA_V1}.DRAPlugin/NodePrepareResources": (
        f"{DRA_V1}.NodePrepareResourcesRequest", f"{DRA_V1}.NodePrepareResourcesResponse", False,
    ),
    f"/{DRA_V1}.DRAPlugin/NodeUnprepareResources": (
        f"{DRA_V1}.NodeUnprepareResourcesRequest", f"{DRA_V1}.NodeUnprepareResourcesResponse", False,
    ),
    f"/{DRA_V1BETA1}.DRAPlugin/NodePrepareResources": (
        f"{DRA_V1BETA1}.NodePrepareResourcesRequest", f"{DRA_V1BETA1}.NodePrepareResourcesResponse", False,
    ),
    f"/{DRA_V1BETA1}.DRAPlugin/NodeUnprepareResources": (
        f"{DRA_V1BETA1}.NodeUnprepareResourcesRequest", f"{DRA_V1BETA1}.NodeUnprepareResourcesResponse", False,
    ),
    "/pluginregistration.Registration/GetInfo": (
        "pluginregistration.InfoRequest", "pluginregistration.PluginInfo", False,
    ),
    "/pluginregistration.Registration/NotifyRegistrationStatus": (
        "pluginregistration.RegistrationStatus", "pluginregistration.RegistrationStatusResponse", False,
    ),
    "/v1alpha1.DRAResourceHealth/NodeWatchResources": (
        "v1alpha1.NodeWatchResourcesRequest", "v1alpha1.NodeWatchResourcesResponse", True,
    ),
}  # fmt: skip

STRING, BOOL, INT64 = "string", "bool", "int64"
# message -> field -> (number, type, repeated); message-typed fields name the message
DRA_MESSAGES = {
    "NodePrepareResourcesRequest": {"claims": (1, "Claim", True)},
    "NodePrepareResourcesResponse": {"claims": (1, "map<string, NodePrepareResourceResponse>", True)},
    "NodePrepareResourceResponse": {"devices": (1, "Device", True), "error": (2, STRING, False)},
    "Device": {
        "request_names": (1, STRING, True),
        "pool_name": (2, STRING, False),
        "device_name": (3, STRING, False),
        "cdi_device_ids": (4, STRING, True),
    },
    "NodeUnprepareResourcesRequest": {"claims": (1, "Claim", True)},
    "NodeUnprepareResourcesResponse": {"claims": (1, "map<string, NodeUnprepareResourceResponse>", True)},
    "NodeUnprepareResourceResponse": {"error": (1, STRING, False)},
    "Claim": {"namespace": (1, STRING, False), "uid": (2, STRING, False), "name": (3, STRING, False)},
}
REGISTRATION_MESSAGES = {
    "InfoRequest": {},
    "PluginInfo": {
        "type": (1, STRING, False),
        "name": (2, STRING, False),
        "endpoint": (3, STRING, False),
        "supported_versions": (4, STRING, True),
    },
    "RegistrationStatus": {"plugin_registered": (1, BOOL, False), "error": (2, STRING, False)},
    "RegistrationStatusResponse": {},
}
HEALTH_MESSAGES = {
    "NodeWatchResourcesRequest": {},
    "NodeWatchResourcesResponse": {"devices": (1, "DeviceHealth", True)},
    "DeviceIdentifier": {"pool_name": (1, STRING, False), "device_name": (2, STRING, False)},
    "DeviceHealth": {
        "device": (1, "DeviceIdentifier", False),
        "health": (2, "enum HealthStatus", False),
        "last_updated_time": (3, INT64, False),
        "health_check_timeout_seconds": (4, INT64, False),
        "message": (5, STRING, False),
    },
}
_SCALARS = {FieldDescriptor.TYPE_STRING: STRING, FieldDescriptor.TYPE_BOOL: BOOL, FieldDescriptor.TYPE_INT64: INT64}


def _type(field: FieldDescriptor) -> str:
    if field.type == FieldDescriptor.TYPE_ENUM:
        return f"enum {field.enum_type.name}"
    if field.type != FieldDescriptor.TYPE_MESSAGE:
        return _SCALARS[field.type]
    message = field.message_type
    if message.GetOptions().map_entry:
        key, value = message.fields_by_name["key"], message.fields_by_name["value"]
        return f"map<{_type(key)}, {_type(value)}>"
    return message.name


def _fields(module: object, message_name: str) -> dict[str, tuple[int, str, bool]]:
    descriptor = module.DESCRIPTOR.message_types_by_name[message_name]  # type: ignore[attr-defined]
    return {
        f.name: (f.number, _type(f), f.is_repeated)
        for f in descriptor.fields
        if f.name != "share_id"  # v1 only; checked on its own below
    }


def _all_methods() -> dict[str, tuple[str, str, bool]]:
    methods = {}
    for module in (dra_v1_pb2, dra_v1beta1_pb2, pluginregistration_v1_pb2, dra_health_v1alpha1_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                methods[f"/{service.full_name}/{method.name}"] = (
                    method.input_type.full_name,
                    method.output_type.full_name,
                    method.server_streaming,
                )
                assert not method.client_streaming
    return methods


def test_method_paths_and_message_names_are_kubelets() -> None:
    assert _all_methods() == METHODS


@pytest.mark.parametrize(
    ("module", "package", "messages"),
    [
        (dra_v1_pb2, DRA_V1, DRA_MESSAGES),
        (dra_v1beta1_pb2, DRA_V1BETA1, DRA_MESSAGES),
        (pluginregistration_v1_pb2, "pluginregistration", REGISTRATION_MESSAGES),
        (dra_health_v1alpha1_pb2, "v1alpha1", HEALTH_MESSAGES),
    ],
    ids=["dra-v1", "dra-v1beta1", "pluginregistration", "dra-health-v1alpha1"],
)
def test_field_numbers_and_types_are_kubelets(
    module: object, package: str, messages: dict[str, dict[str, tuple[int, str, bool]]]
) -> None:
    descriptor = module.DESCRIPTOR  # type: ignore[attr-defined]
    assert descriptor.package == package
    file_proto = descriptor_pb2.FileDescriptorProto()
    descriptor.CopyToProto(file_proto)
    assert file_proto.syntax == "proto3"  # implicit presence, as kubelet's files
    assert sorted(descriptor.message_types_by_name) == sorted(messages)
    for name, fields in messages.items():
        assert _fields(module, name) == fields, name


def test_share_id_is_an_optional_string_5_on_v1_only() -> None:
    share_id = dra_v1_pb2.Device.DESCRIPTOR.fields_by_name["share_id"]
    assert (share_id.number, share_id.type, share_id.has_presence) == (5, FieldDescriptor.TYPE_STRING, True)
    assert "share_id" not in dra_v1beta1_pb2.Device.DESCRIPTOR.fields_by_name
    assert 5 not in dra_v1beta1_pb2.Device.DESCRIPTOR.fields_by_number


def test_health_status_values_are_kubelets() -> None:
    assert dict(dra_health_v1alpha1_pb2.HealthStatus.items()) == {"UNKNOWN": 0, "HEALTHY": 1, "UNHEALTHY": 2}


def test_v1beta1_bytes_read_as_v1_and_back() -> None:
    """The premise of serving v1beta1 by transcoding to v1 (kubeletplugin.grpc.convert)."""
    request = dra_v1beta1_pb2.NodePrepareResourcesRequest(
        claims=[dra_v1beta1_pb2.Claim(namespace="ns", name="n", uid="u")]
    )
    as_v1 = dra_v1_pb2.NodePrepareResourcesRequest.FromString(request.SerializeToString())
    assert [(c.namespace, c.name, c.uid) for c in as_v1.claims] == [("ns", "n", "u")]
    response = dra_v1_pb2.NodePrepareResourcesResponse()
    response.claims["u"].devices.add(pool_name="p", device_name="d", request_names=["r"], cdi_device_ids=["v/c=x"])
    back = dra_v1beta1_pb2.NodePrepareResourcesResponse.FromString(response.SerializeToString())
    device = back.claims["u"].devices[0]
    assert (device.pool_name, device.device_name, list(device.request_names), list(device.cdi_device_ids)) == (
        "p", "d", ["r"], ["v/c=x"],
    )  # fmt: skip
