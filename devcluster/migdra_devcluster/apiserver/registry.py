"""The table of resources this server serves: one declarative entry per resource.

Everything else (routing, discovery, OpenAPI, field selectors, known-field pruning, validation,
status-subresource rules) reads this table, so adding a resource is one ``ResourceType(...)`` here.
A field selector is a dotted path into the object; ``metadata.name`` and ``metadata.namespace`` are
served for every resource, as kube-apiserver does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dra_driver.validation import NameRule
from migdra_devcluster.apiserver import namespaces, pods, quantities, secrets

if TYPE_CHECKING:
    from dra_driver.validation import FieldError

Validator = Callable[[str, str, str, dict[str, Any], "dict[str, Any] | None", "str | None"], "list[FieldError]"]
Defaulter = Callable[[dict[str, Any]], None]
GracePeriod = Callable[[Mapping[str, Any], "int | None"], int]

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceType:
    """One served resource, e.g. ``resource.k8s.io/v1 resourceclaims``.

    ``model`` names the official client's model class for the kind; its attribute map is the schema of
    known fields (so unknown fields are found exactly as the 1.37 API defines them).  ``field_selectors``
    maps each extra field label to the dotted path it reads.
    """

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    model: str
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    field_selectors: Mapping[str, str] = field(default_factory=dict)
    """Field labels beyond ``metadata.name``/``metadata.namespace``, each with the dotted path it reads."""
    name_rule: NameRule = "dns-subdomain"
    initial_status: Mapping[str, Any] | None = None
    """With a status subresource: the status every new object starts with (a client's is dropped, as
    kube's create strategies do); ``None`` keeps what the client sent (nodes register their status)."""
    create_defaults: Mapping[str, Any] = field(default_factory=dict)
    """Fields filled in on create when the client left them out (merged beneath the body)."""
    defaulter: Defaulter | None = None
    """kube's ``SetDefaults`` for this kind, applied in place on create and on every write to the main
    resource (kube defaults whatever it decodes, so a PUT that omits a defaulted field gets it back);
    for defaults that need code, such as per-container ones, which ``create_defaults`` cannot express."""
    graceful_delete: GracePeriod | None = None
    """kube's ``CheckGracefulDelete``: the grace period of a delete, given the object and the requested
    ``gracePeriodSeconds``; a positive one marks the object (``deletionTimestamp`` in the future) instead
    of removing it.  ``None``: the kind has no graceful deletion and goes at once (finalizers aside)."""
    delete_returns_object: bool = False
    """Whether DELETE answers with the deleted object (kube's ``ReturnDeletedObject``) or a ``Status``."""
    storage: str | None = None
    """Key of the resource whose storage this one shares (conversions in ``conversion.py``), as
    ``events.k8s.io`` Events share core Events'; ``None``: its own storage."""
    validate: Validator | None = None
    """Validation hook for this kind; ``None`` means ``dra_driver.validation.validate``."""
    tracks_generation: bool = False
    """Whether ``metadata.generation`` is kept (1 on create, +1 on every change outside metadata and
    status), as the kinds whose kube strategy sets it: those with an ``observedGeneration`` to report
    against.  kube leaves it unset on the others (ResourceClaims and their templates among them)."""

    @property
    def group_version(self) -> str:
        """``v1`` for the core group, ``<group>/<version>`` otherwise (the ``apiVersion`` of objects)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """Storage key: ``<plural>.<group>``; stable across versions, unique across groups."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def storage_key(self) -> str:
        """Where the store keeps this resource's objects: its own key, or the shared storage's."""
        return self.storage or self.key

    @property
    def qualified_kind(self) -> str:
        """``ResourceClaim.resource.k8s.io`` / ``Pod``: how kube names a kind in error messages."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def has_status(self) -> bool:
        """Whether ``status`` belongs to the ``/status`` subresource (and main writes leave it alone)."""
        return "status" in self.subresources

    def selectable_fields(self) -> dict[str, str]:
        """Every field label a field selector may use, with the dotted path each reads."""
        return {"metadata.name": "metadata.name", "metadata.namespace": "metadata.namespace", **self.field_selectors}


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string a field selector compares: missing is ``""``, booleans are ``true``/``false``."""
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return ""
        value = value.get(part)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_CORE_EVENT_FIELDS = {
    f"involvedObject.{f}": f"involvedObject.{f}"
    for f in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
} | {
    "reason": "reason",
    "type": "type",
    "source": "source.component",
    "reportingComponent": "reportingComponent",
}
_EVENTS_V1_FIELDS = {
    f"regarding.{f}": f"regarding.{f}"
    for f in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
} | {"reason": "reason", "type": "type", "reportingController": "reportingController"}

RESOURCES: tuple[ResourceType, ...] = (
    ResourceType(
        group="",
        version="v1",
        kind="Namespace",
        plural="namespaces",
        singular="namespace",
        namespaced=False,
        model="V1Namespace",
        short_names=("ns",),
        subresources=("status",),
        field_selectors={"status.phase": "status.phase"},
        name_rule="dns-label",
        initial_status={"phase": "Active"},
        create_defaults={"spec": {"finalizers": ["kubernetes"]}},
        defaulter=namespaces.default_namespace,
    ),
    ResourceType(
        group="",
        version="v1",
        kind="Node",
        plural="nodes",
        singular="node",
        namespaced=False,
        model="V1Node",
        short_names=("no",),
        subresources=("status",),
        field_selectors={"spec.unschedulable": "spec.unschedulable"},
    ),
    ResourceType(
        group="",
        version="v1",
        kind="Pod",
        tracks_generation=True,
        plural="pods",
        singular="pod",
        namespaced=True,
        model="V1Pod",
        delete_returns_object=True,
        short_names=("po",),
        categories=("all",),
        subresources=("status", "binding"),
        initial_status={"phase": "Pending"},
        defaulter=pods.default_pod,
        graceful_delete=pods.graceful_delete_period,
        field_selectors={
            "spec.nodeName": "spec.nodeName",
            "spec.schedulerName": "spec.schedulerName",
            "spec.serviceAccountName": "spec.serviceAccountName",
            "spec.restartPolicy": "spec.restartPolicy",
            "status.phase": "status.phase",
            "status.podIP": "status.podIP",
            "status.nominatedNodeName": "status.nominatedNodeName",
        },
    ),
    ResourceType(
        group="",
        version="v1",
        kind="Event",
        plural="events",
        singular="event",
        namespaced=True,
        model="CoreV1Event",
        short_names=("ev",),
        field_selectors=_CORE_EVENT_FIELDS,
    ),
    ResourceType(
        group="",
        version="v1",
        kind="ServiceAccount",
        plural="serviceaccounts",
        singular="serviceaccount",
        namespaced=True,
        model="V1ServiceAccount",
        delete_returns_object=True,
        short_names=("sa",),
    ),
    ResourceType(
        group="",
        version="v1",
        kind="ConfigMap",
        plural="configmaps",
        singular="configmap",
        namespaced=True,
        model="V1ConfigMap",
        short_names=("cm",),
    ),
    ResourceType(
        group="",
        version="v1",
        kind="Secret",
        plural="secrets",
        singular="secret",
        namespaced=True,
        model="V1Secret",
        defaulter=secrets.default_secret,
        field_selectors={"type": "type"},
    ),
    ResourceType(
        group="events.k8s.io",
        version="v1",
        kind="Event",
        plural="events",
        singular="event",
        namespaced=True,
        model="EventsV1Event",
        short_names=("ev",),
        storage="events",
        field_selectors=_EVENTS_V1_FIELDS,
    ),
    ResourceType(
        group="",
        version="v1",
        kind="Service",
        plural="services",
        singular="service",
        namespaced=True,
        model="V1Service",
        delete_returns_object=True,
        short_names=("svc",),
        categories=("all",),
        subresources=("status",),
        name_rule="dns-label",
        initial_status={"loadBalancer": {}},
    ),
    # What a chart installs beside the driver (helm/migdra): served so that `kubectl apply` checks every
    # rendered object against the 1.37 schema (fieldValidation=Strict); nothing here runs them.
    ResourceType(
        group="apps",
        version="v1",
        kind="DaemonSet",
        tracks_generation=True,
        plural="daemonsets",
        singular="daemonset",
        namespaced=True,
        model="V1DaemonSet",
        short_names=("ds",),
        categories=("all",),
        subresources=("status",),
        initial_status={},
    ),
    ResourceType(
        group="apps",
        version="v1",
        kind="Deployment",
        tracks_generation=True,
        plural="deployments",
        singular="deployment",
        namespaced=True,
        model="V1Deployment",
        short_names=("deploy",),
        categories=("all",),
        subresources=("status",),
        initial_status={},
    ),
    *(
        ResourceType(
            group="rbac.authorization.k8s.io",
            version="v1",
            kind=kind,
            plural=f"{kind.lower()}s",
            singular=kind.lower(),
            namespaced=namespaced,
            model=f"V1{kind}",
            name_rule="path-segment",
        )
        for kind, namespaced in (
            ("ClusterRole", False),
            ("ClusterRoleBinding", False),
            ("Role", True),
            ("RoleBinding", True),
        )
    ),
    ResourceType(
        group="admissionregistration.k8s.io",
        version="v1",
        kind="ValidatingAdmissionPolicy",
        tracks_generation=True,
        plural="validatingadmissionpolicies",
        singular="validatingadmissionpolicy",
        namespaced=False,
        model="V1ValidatingAdmissionPolicy",
        subresources=("status",),
        initial_status={},
    ),
    ResourceType(
        group="admissionregistration.k8s.io",
        version="v1",
        kind="ValidatingAdmissionPolicyBinding",
        tracks_generation=True,
        plural="validatingadmissionpolicybindings",
        singular="validatingadmissionpolicybinding",
        namespaced=False,
        model="V1ValidatingAdmissionPolicyBinding",
    ),
    ResourceType(
        group="networking.k8s.io",
        version="v1",
        kind="NetworkPolicy",
        tracks_generation=True,
        plural="networkpolicies",
        singular="networkpolicy",
        namespaced=True,
        model="V1NetworkPolicy",
        short_names=("netpol",),
    ),
    ResourceType(
        group="coordination.k8s.io",
        version="v1",
        kind="Lease",
        plural="leases",
        singular="lease",
        namespaced=True,
        model="V1Lease",
    ),
    ResourceType(
        group="resource.k8s.io",
        version="v1",
        kind="ResourceSlice",
        tracks_generation=True,
        plural="resourceslices",
        singular="resourceslice",
        namespaced=False,
        model="V1ResourceSlice",
        delete_returns_object=True,
        defaulter=quantities.canonicalize_resource_slice,
        field_selectors={
            "spec.nodeName": "spec.nodeName",
            "spec.driver": "spec.driver",
            "spec.pool.name": "spec.pool.name",
        },
    ),
    ResourceType(
        group="resource.k8s.io",
        version="v1",
        kind="ResourceClaim",
        plural="resourceclaims",
        singular="resourceclaim",
        namespaced=True,
        model="ResourceV1ResourceClaim",
        delete_returns_object=True,
        defaulter=quantities.canonicalize_resource_claim,
        subresources=("status",),
        initial_status={},
    ),
    ResourceType(
        group="resource.k8s.io",
        version="v1",
        kind="ResourceClaimTemplate",
        plural="resourceclaimtemplates",
        singular="resourceclaimtemplate",
        namespaced=True,
        model="V1ResourceClaimTemplate",
        delete_returns_object=True,
        defaulter=quantities.canonicalize_resource_claim_template,
    ),
    ResourceType(
        group="resource.k8s.io",
        version="v1",
        kind="DeviceClass",
        tracks_generation=True,
        plural="deviceclasses",
        singular="deviceclass",
        namespaced=False,
        model="V1DeviceClass",
        delete_returns_object=True,
    ),
    ResourceType(
        group="resource.k8s.io",
        version="v1",
        kind="DeviceTaintRule",
        tracks_generation=True,
        plural="devicetaintrules",
        singular="devicetaintrule",
        namespaced=False,
        model="V1DeviceTaintRule",
        subresources=("status",),
        initial_status={},
    ),
)


class Registry:
    """Look-ups over :data:`RESOURCES` by group-version and plural, and by ``apiVersion`` and kind."""

    def __init__(self, resources: tuple[ResourceType, ...] = RESOURCES) -> None:
        self.resources = resources
        self._by_plural = {(r.group, r.version, r.plural): r for r in resources}
        self._by_kind = {(r.group_version, r.kind): r for r in resources}
        self._by_key = {r.key: r for r in resources}

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        """The resource served at ``/apis/<group>/<version>/<plural>`` (core group: ``group=""``)."""
        return self._by_plural.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        """The resource whose objects have this ``apiVersion`` and ``kind`` (owner references use it)."""
        return self._by_kind.get((api_version, kind))

    def by_key(self, key: str) -> ResourceType:
        """The resource stored under ``key`` (see :attr:`ResourceType.key`)."""
        return self._by_key[key]

    def group_versions(self) -> dict[str, list[str]]:
        """Named groups (not the core group) and their versions, in table order."""
        groups: dict[str, list[str]] = {}
        for r in self.resources:
            if r.group and r.version not in groups.setdefault(r.group, []):
                groups[r.group].append(r.version)
        return groups

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        """The resources of one group-version, in table order."""
        return [r for r in self.resources if r.group == group and r.version == version]

    @property
    def namespaces(self) -> ResourceType:
        """The core ``namespaces`` resource, which namespaced objects depend on."""
        return self._by_key["namespaces"]
