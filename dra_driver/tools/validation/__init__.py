"""Validation of ``resource.k8s.io/v1`` objects as kube-apiserver validates them: dicts in, field errors out.

Its user: ``migdra allocate`` (and ``migdra plan``) refuses a hand-written object the API server would
refuse, naming the field, before the allocator reads it.  tests/kube/test_validation_differential.py holds
it to kube-apiserver's verdicts and field paths.

It mirrors kube-apiserver's ``pkg/apis/resource/validation`` for the rules stated in
``docs/resource-api.md``, with kube's field paths and messages, because kubectl and the Python client
show them to people.  Pure code: no I/O, no HTTP, no Kubernetes client.  CEL selectors are compiled
with migdra's own CEL environment (``dra_driver.tools.cel``, loaded on first use).

Public API::

    validate(group, version, kind, obj, old, subresource) -> list[FieldError]
        Kind rules for ResourceSlice, ResourceClaim (and its ``status``), ResourceClaimTemplate,
        DeviceClass and the ``spec.resourceClaims`` of a core v1 Pod; ``[]`` for anything else.
        ``old`` is None on create, the stored object on update.
        It does not validate ``metadata`` (the server runs ``validate_object_meta`` for every kind);
        the status rules only read ``metadata.deletionTimestamp``.
    validate_object_meta(obj, namespaced, name_rule) -> list[FieldError]
        Generic ``metadata`` rules on create (name/generateName, namespace, labels, annotations).
    FieldError
        ``field``, ``reason``, ``message``, ``value``; ``detail()`` renders like kube's ``field.Error``,
        ``body()`` and ``as_cause()`` give a 422 Status cause.

All errors are returned, in a stable order (kube's order of checks; map keys sorted).

Modules, each with one job: ``errors`` (FieldError and its rendering), ``paths`` (field paths),
``fields`` (typed reads of JSON), ``limits`` (every number), ``names`` (name rules and kube's
messages), ``quantity`` (Quantity syntax), ``lists`` (bounded lists, sets, maps), ``immutability``,
``metadata``, ``nodes`` (node names and selectors), ``taints`` (taints and tolerations),
``cel_selectors`` (length and compilation), ``opaque`` (opaque config and raw JSON), ``network``
(interface addresses), and the kind rules: ``resourceslice``, ``resourceclaim`` (claim and template
spec), ``claimstatus`` (status fields and the allocation/reservation invariants), ``deviceclass``,
``pod`` (a Pod's claim entries).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from dra_driver.jsontypes import JSON
from dra_driver.tools.validation.claimstatus import validate_resource_claim_status
from dra_driver.tools.validation.deviceclass import validate_device_class
from dra_driver.tools.validation.errors import FieldError, Reason
from dra_driver.tools.validation.metadata import NameRule, validate_object_meta
from dra_driver.tools.validation.pod import validate_pod
from dra_driver.tools.validation.resourceclaim import (
    validate_resource_claim,
    validate_resource_claim_template,
)
from dra_driver.tools.validation.resourceslice import validate_resource_slice

__all__ = ["FieldError", "NameRule", "Reason", "validate", "validate_object_meta"]

RESOURCE_GROUP: Final = "resource.k8s.io"
RESOURCE_VERSION: Final = "v1"

KindRule = Callable[[JSON, JSON | None], list[FieldError]]

# (group/version, kind, subresource) -> rules; subresource None is the main resource.
_RULES: Final[Mapping[tuple[str, str, str | None], KindRule]] = {
    (f"{RESOURCE_GROUP}/{RESOURCE_VERSION}", "ResourceSlice", None): validate_resource_slice,
    (f"{RESOURCE_GROUP}/{RESOURCE_VERSION}", "ResourceClaim", None): validate_resource_claim,
    (f"{RESOURCE_GROUP}/{RESOURCE_VERSION}", "ResourceClaim", "status"): validate_resource_claim_status,
    (f"{RESOURCE_GROUP}/{RESOURCE_VERSION}", "ResourceClaimTemplate", None): validate_resource_claim_template,
    (f"{RESOURCE_GROUP}/{RESOURCE_VERSION}", "DeviceClass", None): validate_device_class,
    ("v1", "Pod", None): validate_pod,
}


def validate(
    group: str,
    version: str,
    kind: str,
    obj: JSON,
    old: JSON | None,
    subresource: str | None,
) -> list[FieldError]:
    """Every error in ``obj`` by the rules of its kind (see the module docstring); ``[]`` when it has none."""
    rule = _RULES.get((f"{group}/{version}" if group else version, kind, subresource))
    return [] if rule is None else rule(obj, old)
