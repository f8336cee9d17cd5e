"""Field tables of the Kubernetes messages whose protobuf request bodies this server reads.

kubectl's ``create namespace|configmap|secret|serviceaccount|role|clusterrole|rolebinding|
clusterrolebinding`` build their object with client-go's typed clients, which send it as
``application/vnd.kubernetes.protobuf``.  To read those bodies, each message is described here by its
field numbers, the JSON name of each field and how the Go type behind it serializes to JSON.

The numbers come from the public ``generated.proto`` files of the Kubernetes API (k8s.io/api and
k8s.io/apimachinery, v0.36; field numbers never change between releases):
``apimachinery/pkg/apis/meta/v1/generated.proto`` (ObjectMeta, OwnerReference, Time, LabelSelector),
``api/core/v1/generated.proto`` (Namespace, ConfigMap, Secret, ServiceAccount and their parts) and
``api/rbac/v1/generated.proto`` (Role, ClusterRole, RoleBinding, ClusterRoleBinding and their parts);
the envelope, ``runtime.Unknown``, is read in ``protobuf_body.py``.  Only these messages are
described; a kind without a table is refused with 415, as kube-apiserver refuses protobuf for custom
resources.  ``ObjectMeta.managedFields`` (17) is left out on purpose: this server keeps none.

This module holds data only: no decoding, no HTTP.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

FieldType = Literal["string", "bytes", "int", "bool", "time", "message", "string-map", "bytes-map"]


@dataclass(frozen=True)
class Field:
    """One field of a message: its JSON name, its type, and whether a zero value is still written.

    ``keep_zero``: Go serializes the field even when it is zero, because it is a pointer (``*bool``,
    ``*int64``: a ``false`` that was set is not the same as unset) or its JSON tag has no
    ``omitempty``.  Other zero scalars are dropped, as Go's JSON encoder drops them, so a decoded body
    reads exactly like the JSON kubectl would have sent.
    """

    name: str
    type: FieldType
    message: str = ""
    """For ``message`` fields: the table the embedded message is read with."""
    repeated: bool = False
    keep_zero: bool = False


def _string(name: str, *, keep_zero: bool = False) -> Field:
    return Field(name, "string", keep_zero=keep_zero)


def _strings(name: str) -> Field:
    return Field(name, "string", repeated=True)


def _message(name: str, message: str, *, repeated: bool = False) -> Field:
    return Field(name, "message", message=message, repeated=repeated)


Message = Mapping[int, Field]

_OBJECT_META: Message = {
    1: _string("name"),
    2: _string("generateName"),
    3: _string("namespace"),
    4: _string("selfLink"),
    5: _string("uid"),
    6: _string("resourceVersion"),
    7: Field("generation", "int"),
    8: Field("creationTimestamp", "time"),
    9: Field("deletionTimestamp", "time"),
    10: Field("deletionGracePeriodSeconds", "int", keep_zero=True),
    11: Field("labels", "string-map"),
    12: Field("annotations", "string-map"),
    13: _message("ownerReferences", "OwnerReference", repeated=True),
    14: _strings("finalizers"),
}
_ROLE_BINDING: Message = {
    1: _message("metadata", "ObjectMeta"),
    2: _message("subjects", "Subject", repeated=True),
    3: _message("roleRef", "RoleRef"),
}

MESSAGES: Mapping[str, Message] = {
    "ObjectMeta": _OBJECT_META,
    "OwnerReference": {
        1: _string("kind", keep_zero=True),
        3: _string("name", keep_zero=True),
        4: _string("uid", keep_zero=True),
        5: _string("apiVersion", keep_zero=True),
        6: Field("controller", "bool", keep_zero=True),
        7: Field("blockOwnerDeletion", "bool", keep_zero=True),
    },
    "LabelSelector": {
        1: Field("matchLabels", "string-map"),
        2: _message("matchExpressions", "LabelSelectorRequirement", repeated=True),
    },
    "LabelSelectorRequirement": {
        1: _string("key", keep_zero=True),
        2: _string("operator", keep_zero=True),
        3: _strings("values"),
    },
    # core/v1
    "Namespace": {
        1: _message("metadata", "ObjectMeta"),
        2: _message("spec", "NamespaceSpec"),
        3: _message("status", "NamespaceStatus"),
    },
    "NamespaceSpec": {1: _strings("finalizers")},
    "NamespaceStatus": {1: _string("phase"), 2: _message("conditions", "NamespaceCondition", repeated=True)},
    "NamespaceCondition": {
        1: _string("type", keep_zero=True),
        2: _string("status", keep_zero=True),
        4: Field("lastTransitionTime", "time"),
        5: _string("reason"),
        6: _string("message"),
    },
    "ConfigMap": {
        1: _message("metadata", "ObjectMeta"),
        2: Field("data", "string-map"),
        3: Field("binaryData", "bytes-map"),
        4: Field("immutable", "bool", keep_zero=True),
    },
    "Secret": {
        1: _message("metadata", "ObjectMeta"),
        2: Field("data", "bytes-map"),
        3: _string("type"),
        4: Field("stringData", "string-map"),
        5: Field("immutable", "bool", keep_zero=True),
    },
    "ServiceAccount": {
        1: _message("metadata", "ObjectMeta"),
        2: _message("secrets", "ObjectReference", repeated=True),
        3: _message("imagePullSecrets", "LocalObjectReference", repeated=True),
        4: Field("automountServiceAccountToken", "bool", keep_zero=True),
    },
    "ObjectReference": {
        1: _string("kind"),
        2: _string("namespace"),
        3: _string("name"),
        4: _string("uid"),
        5: _string("apiVersion"),
        6: _string("resourceVersion"),
        7: _string("fieldPath"),
    },
    "LocalObjectReference": {1: _string("name")},
    # rbac/v1
    "Role": {1: _message("metadata", "ObjectMeta"), 2: _message("rules", "PolicyRule", repeated=True)},
    "ClusterRole": {
        1: _message("metadata", "ObjectMeta"),
        2: _message("rules", "PolicyRule", repeated=True),
        3: _message("aggregationRule", "AggregationRule"),
    },
    "PolicyRule": {
        1: _strings("verbs"),
        2: _strings("apiGroups"),
        3: _strings("resources"),
        4: _strings("resourceNames"),
        5: _strings("nonResourceURLs"),
    },
    "AggregationRule": {1: _message("clusterRoleSelectors", "LabelSelector", repeated=True)},
    "RoleBinding": _ROLE_BINDING,
    "ClusterRoleBinding": _ROLE_BINDING,
    "Subject": {
        1: _string("kind", keep_zero=True),
        2: _string("apiGroup"),
        3: _string("name", keep_zero=True),
        4: _string("namespace"),
    },
    "RoleRef": {
        1: _string("apiGroup", keep_zero=True),
        2: _string("kind", keep_zero=True),
        3: _string("name", keep_zero=True),
    },
}

KIND_MESSAGES: Mapping[tuple[str, str], str] = {
    ("v1", "Namespace"): "Namespace",
    ("v1", "ConfigMap"): "ConfigMap",
    ("v1", "Secret"): "Secret",
    ("v1", "ServiceAccount"): "ServiceAccount",
    **{
        ("rbac.authorization.k8s.io/v1", kind): kind
        for kind in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
    },
}
"""``(apiVersion, kind)`` → the message its protobuf body is read with: the kinds decoded."""
