"""Quantities as kube-apiserver stores them: in their canonical spelling.

kube decodes every Quantity into a number and encodes it back with ``Quantity.String()``, so what a
client reads is never the text it sent but the canonical form of its value (``25165824000`` becomes
``25165824k``, ``1000m`` becomes ``1``, ``40Gi`` stays ``40Gi``).  Clients that compare what they wrote
with what they read (migdra's slice publisher does) must see the same here.  A value that is not a
quantity is left as it is, for validation to refuse.  Status writes are not rewritten (claims'
``consumedCapacity``): nothing of migdra reads them back as text.
"""

from __future__ import annotations

from typing import Any

from dra_driver.cel.quantity import Quantity, QuantityError


def canonical_quantity(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return Quantity.parse(value).canonical()
    except QuantityError:
        return value


def _each(parent: Any, key: str) -> list[Any]:
    found = parent.get(key) if isinstance(parent, dict) else None
    return found if isinstance(found, list) else []


def _values(parent: Any, key: str) -> dict[str, Any]:
    found = parent.get(key) if isinstance(parent, dict) else None
    return found if isinstance(found, dict) else {}


def _counters(entry: Any) -> None:
    for counter in _values(entry, "counters").values():
        if isinstance(counter, dict) and "value" in counter:
            counter["value"] = canonical_quantity(counter["value"])


def canonicalize_resource_slice(obj: dict[str, Any]) -> None:
    """Counters, capacities and their request policies of a ResourceSlice, in place."""
    spec = obj.get("spec")
    for counter_set in _each(spec, "sharedCounters"):
        _counters(counter_set)
    for device in _each(spec, "devices"):
        for consumption in _each(device, "consumesCounters"):
            _counters(consumption)
        for capacity in _values(device, "capacity").values():
            if not isinstance(capacity, dict):
                continue
            if "value" in capacity:
                capacity["value"] = canonical_quantity(capacity["value"])
            policy = capacity.get("requestPolicy")
            if isinstance(policy, dict):
                if "default" in policy:
                    policy["default"] = canonical_quantity(policy["default"])
                if isinstance(policy.get("validValues"), list):
                    policy["validValues"] = [canonical_quantity(v) for v in policy["validValues"]]
                valid_range = policy.get("validRange")
                if isinstance(valid_range, dict):
                    for bound in ("min", "max", "step"):
                        if bound in valid_range:
                            valid_range[bound] = canonical_quantity(valid_range[bound])


def _claim_spec(spec: Any) -> None:
    for request in _each(_values(spec, "devices") or {}, "requests"):
        for chosen in [request.get("exactly"), *_each(request, "firstAvailable")] if isinstance(request, dict) else []:
            requests = _values(_values(chosen, "capacity"), "requests")
            for name, value in requests.items():
                requests[name] = canonical_quantity(value)


def canonicalize_resource_claim(obj: dict[str, Any]) -> None:
    """A claim's capacity requests, in place."""
    _claim_spec(obj.get("spec"))


def canonicalize_resource_claim_template(obj: dict[str, Any]) -> None:
    """A template's claim spec's capacity requests, in place."""
    _claim_spec(_values(obj, "spec").get("spec"))
