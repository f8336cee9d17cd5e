"""Extracting this driver's allocation from a ResourceClaim: UID, driver, pool, configs (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from dra_driver.kubelet.calls import ClaimRef
from kubeletplugin.prepare.claims import (
    AllocatedDevice,
    ResourceClaimView,
    compute_claim_allocation,
    compute_share,
    describe_validation_error,
)
from kubeletplugin.prepare.errors import ClaimMismatchError

DRIVER = "gpu.migdra.io"
NODE = "node-a"
REF = ClaimRef(namespace="team", name="train", uid="uid-1")


def claim(
    results: list[dict[str, Any]] | None, config: list[dict[str, Any]] | None = None, uid: str = "uid-1"
) -> ResourceClaimView:
    status: dict[str, Any] = {}
    if results is not None:
        status["allocation"] = {"devices": {"results": results, "config": config or []}}
    return ResourceClaimView.model_validate(
        {"metadata": {"name": "train", "namespace": "team", "uid": uid, "generation": 3}, "status": status}
    )


def test_uid_mismatch_names_both_uids() -> None:
    with pytest.raises(ClaimMismatchError) as raised:
        compute_claim_allocation(claim([], uid="uid-2"), REF, DRIVER, NODE)
    assert raised.value.describe("team/train") == "claim team/train has UID uid-2, kubelet asked for uid-1"


def test_unallocated_claim_is_an_error() -> None:
    with pytest.raises(ClaimMismatchError, match="not allocated"):
        compute_claim_allocation(claim(None), REF, DRIVER, NODE)


def test_other_drivers_results_are_ignored_and_ours_kept_in_order() -> None:
    allocation = compute_claim_allocation(
        claim(
            [
                {"request": "nic", "driver": "net.example.com", "pool": "elsewhere", "device": "eth0"},
                {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-0-mig-1g10gb-19-0"},
                {"request": "mon", "driver": DRIVER, "pool": NODE, "device": "gpu-1", "adminAccess": True},
            ]
        ),
        REF,
        DRIVER,
        NODE,
    )
    assert allocation.devices == (
        AllocatedDevice("gpu", "gpu-0-mig-1g10gb-19-0", False),
        AllocatedDevice("mon", "gpu-1", True),
    )
    assert allocation.generation == 3


def test_our_result_in_another_pool_is_an_error_naming_it() -> None:
    with pytest.raises(
        ClaimMismatchError, match=r"results\[0\]: device gpu-0 of driver gpu.migdra.io is in pool 'node-b'"
    ):
        compute_claim_allocation(
            claim([{"request": "gpu", "driver": DRIVER, "pool": "node-b", "device": "gpu-0"}]), REF, DRIVER, NODE
        )


def test_only_our_opaque_configs_are_taken_with_their_position() -> None:
    ours = {"apiVersion": f"{DRIVER}/v1alpha1", "kind": "MigDeviceConfig"}
    allocation = compute_claim_allocation(
        claim(
            [],
            [
                {"source": "FromClass", "opaque": {"driver": "net.example.com", "parameters": {"x": 1}}},
                {"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": ours}},
            ],
        ),
        REF,
        DRIVER,
        NODE,
    )
    assert [(c.index, c.source, c.requests, c.parameters) for c in allocation.configs] == [
        (1, "FromClaim", ("gpu",), ours)
    ]


def test_a_claim_migdra_cannot_read_is_described_in_one_line() -> None:
    with pytest.raises(ValidationError) as raised:
        ResourceClaimView.model_validate({"metadata": {"namespace": "team"}, "status": {"devices": [{}]}})
    assert describe_validation_error(raised.value) == "metadata.name: Field required (and 3 more)"


@pytest.mark.parametrize(
    "share_id", ["not-a-uuid", "B67A2CD4-4C46-466C-BA21-803B4B5203DE"], ids=["malformed", "upper-case"]
)
def test_a_share_id_not_in_normalized_form_fails_naming_the_field(share_id: str) -> None:
    """kube-apiserver refuses such an allocation already; the plugin's check is for any other writer."""
    (result,) = claim([{"request": "r", "driver": DRIVER, "pool": NODE, "device": "d", "shareID": share_id}]).results
    with pytest.raises(ClaimMismatchError) as failure:
        compute_share(result, 0, DRIVER)
    assert str(failure.value).startswith(
        f"status.allocation.devices.results[0].shareID: {share_id!r} is not a UUID in normalized form"
    )
