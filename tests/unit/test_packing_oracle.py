"""The repacking oracle: exact, checked by hand on known MIG facts and against independent brute force.

The brute force here shares nothing with the oracle but the catalog: it assigns every demanded instance
to a (GPU, profile, placement) directly and checks the driver's rule on each GPU -- no overlapping
placements, at most ``instance_count`` per profile, every resource field summed within the largest
profile's amount -- from the catalog's raw fields.
"""

from __future__ import annotations

import contextlib
import itertools
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dra_driver.mig.catalog import RESOURCE_FIELDS, GpuInstanceProfile, load_catalog
from dra_driver.tools.packing import oracle as oracle_module
from dra_driver.tools.packing.oracle import RepackingOracle, RequestType, profile_loadings

H100 = "H100-SXM5-80GB"
A30 = "A30"
A100 = "A100-SXM4-40GB"
RTX = "RTX-PRO-6000-Blackwell-Server-Edition"


def kind(name: str, **profiles: set[str]) -> RequestType:
    """A request type; keyword names are model keys with ``-`` written as ``_``."""
    return RequestType(name, {model.replace("_", "-"): frozenset(names) for model, names in profiles.items()})


def one_profile_types(model: str, *profiles: str) -> list[RequestType]:
    """One request type per profile, named after it."""
    return [RequestType(p, {model: frozenset({p})}) for p in profiles]


# ---------------------------------------------------------------------------------------------------
# The independent brute force


def brute_feasible(gpus: Sequence[str], types: Sequence[RequestType], demand: Sequence[int]) -> bool:
    """Try every assignment of the demanded instances to (GPU, accepted profile, placement).

    Each GPU keeps its free memory slices, its instances per profile and what it has left of each
    resource (the largest profile's amount to start with: that one owns every engine); an instance
    goes where its slices are free, its profile is under ``instance_count`` and every amount fits.
    Instances of one type are interchangeable, so their options are taken in increasing order (two of
    them can never share an option: same GPU, same placement).
    """
    catalog = load_catalog()
    models = [catalog.model(g) for g in gpus]
    options: list[list[tuple[int, GpuInstanceProfile, frozenset[int], tuple[int, ...]]]] = []
    for request in types:
        accepted = {catalog.model(k).key: names for k, names in request.profiles.items()}
        options.append(
            [
                (index, profile, frozenset(placement.slices()), tuple(getattr(profile, f) for f in RESOURCE_FIELDS))
                for index, model in enumerate(models)
                for profile in model.gpu_instance_profiles
                if profile.name in accepted.get(model.key, frozenset())
                for placement in profile.placements
            ]
        )
    free = [set(range(model.memory_slices)) for model in models]
    counts: list[dict[str, int]] = [dict.fromkeys((p.name for p in model.gpu_instance_profiles), 0) for model in models]
    left = [[max(getattr(p, f) for p in model.gpu_instance_profiles) for f in RESOURCE_FIELDS] for model in models]
    instances = [t for t, count in enumerate(demand) for _ in range(count)]

    def place(position: int, first_option: int) -> bool:
        if position == len(instances):
            return True
        t = instances[position]
        same_next = position + 1 < len(instances) and instances[position + 1] == t
        for o in range(first_option, len(options[t])):
            index, profile, slices, amounts = options[t][o]
            if not slices <= free[index] or counts[index][profile.name] >= profile.instance_count:
                continue
            if any(a > rest for a, rest in zip(amounts, left[index], strict=True)):
                continue
            free[index] -= slices
            counts[index][profile.name] += 1
            left[index] = [rest - a for rest, a in zip(left[index], amounts, strict=True)]
            fits = place(position + 1, o + 1 if same_next else 0)
            free[index] |= slices
            counts[index][profile.name] -= 1
            left[index] = [rest + a for rest, a in zip(left[index], amounts, strict=True)]
            if fits:
                return True
        return False

    return place(0, 0)


def demands(width: int, most: int) -> list[tuple[int, ...]]:
    """Every demand vector of ``width`` types with at most ``most`` instances in all."""
    return [d for d in itertools.product(range(most + 1), repeat=width) if sum(d) <= most]


def named(types: Sequence[RequestType], vector: Sequence[int]) -> dict[str, int]:
    return {t.name: count for t, count in zip(types, vector, strict=True)}


def _worst_order(children: Iterable[tuple[int, ...]], *_: object) -> list[tuple[int, ...]]:
    """Successors with the most demand left first: the search must stay exact in any order."""
    return sorted(children, key=sum, reverse=True)


def _lying_lp(columns: object, capacities: object, remaining: tuple[int, ...]) -> tuple[float, ...]:
    """An LP that claims every state infeasible (all duals 1): only its exactly checked certificates may count."""
    return (1.0,) * len(remaining)


# The search has regimes that a small case never reaches by itself: the LP-guided search (with the
# certificates it keeps as bounds) past the plain search's budget, a memo cleared when it grows too
# big, successors tried in the worst order, and an LP that lies.  Every comparison runs in each of
# them, and each must give the right answers.
SEARCH_MODES: dict[str, dict[str, object]] = {
    "as-shipped": {},
    "lp-everywhere": {"_PLAIN_BUDGET": 0, "_WITNESS_BUDGET": 0},
    "forgetful": {"_MEMO_LIMIT": 3},
    "worst-order": {"_try_order": _worst_order, "_PLAIN_BUDGET": 0, "_WITNESS_BUDGET": 0},
    "lying-lp": {"_solve_cover": _lying_lp, "_PLAIN_BUDGET": 0, "_WITNESS_BUDGET": 0},
}


@contextlib.contextmanager
def search_mode(mode: str) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in SEARCH_MODES[mode].items():
            patch.setattr(oracle_module, name, value)
        yield


def wrong_answers(
    gpus: Sequence[str], types: Sequence[RequestType], expected: Mapping[tuple[int, ...], bool]
) -> dict[str, list[tuple[tuple[int, ...], bool]]]:
    """Per search mode, the demands (with the right answer) one oracle asked about all of them gets wrong."""
    vectors = list(expected)
    random.Random(15).shuffle(vectors)  # no lucky order of memo fills
    wrong = {}
    for mode in SEARCH_MODES:
        with search_mode(mode):
            oracle = RepackingOracle(gpus, types)  # one oracle for all vectors: its caches are shared
            wrong[mode] = [(v, expected[v]) for v in vectors if oracle.feasible(named(types, v)) != expected[v]]
    return {mode: found for mode, found in wrong.items() if found}


def assert_matches_brute_force(gpus: Sequence[str], types: Sequence[RequestType], most: int) -> None:
    expected = {v: brute_feasible(gpus, types, v) for v in demands(len(types), most)}
    assert any(expected.values())
    assert not all(expected.values()), "the case set must reach infeasible demands"
    wrong = wrong_answers(gpus, types, expected)
    assert not wrong, f"oracle wrong on (demand, brute-force answer): { {m: w[:10] for m, w in wrong.items()} }"


# ---------------------------------------------------------------------------------------------------
# Hand-checked facts


def test_h100_holds_seven_1g_10gb_not_eight() -> None:
    oracle = RepackingOracle([H100], one_profile_types(H100, "1g.10gb"))
    assert oracle.feasible({"1g.10gb": 7})
    assert not oracle.feasible({"1g.10gb": 8})
    assert oracle.max_fill("1g.10gb") == 7


@pytest.mark.parametrize(
    ("demand", "fits"),
    [
        ({"3g.40gb": 1, "4g.40gb": 1}, True),
        ({"3g.40gb": 2}, True),
        ({"3g.40gb": 2, "1g.10gb": 1}, False),  # both 3g take all 8 memory slices
        ({"4g.40gb": 2}, False),  # one placement only (0:4)
        ({"7g.80gb": 1}, True),
        ({"7g.80gb": 1, "1g.10gb": 1}, False),
        ({"7g.80gb": 2}, False),
        ({"3g.40gb": 1, "1g.10gb": 4}, True),  # 3g at 4:4, the 1g at 0..3
        ({"3g.40gb": 1, "1g.10gb": 5}, False),
        ({"4g.40gb": 1, "1g.10gb": 3}, True),  # 4g at 0:4, the 1g at 4..6 (slice 7 takes no 1g)
        ({"4g.40gb": 1, "1g.10gb": 4}, False),
        ({"2g.20gb": 3, "1g.10gb": 1}, True),
        ({"2g.20gb": 3, "1g.10gb": 2}, False),
    ],
)
def test_one_h100(demand: dict[str, int], fits: bool) -> None:
    oracle = RepackingOracle([H100], one_profile_types(H100, "1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"))
    assert oracle.feasible(demand) is fits


def test_beside_a_3g_an_h100_fills_four_1g() -> None:
    oracle = RepackingOracle([H100], one_profile_types(H100, "1g.10gb", "3g.40gb"))
    assert oracle.max_fill("1g.10gb", {"3g.40gb": 1}) == 4
    assert oracle.max_fill("3g.40gb", {"1g.10gb": 4}) == 1
    assert oracle.max_fill("3g.40gb", {"1g.10gb": 5}) == 0
    assert oracle.max_fill("1g.10gb", {"1g.10gb": 8}) == 0  # the demand itself does not fit


@pytest.mark.parametrize(
    ("demand", "fits"),
    [
        ({"1g.6gb": 4}, True),
        ({"1g.6gb": 5}, False),
        ({"2g.12gb": 1, "1g.6gb": 2}, True),
        ({"2g.12gb": 2}, True),
        ({"2g.12gb": 2, "1g.6gb": 1}, False),
        ({"4g.24gb": 1}, True),
        ({"4g.24gb": 1, "1g.6gb": 1}, False),
        ({"1g.6gb+me": 1, "1g.6gb": 3}, True),  # the +me one owns the A30's one JPEG and one OFA
        ({"1g.6gb+me": 2}, False),
        ({"1g.6gb+me": 1, "2g.12gb": 1, "1g.6gb": 1}, True),
        ({"2g.12gb+me": 1, "2g.12gb": 1}, True),
        ({"2g.12gb+me": 1, "1g.6gb+me": 1}, False),  # placements and instance counts allow it; the OFA does not
    ],
)
def test_one_a30(demand: dict[str, int], fits: bool) -> None:
    oracle = RepackingOracle([A30], one_profile_types(A30, "1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb"))
    assert oracle.feasible(demand) is fits


def test_the_a30_media_engine_is_the_resource_that_limits_me_profiles() -> None:
    """What makes ``+me`` exclusive on an A30 is the catalog's counts, not the placements: check them."""
    a30 = load_catalog().model(A30)
    one_me, two_me = a30.profile_by_name("1g.6gb+me"), a30.profile_by_name("2g.12gb+me")
    assert (one_me.ofa_count, two_me.ofa_count, a30.resource_budget["ofa_count"]) == (1, 1, 1)
    assert (one_me.jpeg_count, two_me.jpeg_count, a30.resource_budget["jpeg_count"]) == (1, 1, 1)
    assert not one_me.placements[0].overlaps(two_me.placements[1])
    oracle = RepackingOracle([A30, A30], one_profile_types(A30, "1g.6gb+me", "2g.12gb+me"))
    assert oracle.feasible({"1g.6gb+me": 1, "2g.12gb+me": 1})  # one on each GPU
    assert oracle.feasible({"1g.6gb+me": 2})
    assert not oracle.feasible({"1g.6gb+me": 2, "2g.12gb+me": 1})


def test_rtx_pro_me_all_takes_every_decoder() -> None:
    """Beside ``1g.24gb+me.all`` (all 4 decoders) only the ``-me`` profiles (none) fit: a resource rule again."""
    types = one_profile_types(RTX, "1g.24gb+me.all", "1g.24gb", "1g.24gb-me")
    oracle = RepackingOracle([RTX], types)
    assert oracle.feasible({"1g.24gb+me.all": 1, "1g.24gb-me": 3})
    assert not oracle.feasible({"1g.24gb+me.all": 1, "1g.24gb": 1})
    assert oracle.feasible({"1g.24gb": 4})


def test_instance_count_is_enforced_where_it_binds() -> None:
    """No shipped profile's ``instance_count`` is below what its placements and engines allow, so a
    catalog with a lower one checks that the oracle enforces it."""
    catalog = load_catalog()
    a30 = catalog.model(A30)
    profiles = tuple(
        p.model_copy(update={"instance_count": 2}) if p.name == "1g.6gb" else p for p in a30.gpu_instance_profiles
    )
    strict = catalog.model_copy(
        update={"gpus": {**catalog.gpus, A30: a30.model_copy(update={"gpu_instance_profiles": profiles})}}
    )
    types = one_profile_types(A30, "1g.6gb", "1g.6gb+me")
    assert RepackingOracle([A30], types).feasible({"1g.6gb": 3})
    assert not RepackingOracle([A30], types, catalog=strict).feasible({"1g.6gb": 3})
    assert RepackingOracle([A30], types, catalog=strict).feasible({"1g.6gb": 2, "1g.6gb+me": 1})


def test_two_models_one_type_on_both() -> None:
    types = [
        kind("small", H100_SXM5_80GB={"1g.10gb"}, A30={"1g.6gb"}),
        kind("half", H100_SXM5_80GB={"4g.40gb"}, A30={"4g.24gb"}),
    ]
    oracle = RepackingOracle([H100, A30], types)
    assert oracle.feasible({"small": 11})
    assert not oracle.feasible({"small": 12})
    assert oracle.feasible({"half": 2})
    assert not oracle.feasible({"half": 3})
    assert oracle.feasible({"half": 1, "small": 7})  # the half on the A30, seven small on the H100
    assert oracle.feasible({"half": 1, "small": 4})
    assert not oracle.feasible({"half": 2, "small": 4})  # 3 small beside a 4g on the H100; none on the A30
    assert oracle.feasible({"half": 2, "small": 3})
    assert oracle.max_fill("small", {"half": 1}) == 7
    assert oracle.loadings(H100) == ((7, 0), (3, 1))


def test_a_type_placeable_nowhere_in_the_cluster_never_fits() -> None:
    oracle = RepackingOracle([A30], [kind("big", H100_SXM5_80GB={"7g.80gb"}), kind("small", A30={"1g.6gb"})])
    assert oracle.feasible({"big": 0, "small": 4})
    assert not oracle.feasible({"big": 1})
    assert oracle.max_fill("big") == 0


def test_the_empty_demand_fits_even_no_gpus() -> None:
    oracle = RepackingOracle([], [kind("small", A30={"1g.6gb"})])
    assert oracle.feasible({})
    assert not oracle.feasible({"small": 1})


def test_aliases_are_resolved() -> None:
    oracle = RepackingOracle(["H100"], [kind("small", H100_80GB={"1g.10gb"})])
    assert oracle.max_fill("small") == 7


@pytest.mark.parametrize(
    ("gpus", "types", "message"),
    [
        (["H101"], [kind("small", A30={"1g.6gb"})], "unknown GPU model 'H101'"),
        (["A100"], [kind("small", A30={"1g.6gb"})], "ambiguous GPU model 'A100'"),
        ([A30], [kind("small", A30={"1g.10gb"})], "A30 has no profile 1g.10gb"),
        ([A30], [kind("small", B300={"1g.10gb"})], "unknown GPU model 'B300'"),
        ([A30], [kind("small", A30={"1g.6gb"}), kind("small", A30={"2g.12gb"})], "duplicate request type"),
    ],
)
def test_bad_clusters_and_types_are_refused(gpus: list[str], types: list[RequestType], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RepackingOracle(gpus, types)


def test_bad_demands_are_refused() -> None:
    oracle = RepackingOracle([A30], [kind("small", A30={"1g.6gb"})])
    with pytest.raises(ValueError, match=r"unknown request type 'large' \(known: small\)"):
        oracle.feasible({"large": 1})
    with pytest.raises(ValueError, match="negative demand"):
        oracle.feasible({"small": -1})
    with pytest.raises(ValueError, match="unknown request type 'large'"):
        oracle.max_fill("large")


# ---------------------------------------------------------------------------------------------------
# Per-GPU loadings


@pytest.mark.parametrize("key", [A30, H100, RTX])
def test_every_profile_loading_is_legal_and_maximal(key: str) -> None:
    """Each loading can be placed (found by brute force) and no profile can be added to it."""
    catalog = load_catalog()
    model = catalog.model(key)
    loadings = profile_loadings(model)
    names = [p.name for p in model.gpu_instance_profiles]
    types = one_profile_types(key, *names)
    for loading in loadings:
        vector = [loading.get(n, 0) for n in names]
        assert brute_feasible([key], types, vector), loading
    for loading, name in itertools.product(loadings[:12], names):
        grown = [loading.get(n, 0) + (n == name) for n in names]
        assert not brute_feasible([key], types, grown), (loading, name)


@pytest.mark.parametrize("key", sorted(load_catalog().gpus))
def test_the_driver_rule_keeps_within_the_hardware_instance_and_compute_limits(key: str) -> None:
    """The counters' rule never allows more GPU instances or compute slices than the GPU has.

    So the oracle needs no separate check of those limits (the driver publishes none either).
    """
    model = load_catalog().model(key)
    for loading in profile_loadings(model):
        assert sum(loading.values()) <= model.max_gpu_instances
        assert sum(model.profile_by_name(n).slice_count * c for n, c in loading.items()) <= model.compute_slices


# ---------------------------------------------------------------------------------------------------
# Against the brute force


def test_one_a30_every_small_demand() -> None:
    types = [
        kind("one", A30={"1g.6gb", "1g.6gb+me"}),
        kind("two", A30={"2g.12gb"}),
        kind("media", A30={"1g.6gb+me", "2g.12gb+me"}),
        kind("whole", A30={"4g.24gb"}),
    ]
    assert_matches_brute_force([A30], types, most=5)


def test_two_a30_every_small_demand() -> None:
    types = [
        kind("one", A30={"1g.6gb"}),
        kind("two", A30={"2g.12gb", "2g.12gb+me"}),
        kind("media", A30={"1g.6gb+me", "2g.12gb+me"}),
        kind("whole", A30={"4g.24gb"}),
    ]
    assert_matches_brute_force([A30, A30], types, most=6)


@pytest.mark.parametrize(
    "types",
    [
        [kind("1g", H100_SXM5_80GB={"1g.10gb"}), kind("3g", H100_SXM5_80GB={"3g.40gb"})],
        [
            kind("1g", H100_SXM5_80GB={"1g.10gb", "1g.20gb"}),
            kind("2g", H100_SXM5_80GB={"2g.20gb"}),
            kind("4g", H100_SXM5_80GB={"4g.40gb", "3g.40gb"}),
        ],
        [
            kind("wide", H100_SXM5_80GB={"1g.20gb", "1g.10gb+me"}),
            kind("me", H100_SXM5_80GB={"1g.10gb+me"}),
            kind("1g", H100_SXM5_80GB={"1g.10gb"}),
        ],
    ],
    ids=["1g-3g", "1g-2g-4g", "overlapping-types"],
)
def test_one_h100_every_small_demand(types: list[RequestType]) -> None:
    assert_matches_brute_force([H100], types, most=8)


def test_an_h100_and_an_a30_every_small_demand() -> None:
    types = [
        kind("small", H100_SXM5_80GB={"1g.10gb"}, A30={"1g.6gb"}),
        kind("mid", H100_SXM5_80GB={"2g.20gb", "3g.40gb"}, A30={"2g.12gb"}),
        kind("big", H100_SXM5_80GB={"7g.80gb"}, A30={"4g.24gb"}),
    ]
    assert_matches_brute_force([H100, A30], types, most=7)


def _per_gpu_sums(single: set[tuple[int, ...]], gpus: int) -> set[tuple[int, ...]]:
    """Every vector that is a sum of ``gpus`` vectors of ``single`` (each GPU packed alone)."""
    sums = {(0,) * len(next(iter(single)))}
    for _ in range(gpus):
        sums = {tuple(a + b for a, b in zip(s, v, strict=True)) for s in sums for v in single}
    return sums


@pytest.mark.parametrize(
    ("gpus", "types", "box"),
    [
        (
            [A100] * 4,
            [
                kind("1g", A100_SXM4_40GB={"1g.5gb"}),
                kind("2g", A100_SXM4_40GB={"2g.10gb", "1g.10gb"}),
                kind("3g", A100_SXM4_40GB={"3g.20gb"}),
            ],
            (14, 7, 5),
        ),
        (
            [H100, H100, A30, A30],
            [
                kind("small", H100_SXM5_80GB={"1g.10gb"}, A30={"1g.6gb"}),
                kind("mid", H100_SXM5_80GB={"3g.40gb"}, A30={"2g.12gb"}),
                kind("big", H100_SXM5_80GB={"4g.40gb"}, A30={"4g.24gb"}),
            ],
            (10, 5, 5),
        ),
    ],
    ids=["4xA100-40GB", "2xH100+2xA30"],
)
def test_several_gpus_against_per_gpu_brute_force(
    gpus: list[str], types: list[RequestType], box: tuple[int, ...]
) -> None:
    """Many GPUs are beyond the whole-cluster brute force; but a cluster packing is one packing per GPU.

    So a demand fits iff it is at most a sum of one brute-force-feasible vector per GPU: check every
    demand in ``box`` (which reaches past the cluster's capacity) that way.
    """
    per_model: dict[str, set[tuple[int, ...]]] = {}
    for model in set(gpus):
        single_types = [RequestType(t.name, {model: t.profiles.get(model, frozenset())}) for t in types]
        per_model[model] = {
            v
            for v in itertools.product(*(range(b + 1) for b in box))
            if sum(v) <= 7 and brute_feasible([model], single_types, v)
        }
    reachable = {(0,) * len(types)}
    for model in gpus:
        reachable = {tuple(a + b for a, b in zip(s, v, strict=True)) for s in reachable for v in per_model[model]}
    # Each GPU's set is closed under taking fewer instances, hence so is their sum: membership is the answer.
    expected = {v: v in reachable for v in itertools.product(*(range(b + 1) for b in box))}
    assert any(expected.values())
    assert not all(expected.values())
    wrong = wrong_answers(gpus, types, expected)
    assert not wrong, f"oracle wrong on (demand, right answer): { {m: w[:10] for m, w in wrong.items()} }"


PROFILES = {key: [p.name for p in load_catalog().model(key).gpu_instance_profiles] for key in (A30, H100, A100, RTX)}


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[str], list[RequestType], list[int]]:
    gpus = draw(st.lists(st.sampled_from(sorted(PROFILES)), min_size=1, max_size=2))
    width = draw(st.integers(1, 3))
    types = [
        RequestType(
            f"t{i}",
            {model: frozenset(draw(st.sets(st.sampled_from(PROFILES[model]), max_size=3))) for model in set(gpus)},
        )
        for i in range(width)
    ]
    demand = draw(st.lists(st.integers(0, 4), min_size=width, max_size=width).filter(lambda d: sum(d) <= 6))
    return gpus, types, demand


@settings(max_examples=100)
@given(case=cases())
def test_random_cases_match_the_brute_force(case: tuple[list[str], list[RequestType], list[int]]) -> None:
    gpus, types, demand = case
    expected = brute_feasible(gpus, types, demand)
    for mode in SEARCH_MODES:
        with search_mode(mode):
            assert RepackingOracle(gpus, types).feasible(named(types, demand)) == expected, mode
