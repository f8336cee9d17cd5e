"""The shipped MIG catalog: loads, covers the supported GPUs, and states recorded facts correctly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dra_driver.mig import Architecture, Placement, load_catalog

REPO = Path(__file__).resolve().parents[2]
SUPPORTED = [
    "A30",
    "A100-SXM4-40GB",
    "A100-SXM4-80GB",
    "H100-SXM5-80GB",
    "H100-NVL",
    "H200",
    "GH200-96GB",
    "B200",
    "RTX-PRO-6000-Blackwell-Server-Edition",
]


def test_catalog_covers_every_supported_gpu_model() -> None:
    assert sorted(load_catalog().gpus) == sorted(SUPPORTED)


def test_catalog_is_loaded_once_per_process() -> None:
    assert load_catalog() is load_catalog()


def test_without_libyaml_the_catalog_is_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """The C loader is only a speed-up: where PyYAML lacks libyaml, the pure-Python one reads the same."""
    as_loaded_here = load_catalog.__wrapped__()  # uncached: loaded now, with libyaml where present
    monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    assert load_catalog.__wrapped__() == as_loaded_here


@pytest.mark.parametrize("key", SUPPORTED)
def test_every_profile_is_internally_consistent(key: str) -> None:
    gpu = load_catalog().model(key)
    for profile in gpu.gpu_instance_profiles:
        assert profile.default_compute_instance.multiprocessor_count == profile.multiprocessor_count, (
            f"{key} {profile.name}: the default CI must deliver every SM of the GI"
        )
        assert all(p.end <= gpu.memory_slices for p in profile.placements)
        assert profile.instance_count <= len(profile.placements)
        for ci in profile.compute_instance_profiles:
            assert all(p.end <= profile.slice_count for p in ci.placements), f"{key} {profile.name} {ci.name}"


@pytest.mark.parametrize(
    ("key", "name", "profile_id", "index", "sms", "starts", "size"),
    [
        ("H100-SXM5-80GB", "1g.20gb", 15, 9, 26, {0, 2, 4, 6}, 2),
        ("H100-SXM5-80GB", "1g.10gb", 19, 0, 16, set(range(7)), 1),
        ("H100-SXM5-80GB", "7g.80gb", 0, 4, 132, {0}, 8),
        ("A100-SXM4-40GB", "3g.20gb", 9, 2, 42, {0, 4}, 4),
        ("A100-SXM4-40GB", "1g.5gb", 19, 0, 14, set(range(7)), 1),
        ("A30", "1g.6gb", 14, 0, 14, {0, 1, 2, 3}, 1),
        ("A30", "4g.24gb", 0, 3, 56, {0}, 4),
        ("RTX-PRO-6000-Blackwell-Server-Edition", "2g.48gb", 5, 1, 94, {0, 6}, 6),
    ],
)
def test_recorded_profile_facts(
    key: str, name: str, profile_id: int, index: int, sms: int, starts: set[int], size: int
) -> None:
    profile = load_catalog().model(key).profile_by_name(name)
    assert (profile.profile_id, profile.nvml_profile_index, profile.multiprocessor_count) == (profile_id, index, sms)
    assert {p.start for p in profile.placements} == starts
    assert {p.size for p in profile.placements} == {size}


def test_a30_has_four_memory_slices_and_ampere_needs_a_reset() -> None:
    a30 = load_catalog().model("A30")
    assert a30.memory_slices == 4
    assert a30.architecture is Architecture.AMPERE
    assert a30.mig_mode_change_requires_reset
    assert not load_catalog().model("H100").mig_mode_change_requires_reset


def test_hopper_double_memory_1g_defaults_to_ci_profile_7() -> None:
    profile = load_catalog().model("H100-SXM5-80GB").profile_by_name("1g.20gb")
    assert profile.default_ci_profile_index == 7
    assert profile.compute_instance_profile(7).multiprocessor_count == 26
    assert profile.compute_instance_profile(0).multiprocessor_count == 16


@pytest.mark.parametrize(
    ("key", "name", "start", "expected_id"),
    [
        ("H100-SXM5-80GB", "1g.10gb", 6, 13),
        ("H100-SXM5-80GB", "1g.10gb", 0, 7),
        ("H100-SXM5-80GB", "2g.20gb", 4, 5),
        ("H100-SXM5-80GB", "3g.40gb", 4, 2),
        ("H100-SXM5-80GB", "7g.80gb", 0, 0),
        ("A30", "1g.6gb", 3, 6),
        ("A30", "2g.12gb", 2, 2),
        ("RTX-PRO-6000-Blackwell-Server-Edition", "1g.24gb", 9, 6),
    ],
)
def test_gpu_instance_id_rule(key: str, name: str, start: int, expected_id: int) -> None:
    gpu = load_catalog().model(key)
    placement = gpu.profile_by_name(name).placement_at(start)
    assert placement is not None
    assert gpu.gpu_instance_id(placement) == expected_id


def test_aliases_and_lookups() -> None:
    catalog = load_catalog()
    assert catalog.model("h100").key == "H100-SXM5-80GB"
    assert catalog.model("A30-24GB").key == "A30"
    assert catalog.by_nvml_name("A100-SXM4-40GB") is catalog.model("A100-SXM4-40GB")  # R450 name
    assert catalog.by_pci_device_id(0x233010DE) is catalog.model("H100-SXM5-80GB")
    with pytest.raises(KeyError, match="known models"):
        catalog.model("V100")


def test_an_alias_of_several_models_lists_them_and_a_typo_gets_the_closest_name() -> None:
    catalog = load_catalog()
    assert catalog.model("a100-40gb").key == "A100-SXM4-40GB"
    with pytest.raises(KeyError, match="ambiguous GPU model 'A100': A100-SXM4-40GB or A100-SXM4-80GB"):
        catalog.model("A100")
    with pytest.raises(KeyError, match=r"unknown GPU model 'H100-SXM5-80G'; did you mean H100-SXM5-80GB\?"):
        catalog.model("H100-SXM5-80G")


def test_uncertain_numbers_are_marked() -> None:
    b200 = load_catalog().model("B200")
    assert "sm_total" in b200.uncertain
    assert "multiprocessor_count" in b200.profile_by_name("3g.90gb").uncertain
    assert "ESTIMATE" in b200.profile_by_name("7g.180gb").uncertain["memory_size_mb"]


def test_every_source_reference_resolves() -> None:
    catalog = load_catalog()
    for gpu in catalog.gpus.values():
        for profile in gpu.gpu_instance_profiles:
            for source in profile.sources:
                assert source in catalog.sources or " " in source, f"{gpu.key} {profile.name}: unknown source {source}"


def test_placement_overlap() -> None:
    assert Placement(start=0, size=4).overlaps(Placement(start=3, size=1))
    assert not Placement(start=0, size=4).overlaps(Placement(start=4, size=4))


def test_shipped_catalog_is_fresh_against_the_researched_table() -> None:
    """hack/data/mig-profiles.yaml is in the repository, so the check always runs."""
    result = subprocess.run(
        [sys.executable, str(REPO / "hack" / "gen_mig_catalog.py"), "--check"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
