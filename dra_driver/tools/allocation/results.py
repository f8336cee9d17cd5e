"""Turn a found solution into ``resource.k8s.io/v1`` AllocationResult dicts, as ``Allocate`` does.

Per claim: ``devices.results`` in allocation order; ``devices.config`` with each used class's configs
once (``FromClass``, listing the requests they apply to) and then the claim's own configs, each once
per allocated request it applies to (``FromClaim``), where an entry covering every request drops
``requests`` (1.37's rule; 1.36 keeps them, docs/allocation.md);
``nodeSelector``: the node's name when any device is local to it (or binds to it), else the union of
the slices' selectors, else none.  Everything is copied: the caller may change the result freely.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from dra_driver.jsontypes import JSON
from dra_driver.resourceclaim import DeviceClaimConfiguration, ResourceClaimView
from dra_driver.tools.allocation.devices import device_fields
from dra_driver.tools.allocation.errors import AllocationError
from dra_driver.tools.allocation.features import Features
from dra_driver.tools.allocation.pools import spec_of
from dra_driver.tools.allocation.search import DeviceResult, Search


def build_results(search: Search, node_name: str, features: Features) -> list[dict[str, Any]]:
    return [
        _allocation(search, claim_index, claim, node_name, features) for claim_index, claim in enumerate(search.claims)
    ]


def _allocation(
    search: Search, claim_index: int, claim: ResourceClaimView, node_name: str, features: Features
) -> dict[str, Any]:
    devices: dict[str, Any] = {"results": [_result(device, features) for device in search.results[claim_index]]}
    config = _config(search, claim_index, claim)
    if config:
        devices["config"] = config
    allocation: dict[str, Any] = {"devices": devices}
    selector = _node_selector(search.results[claim_index], node_name)
    if selector is not None:
        allocation["nodeSelector"] = selector
    return allocation


def _result(device: DeviceResult, features: Features) -> dict[str, Any]:
    driver, pool, name = device.candidate.id
    result: dict[str, Any] = {"request": device.request_name, "driver": driver, "pool": pool, "device": name}
    if device.admin_access:
        result["adminAccess"] = True
    if device.spec.tolerations:
        result["tolerations"] = copy.deepcopy(list(device.spec.tolerations))
    if features.binding_and_status:
        facts = device.candidate.facts
        if facts.binding_conditions:
            result["bindingConditions"] = list(facts.binding_conditions)
        if facts.binding_failure_conditions:
            result["bindingFailureConditions"] = list(facts.binding_failure_conditions)
    if device.share_id is not None:
        result["shareID"] = device.share_id
    if device.consumed_capacity:
        result["consumedCapacity"] = {name: amount.canonical() for name, amount in device.consumed_capacity.items()}
    return result


def _selected_names(search: Search, claim_index: int, claim: ResourceClaimView) -> list[tuple[str, str | None]]:
    """Per request: (request name, the chosen ``request/sub-request`` name or None)."""
    names: list[tuple[str, str | None]] = []
    for request_index, request in enumerate(claim.spec.devices.requests):
        data = search.request_data[(claim_index, request_index, 0)]
        if data.parent is None:
            names.append((request.name, None))
        else:
            chosen = search.request_data[(claim_index, request_index, data.selected_sub_request)]
            names.append((data.parent.name, chosen.request_name))
    return names


def _config(search: Search, claim_index: int, claim: ResourceClaimView) -> list[dict[str, Any]]:
    config: list[dict[str, Any]] = []
    class_ranges: dict[str, tuple[int, int]] = {}
    for request_index in range(len(claim.spec.devices.requests)):
        data = search.request_data[(claim_index, request_index, 0)]
        if data.parent is not None:
            data = search.request_data[(claim_index, request_index, data.selected_sub_request)]
        if data.device_class is None:
            continue
        class_name = str((data.device_class.get("metadata") or {}).get("name") or "")
        known = class_ranges.get(class_name)
        if known is not None:
            for index in range(*known):
                config[index]["requests"].append(data.request_name)
            continue
        first = len(config)
        for entry in (data.device_class.get("spec") or {}).get("config") or ():
            config.append({"source": "FromClass", "requests": [data.request_name], **_configuration(entry)})
        class_ranges[class_name] = (first, len(config))

    selected = _selected_names(search, claim_index, claim)
    for claim_entry in claim.spec.devices.config:
        requests = list(claim_entry.requests)
        configuration = _claim_configuration(claim_entry)
        if not requests:
            config.append({"source": "FromClaim", **configuration})
            continue
        # Once per request it names (by name or chosen sub-request), not once: kube-scheduler's loop
        # appends per matching request, so an entry naming two allocated requests is listed twice.
        for request_name, sub_name in selected:
            if request_name in requests or (sub_name is not None and sub_name in requests):
                config.append({"source": "FromClaim", "requests": list(requests), **copy.deepcopy(configuration)})

    for entry in config:
        covered = entry.get("requests")
        if covered and all(
            request_name in covered or (sub_name is not None and sub_name in covered)
            for request_name, sub_name in selected
        ):
            del entry["requests"]
    return config


def _configuration(entry: JSON) -> dict[str, Any]:
    """The ``DeviceConfiguration`` part of a class's config entry (``opaque``), copied."""
    return {key: copy.deepcopy(value) for key, value in entry.items() if key not in ("requests", "source")}


def _claim_configuration(entry: DeviceClaimConfiguration) -> dict[str, Any]:
    """The ``DeviceConfiguration`` part of a claim's config entry (``opaque``), copied."""
    if entry.opaque is None:
        return {}
    opaque: dict[str, Any] = {"driver": entry.opaque.driver}
    if entry.opaque.parameters is not None:
        opaque["parameters"] = copy.deepcopy(entry.opaque.parameters)
    return {"opaque": opaque}


def _node_selector(results: Sequence[DeviceResult], node_name: str) -> dict[str, Any] | None:
    expressions: list[JSON] = []
    fields: list[JSON] = []
    for device in results:
        spec = spec_of(device.candidate.slice)
        owner = device_fields(device.candidate.device) if spec.get("perDeviceNodeSelection") else spec
        if owner.get("nodeName") or device.candidate.facts.binds_to_node:
            return {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
                ]
            }
        selector = owner.get("nodeSelector")
        if selector is None:
            continue
        terms = selector.get("nodeSelectorTerms") or []
        if len(terms) > 1:
            raise AllocationError(f"unsupported ResourceSlice.NodeSelector with {len(terms)} terms")
        if terms:
            _add_new(terms[0].get("matchFields") or [], fields)
            _add_new(terms[0].get("matchExpressions") or [], expressions)
    if not expressions and not fields:
        return None
    term: dict[str, Any] = {}
    if expressions:
        term["matchExpressions"] = copy.deepcopy(expressions)
    if fields:
        term["matchFields"] = copy.deepcopy(fields)
    return {"nodeSelectorTerms": [term]}


def _add_new(requirements: Sequence[JSON], into: list[JSON]) -> None:
    for requirement in requirements:
        values = set(requirement.get("values") or ())
        if not any(
            existing.get("key") == requirement.get("key")
            and existing.get("operator") == requirement.get("operator")
            and set(existing.get("values") or ()) == values
            for existing in into
        ):
            into.append(requirement)
