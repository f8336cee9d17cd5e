"""`migdra plan --workload` with Pods in the files (demo/ holds a template and its Pod in one file): the
Pods say how many of each claim or template the workload uses."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.errors import ConfigurationError
from dra_driver.tools.packing.plan import compute_pod_counts


def pod(name: str, *references: dict[str, str]) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name}, "spec": {"resourceClaims": list(references)}}


def test_a_template_counts_once_per_pod_and_a_claim_once() -> None:
    pods = [
        pod(
            "a", {"name": "gpu", "resourceClaimTemplateName": "mig-1g"}, {"name": "shared", "resourceClaimName": "big"}
        ),
        pod(
            "b", {"name": "gpu", "resourceClaimTemplateName": "mig-1g"}, {"name": "shared", "resourceClaimName": "big"}
        ),
        pod("c", {"name": "gpu", "resourceClaimTemplateName": "mig-3g"}),
    ]
    assert compute_pod_counts(pods, {"mig-1g", "mig-3g", "big", "unused"}) == {"mig-1g": 2, "big": 1, "mig-3g": 1}


def test_a_pod_naming_a_template_not_in_the_workload_is_one_error_naming_both() -> None:
    with pytest.raises(ConfigurationError) as refused:
        compute_pod_counts([pod("trainer", {"name": "gpu", "resourceClaimTemplateName": "mig-7g"})], {"mig-1g"})
    assert str(refused.value) == (
        "Pod/trainer: spec.resourceClaims[0].resourceClaimTemplateName 'mig-7g' is not among the workload's claims "
        "and templates; give its file too"
    )
