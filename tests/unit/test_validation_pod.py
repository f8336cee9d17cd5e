"""The local API server checks a Pod's ``spec.resourceClaims`` as kube-apiserver does (the differential
test in tests/kube compares the two servers; these cases run without them)."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.tools.validation import validate


def pod(*claims: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"resourceClaims": list(claims)}}


CASES = [
    ("template", [{"name": "gpu", "resourceClaimTemplateName": "t"}], []),
    ("claim", [{"name": "gpu", "resourceClaimName": "c"}], []),
    (
        "neither",
        [{"name": "gpu"}],
        [
            'spec.resourceClaims[0]: Invalid value: {"Name":"gpu","ResourceClaimName":null,'
            '"ResourceClaimTemplateName":null}: must specify one of: `resourceClaimName`, `resourceClaimTemplateName`'
        ],
    ),
    (
        "both",
        [{"name": "gpu", "resourceClaimName": "c", "resourceClaimTemplateName": "t"}],
        [
            'spec.resourceClaims[0]: Invalid value: {"Name":"gpu","ResourceClaimName":"c",'
            '"ResourceClaimTemplateName":"t"}: at most one of `resourceClaimName` or `resourceClaimTemplateName` '
            "may be specified"
        ],
    ),
    (
        "duplicate name",
        [{"name": "gpu", "resourceClaimName": "a"}, {"name": "gpu", "resourceClaimName": "b"}],
        ['spec.resourceClaims[1].name: Duplicate value: "gpu"'],
    ),
    (
        "bad template name",
        [{"name": "gpu", "resourceClaimTemplateName": "Not_Valid"}],
        ['spec.resourceClaims[0].resourceClaimTemplateName: Invalid value: "Not_Valid": a lowercase RFC 1123'],
    ),
]


@pytest.mark.parametrize(("claims", "expected"), [(c, e) for _, c, e in CASES], ids=[i for i, _, _ in CASES])
def test_pod_claim_entries_are_validated_as_kube_does(claims: list[dict[str, Any]], expected: list[str]) -> None:
    details = [error.detail() for error in validate("", "v1", "Pod", pod(*claims), None, None)]
    assert len(details) == len(expected), details
    for detail, start in zip(details, expected, strict=True):
        assert detail.startswith(start), detail
