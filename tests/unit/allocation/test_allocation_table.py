"""Kubernetes' structured DRA allocator, as a table: every case is data, the expected outcome exact.

Why a table: ``dra_driver.tools.allocation`` is a port of kube-scheduler's ``incubating`` allocator
(Kubernetes 1.36/1.37, ``k8s.io/dynamic-resource-allocation/structured``).  Its contract is the
scheduler's observable behaviour - which devices a pod's claims get, in which order, with which
config and node selector, and when the attempt is an error instead of "does not fit here".  Each
case pins one rule of that behaviour and says which (``why``); a case is added without code.

A file under ``cases/`` holds::

    defaults:            # optional: node and classes every case of the file starts from
      node: {...}        # a v1 Node
      classes: [...]     # v1 DeviceClasses
    cases:
      - name: unique-kebab-case
        why: the Kubernetes rule the case checks (one line)
        node: {...}                 # optional, overrides defaults.node
        classes: [...]              # optional, overrides defaults.classes
        slices: [...]               # every resource.k8s.io/v1 ResourceSlice of the cluster
        claims: [...]               # the pod's ResourceClaims, allocated together
        allocated_claims: [...]     # claims that already have status.allocation
        features: {without: [DRAAdminAccess]}   # or {exactly: [...]}; default: DEFAULT_FEATURES
        any_order: true             # the outcome cannot depend on pool/slice order: also run shuffled
        xfail: "reason"             # known implementation bug (strict: the case must fail)
        expect:
          results: [...]            # one v1 AllocationResult per claim, exactly
          # or unsatisfiable: true  (allocate returns None)
          # or error: "substring" (or a list of substrings), type: AllocationError | InvalidPoolsError

Top-level keys starting with ``x-`` only carry YAML anchors.  A ``shareID`` is a random UUID, so the
expected data writes ``$uuid``: the runner checks that every actual shareID is a UUID and that they
are pairwise distinct, then compares with the placeholder in its place.

Every call gets deep copies and the originals are compared afterwards: ``allocate`` must not modify
its inputs.  ``type: AllocationError`` also asserts the error is *not* an InvalidPoolsError: only
"invalid resource pools were encountered" may mark a node unschedulable, everything else aborts the
scheduling attempt.
"""

from __future__ import annotations

import copy
import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.errors import MigdraError
from dra_driver.tools.allocation import DEFAULT_FEATURES, AllocationError, InvalidPoolsError, allocate
from tests.sim_objects import claim_views

CASES_DIR = Path(__file__).parent / "cases"
MIN_CASES = 80
SHUFFLE_SEEDS = (1, 7, 42, 2024)
SHARE_ID_PLACEHOLDER = "$uuid"
ALL_FEATURES = frozenset(
    {
        "DRAPartitionableDevices",
        "DRAPrioritizedList",
        "DRAAdminAccess",
        "DRADeviceTaints",
        "DRADeviceBindingConditions",
        "DRAResourceClaimDeviceStatus",
        "DRAConsumableCapacity",
    }
)
_CASE_KEYS = frozenset(
    {
        *("name", "why", "node", "classes", "slices", "claims", "allocated_claims"),
        *("features", "any_order", "xfail", "expect"),
    }
)
_ERROR_TYPES: dict[str, type[Exception]] = {"AllocationError": AllocationError, "InvalidPoolsError": InvalidPoolsError}


@dataclass(frozen=True)
class Case:
    name: str
    why: str
    source: str
    node: dict[str, Any]
    classes: list[dict[str, Any]]
    slices: list[dict[str, Any]]
    claims: list[dict[str, Any]]
    allocated_claims: list[dict[str, Any]]
    features: frozenset[str]
    expect: dict[str, Any]
    any_order: bool
    xfail: str | None


def _features(spec: Mapping[str, Any] | None, where: str) -> frozenset[str]:
    if spec is None:
        return ALL_FEATURES
    assert len(spec) == 1, f"{where}: features needs exactly one of without/exactly"
    assert set(spec) <= {"without", "exactly"}, f"{where}: features needs one of without/exactly"
    names = frozenset(spec.get("without", spec.get("exactly", [])))
    assert names <= ALL_FEATURES, f"{where}: unknown feature gates {sorted(names - ALL_FEATURES)}"
    return ALL_FEATURES - names if "without" in spec else names


def _check_expect(expect: Mapping[str, Any], where: str) -> None:
    kinds = [kind for kind in ("results", "unsatisfiable", "error") if kind in expect]
    assert len(kinds) == 1, f"{where}: expect needs exactly one of results/unsatisfiable/error"
    if "error" in expect:
        assert expect.get("type") in _ERROR_TYPES, f"{where}: error needs type AllocationError or InvalidPoolsError"
        assert set(expect) == {"error", "type"}, f"{where}: unknown keys in expect"
    elif "unsatisfiable" in expect:
        assert expect == {"unsatisfiable": True}, f"{where}: unsatisfiable must be true, alone"
    else:
        assert set(expect) == {"results"}, f"{where}: unknown keys in expect"
        assert isinstance(expect["results"], list), f"{where}: results must be a list"


# libyaml's safe loader where PyYAML has it: the same documents, read six times faster, and every worker of
# every run reads all the cases at collection.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_cases() -> list[Case]:
    cases: list[Case] = []
    for path in sorted(CASES_DIR.glob("*.yaml")):
        document = yaml.load(path.read_text(), Loader=_LOADER)
        assert isinstance(document, dict), f"{path.name}: a mapping with defaults and cases"
        unknown = {key for key in document if key not in ("defaults", "cases") and not key.startswith("x-")}
        assert not unknown, f"{path.name}: unknown top-level keys {sorted(unknown)}"
        defaults = document.get("defaults") or {}
        for raw in document["cases"]:
            where = f"{path.name}: {raw.get('name', '<unnamed>')}"
            assert set(raw) <= _CASE_KEYS, f"{where}: unknown keys {sorted(set(raw) - _CASE_KEYS)}"
            assert raw.get("name"), f"{where}: every case needs a name"
            assert raw.get("why"), f"{where}: every case needs a why"
            _check_expect(raw["expect"], where)
            cases.append(
                Case(
                    name=raw["name"],
                    why=raw["why"],
                    source=path.name,
                    node=raw.get("node", defaults.get("node")),
                    classes=raw.get("classes", defaults.get("classes", [])),
                    slices=raw.get("slices", []),
                    claims=raw["claims"],
                    allocated_claims=raw.get("allocated_claims", []),
                    features=_features(raw.get("features"), where),
                    expect=raw["expect"],
                    any_order=bool(raw.get("any_order", False)),
                    xfail=raw.get("xfail"),
                )
            )
    return cases


CASES = load_cases()


def _param(case: Case) -> Any:
    marks = [pytest.mark.xfail(strict=True, reason=case.xfail)] if case.xfail else []
    return pytest.param(case, id=case.name, marks=marks)


def _run(case: Case, rng: random.Random | None) -> Any:
    """allocate() on deep copies; asserts afterwards that none of the inputs changed."""
    inputs: dict[str, Any] = {
        "claims": case.claims,
        "node": case.node,
        "slices": case.slices,
        "classes": case.classes,
        "allocated_claims": case.allocated_claims,
    }
    given = copy.deepcopy(inputs)
    try:
        # A case without features passes DEFAULT_FEATURES itself, as a caller with the 1.36 defaults would.
        features = DEFAULT_FEATURES if case.features == ALL_FEATURES else set(case.features)
        claims, allocated = claim_views(given.pop("claims")), claim_views(given.pop("allocated_claims"))
        return allocate(claims=claims, allocated_claims=allocated, **given, features=features, rng=rng)
    finally:
        for key, original in inputs.items():
            assert given.get(key, original) == original, f"allocate() modified its input {key!r}"


def _with_share_id_placeholders(results: Any) -> Any:
    """The results with every shareID replaced by the placeholder, after checking they are distinct UUIDs."""
    assert isinstance(results, list), f"expected a list of AllocationResults, got {results!r}"
    results = copy.deepcopy(results)
    seen: list[str] = []
    for allocation in results:
        for device in allocation.get("devices", {}).get("results", []):
            if "shareID" not in device:
                continue
            share_id = device["shareID"]
            assert isinstance(share_id, str), f"shareID {share_id!r} of {device.get('device')} is not a string"
            assert str(uuid.UUID(share_id)) == share_id.lower(), f"shareID {share_id!r} is not a UUID"
            seen.append(share_id)
            device["shareID"] = SHARE_ID_PLACEHOLDER
    assert len(seen) == len(set(seen)), f"shareIDs are not distinct: {seen}"
    return results


def _check_outcome(case: Case, rng: random.Random | None) -> None:
    expect = case.expect
    label = f"{case.name} ({case.source})" + (" shuffled" if rng is not None else "")
    if "error" in expect:
        wanted = _ERROR_TYPES[expect["type"]]
        with pytest.raises(AllocationError) as caught:
            _run(case, rng)
        assert isinstance(caught.value, wanted), f"{label}: {type(caught.value).__name__}: {caught.value}"
        if wanted is AllocationError:
            assert not isinstance(caught.value, InvalidPoolsError), f"{label}: must abort the attempt: {caught.value}"
        fragments = expect["error"] if isinstance(expect["error"], list) else [expect["error"]]
        for fragment in fragments:
            assert fragment.lower() in str(caught.value).lower(), f"{label}: {fragment!r} not in {caught.value}"
        return
    outcome = _run(case, rng)
    if "unsatisfiable" in expect:
        assert outcome is None, f"{label}: expected no allocation, got {outcome!r}"
        return
    assert outcome is not None, f"{label}: expected an allocation, got None"
    assert _with_share_id_placeholders(outcome) == expect["results"], label


@pytest.mark.parametrize("case", [_param(case) for case in CASES])
def test_allocation_case(case: Case) -> None:
    _check_outcome(case, rng=None)


SHUFFLED = [case for case in CASES if case.any_order and "error" not in case.expect]


@pytest.mark.parametrize("seed", SHUFFLE_SEEDS)
@pytest.mark.parametrize("case", [_param(case) for case in SHUFFLED])
def test_allocation_case_in_shuffled_order(case: Case, seed: int) -> None:
    """Cases whose outcome cannot depend on the order of pools and slices keep it when shuffled."""
    _check_outcome(case, rng=random.Random(seed))


def test_case_names_are_unique() -> None:
    names = [case.name for case in CASES]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    assert not duplicates, f"duplicate case names: {duplicates}"


def test_the_table_is_large_enough() -> None:
    """The issue that created the table asks for at least 80 cases; shrinking it is a regression."""
    assert len(CASES) >= MIN_CASES, f"only {len(CASES)} allocation cases"


def test_default_features_are_the_kubernetes_136_defaults() -> None:
    assert frozenset(DEFAULT_FEATURES) == ALL_FEATURES


def test_errors_belong_to_migdra_hierarchy() -> None:
    assert issubclass(InvalidPoolsError, AllocationError)
    assert issubclass(AllocationError, MigdraError)


def _case(name: str) -> Case:
    return next(case for case in CASES if case.name == name)


@pytest.mark.parametrize(
    ("name", "choices"),
    [
        ("pools-sorted-by-name", {"gpu-a", "gpu-b"}),
        ("slices-sorted-by-name-inside-a-pool", {"gpu-from-slice-1", "gpu-from-slice-2"}),
    ],
)
def test_rng_shuffles_pools_and_slices(name: str, choices: set[str]) -> None:
    """With an rng the order of pools and slices is random (as before 1.36), and the same seed repeats itself."""
    case = _case(name)
    first_devices: set[str] = set()
    for seed in range(20):
        outcome = _run(case, random.Random(seed))
        assert outcome == _run(case, random.Random(seed)), f"seed {seed} is not reproducible"
        first_devices.add(outcome[0]["devices"]["results"][0]["device"])
    assert first_devices == choices
