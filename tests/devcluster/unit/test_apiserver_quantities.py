"""The local API server stores quantities in kube's canonical spelling (kube-apiserver re-encodes every
Quantity it decodes), and leaves a value that is no quantity for validation to refuse."""

from __future__ import annotations

from typing import Any

import pytest

from migdra_devcluster.apiserver.quantities import (
    canonicalize_resource_claim_template,
    canonicalize_resource_slice,
)


@pytest.mark.parametrize(
    ("sent", "stored"),
    [("25165824000", "25165824k"), ("1000m", "1"), ("40Gi", "40Gi"), ("1024Mi", "1Gi"), ("7", "7"), ("x1", "x1")],
    ids=["decimal", "milli", "binary-kept", "binary-up", "plain", "not-a-quantity"],
)
def test_slice_quantities_are_stored_canonically(sent: str, stored: str) -> None:
    obj: dict[str, Any] = {
        "spec": {
            "sharedCounters": [{"name": "c", "counters": {"memory": {"value": sent}}}],
            "devices": [
                {
                    "name": "d",
                    "capacity": {
                        "memory": {
                            "value": sent,
                            "requestPolicy": {"default": sent, "validValues": [sent], "validRange": {"min": sent}},
                        }
                    },
                    "consumesCounters": [{"counterSet": "c", "counters": {"memory": {"value": sent}}}],
                }
            ],
        }
    }
    canonicalize_resource_slice(obj)
    device = obj["spec"]["devices"][0]
    policy = device["capacity"]["memory"]["requestPolicy"]
    assert obj["spec"]["sharedCounters"][0]["counters"]["memory"]["value"] == stored
    assert device["capacity"]["memory"]["value"] == stored
    assert device["consumesCounters"][0]["counters"]["memory"]["value"] == stored
    assert (policy["default"], policy["validValues"], policy["validRange"]["min"]) == (stored, [stored], stored)


def test_template_capacity_requests_are_stored_canonically() -> None:
    obj: dict[str, Any] = {
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "a", "exactly": {"capacity": {"requests": {"computeSlices": "1000m"}}}},
                        {
                            "name": "b",
                            "firstAvailable": [{"name": "s", "capacity": {"requests": {"memory": "2048Mi"}}}],
                        },
                    ]
                }
            }
        }
    }
    canonicalize_resource_claim_template(obj)
    requests = obj["spec"]["spec"]["devices"]["requests"]
    assert requests[0]["exactly"]["capacity"]["requests"] == {"computeSlices": "1"}
    assert requests[1]["firstAvailable"][0]["capacity"]["requests"] == {"memory": "2Gi"}
