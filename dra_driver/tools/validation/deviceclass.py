"""DeviceClass ``spec`` rules (resource.k8s.io/v1), the same on create and update.

Owns: selectors (at most 32, each a bounded CEL expression that compiles), config (at most 32 opaque
entries) and ``extendedResourceName`` (a valid extended resource name when set).
"""

from __future__ import annotations

from dra_driver.jsontypes import JSON
from dra_driver.tools.validation import limits
from dra_driver.tools.validation.cel_selectors import validate_selectors
from dra_driver.tools.validation.errors import FieldError, invalid
from dra_driver.tools.validation.fields import as_object, get_array, get_object, get_string
from dra_driver.tools.validation.lists import validate_list
from dra_driver.tools.validation.names import is_extended_resource_name
from dra_driver.tools.validation.opaque import validate_device_configuration
from dra_driver.tools.validation.paths import ROOT, FieldPath


def validate_device_class(obj: JSON, old: JSON | None) -> list[FieldError]:
    """A DeviceClass on create or update (nothing in its spec is immutable)."""
    del old  # every rule applies to the new object alone
    errors: list[FieldError] = []
    path = ROOT.child("spec")
    spec = get_object(obj, "spec", ROOT, errors) or {}
    selectors = get_array(spec, "selectors", path, errors)
    errors.extend(validate_selectors(selectors, limits.CLASS_MAX_SELECTORS, path.child("selectors")))
    config = get_array(spec, "config", path, errors)
    errors.extend(validate_list(config, limits.CLASS_MAX_CONFIG, _validate_class_config, path.child("config")))
    extended_resource_name = get_string(spec, "extendedResourceName", path, errors)
    if extended_resource_name is not None and not is_extended_resource_name(extended_resource_name):
        errors.append(
            invalid(
                path.child("extendedResourceName"), extended_resource_name, "must be a valid extended resource name"
            )
        )
    return errors


def _validate_class_config(value: object, path: FieldPath) -> list[FieldError]:
    errors: list[FieldError] = []
    config = as_object(value, path, errors) or {}
    return errors + validate_device_configuration(config, path)
