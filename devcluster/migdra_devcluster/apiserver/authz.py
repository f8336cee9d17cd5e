"""RBAC authorization, as kube-apiserver's RBAC authorizer decides (opt-in: ``authorization="RBAC"``).

Owns: the attributes of a resource request (the verb from the method, the collection/object path and
``watch``, as kube's ``RequestInfoFactory`` derives them) and the decision from the ClusterRoles,
Roles, ClusterRoleBindings and RoleBindings stored in this server.  A request is allowed when some
binding that names the user (``User``), one of its groups (``Group``; every authenticated user is in
``system:authenticated``) or its ServiceAccount (user ``system:serviceaccount:<namespace>:<name>``)
grants a rule matching verb, API group, resource (``resource/subresource``), and name when the rule
lists ``resourceNames``.  A RoleBinding grants only in its own namespace.  Members of
``system:masters`` are allowed everything, as kube's superuser group.

Why: the Helm chart's least-privilege roles are then exercised by the real plugin and controller
processes (tests/integration/helm), so a missing permission fails a test instead of a cluster.

Deliberately not modelled: aggregated ClusterRoles, non-resource URL rules (discovery, OpenAPI and
``/version`` are open to every authenticated user, as kube's ``system:discovery`` grants), 1.36's
synthetic ``resourceclaims/binding`` and ``resourceclaims/driver`` checks (their rules are checked
statically by the chart's tests), impersonation and the escalation checks on writing roles.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from migdra_devcluster.apiserver.auth import UserInfo
from migdra_devcluster.apiserver.errors import Forbidden
from migdra_devcluster.apiserver.operations import Operations
from migdra_devcluster.apiserver.registry import Registry, ResourceType
from migdra_devcluster.apiserver.selectors import parse_field_selector, parse_label_selector

SUPERUSER_GROUP = "system:masters"
AUTHENTICATED_GROUP = "system:authenticated"
RBAC_GROUP = "rbac.authorization.k8s.io"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


@dataclass(frozen=True)
class RequestAttributes:
    """What RBAC looks at: who, which verb, on what (``namespace`` None for cluster scope)."""

    user: UserInfo
    verb: str
    resource: ResourceType
    subresource: str | None
    namespace: str | None
    name: str | None

    @property
    def resource_name(self) -> str:
        """``resourceclaims/status``: how rules name a subresource."""
        return f"{self.resource.plural}/{self.subresource}" if self.subresource else self.resource.plural

    def refusal(self) -> Forbidden:
        """kube's wording: ``pods "p" is forbidden: User "u" cannot get resource "pods" in API group ""
        in the namespace "default"``."""
        group = self.resource.group
        qualified = f"{self.resource.plural}.{group}" if group else self.resource.plural
        target = f'{qualified} "{self.name}"' if self.name else qualified
        scope = f'in the namespace "{self.namespace}"' if self.namespace else "at the cluster scope"
        return Forbidden(
            f'{target} is forbidden: User "{self.user.name}" cannot {self.verb} resource "{self.resource_name}" '
            f'in API group "{group}" {scope}',
            name=self.name,
            group=group,
            kind=self.resource.plural,
        )


def request_verb(method: str, name: str | None, watch: bool) -> str:
    """The RBAC verb of a resource request: kube's mapping of HTTP methods on collections and objects."""
    if method == "GET":
        if watch:
            return "watch"
        return "get" if name is not None else "list"
    if method == "DELETE" and name is None:
        return "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, method.lower())


def _subject_matches(subject: Mapping[str, Any], user: UserInfo, groups: frozenset[str]) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(name == user.name)
    if kind == "Group":
        return name in groups
    if kind == "ServiceAccount":
        return user.name == f"{SERVICE_ACCOUNT_PREFIX}{subject.get('namespace', '')}:{name}"
    return False


def _rule_matches(rule: Mapping[str, Any], attributes: RequestAttributes) -> bool:
    def listed(key: str, value: str, wildcard: Iterable[str] = ("*",)) -> bool:
        entries = rule.get(key) or []
        return value in entries or any(w in entries for w in wildcard)

    resource_wildcards = ["*"]
    if attributes.subresource:
        resource_wildcards.append(f"*/{attributes.subresource}")
    if not (
        listed("verbs", attributes.verb)
        and listed("apiGroups", attributes.resource.group)
        and listed("resources", attributes.resource_name, resource_wildcards)
    ):
        return False
    names = rule.get("resourceNames") or []
    return not names or (attributes.name is not None and attributes.name in names)


class RbacAuthorizer:
    """Decides each resource request from the RBAC objects stored at that moment."""

    def __init__(self, operations: Operations, registry: Registry) -> None:
        self._operations = operations
        self._kinds = {kind: registry.by_key(f"{kind.lower()}s.{RBAC_GROUP}") for kind in _RBAC_KINDS}
        self._decided: set[tuple[str, str, str, str, bool]] = set()
        self._decided_lock = threading.Lock()

    def decisions(self) -> set[tuple[str, str, str, str, bool]]:
        """Every distinct (user, verb, API group, resource[/subresource], allowed) decided so far: what each
        user actually did, for checking that granted permissions are used (an audit log's summary)."""
        with self._decided_lock:
            return set(self._decided)

    def check(self, attributes: RequestAttributes) -> None:
        """Raise kube's 403 unless some binding grants the request."""
        allowed = self.allows(attributes)
        with self._decided_lock:
            self._decided.add(
                (attributes.user.name, attributes.verb, attributes.resource.group, attributes.resource_name, allowed)
            )
        if not allowed:
            raise attributes.refusal()

    def allows(self, attributes: RequestAttributes) -> bool:
        groups = frozenset((*attributes.user.groups, AUTHENTICATED_GROUP))
        if SUPERUSER_GROUP in groups:
            return True
        return any(_rule_matches(rule, attributes) for rule in self._granted_rules(attributes, groups))

    def _granted_rules(self, attributes: RequestAttributes, groups: frozenset[str]) -> Iterable[Mapping[str, Any]]:
        cluster_roles = {role["metadata"]["name"]: role for role in self._objects("ClusterRole")}
        for binding in self._objects("ClusterRoleBinding"):
            if self._binds(binding, attributes.user, groups) and binding["roleRef"]["kind"] == "ClusterRole":
                yield from (cluster_roles.get(binding["roleRef"]["name"]) or {}).get("rules") or []
        if attributes.namespace is None:
            return
        roles = {role["metadata"]["name"]: role for role in self._objects("Role", attributes.namespace)}
        for binding in self._objects("RoleBinding", attributes.namespace):
            if not self._binds(binding, attributes.user, groups):
                continue
            source = cluster_roles if binding["roleRef"]["kind"] == "ClusterRole" else roles
            yield from (source.get(binding["roleRef"]["name"]) or {}).get("rules") or []

    @staticmethod
    def _binds(binding: Mapping[str, Any], user: UserInfo, groups: frozenset[str]) -> bool:
        return any(_subject_matches(subject, user, groups) for subject in binding.get("subjects") or [])

    def _objects(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        resource = self._kinds[kind]
        listing = self._operations.list_objects(
            resource, namespace, parse_label_selector(""), parse_field_selector("", resource)
        )
        items: list[dict[str, Any]] = listing["items"]
        return items


_RBAC_KINDS = ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
