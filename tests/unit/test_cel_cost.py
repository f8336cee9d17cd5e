"""The static cost estimate (``dra_driver.tools.cel.cost``) and lint's "too complex" finding.

The expected figures in ``KUBERNETES`` are the ``expectCost`` values of Kubernetes' own DRA tests
(kubernetes/dynamic-resource-allocation ``cel/compile_test.go``), i.e. what cel-go's estimator with
Kubernetes' declared sizes gives for those selectors.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.tools.cel import syntax
from dra_driver.tools.cel.cost import MAX_ESTIMATED_COST, estimate_cost
from dra_driver.tools.cel.documents import Document, load_documents, selector_sites
from dra_driver.tools.cel.lint import Linter, Severity

DRIVER = "gpu.migdra.io"
GUARD = f"device.driver == '{DRIVER}'"
CLASS_DIR = Path(__file__).resolve().parents[2] / "deviceclasses"
A = 'device.attributes["dra.example.com"]'
C = 'device.capacity["dra.example.com"]'
TEN = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"
SEVEN_NESTED = (
    f"{TEN}.all(x, {TEN}.all(y, {TEN}.all(z, {TEN}.all(z2, {TEN}.all(z3, {TEN}.all(z4, "
    f"{TEN}.all(z5, int('1'.find('[0-9]*')) < 100)))))))"
)
# Every attribute of every domain against every other: 32 x 32 x 32 x 32 steps.
QUADRUPLE = (
    "device.attributes.all(d, device.attributes[d].all(i, "
    "device.attributes.all(e, device.attributes[e].all(j, d != e || i == j))))"
)

KUBERNETES: list[tuple[str, int]] = [
    ('"no-such-domain" in device.attributes', 3),
    ('device.driver == ""', 2),
    ('device.driver == "dra.example.com"', 4),
    (f"{A}.name", 4),
    (f'{A}["name"]', 4),
    (f"cel.bind(dra, {A}, dra.name)", 15),
    (f"{A}.name > 0", 5),
    (f'{A}.name == "fish"', 5),
    (f'{C}.name.isGreaterThan(quantity("1Ki"))', 6),
    (f'"name" in {C} && {C}.name.isGreaterThan(quantity("1Ki"))', 10),
    (f'!("name" in {C}) || {C}.name.isGreaterThan(quantity("1Ki"))', 11),
    (f"{A}.a && {A}.b && {A}.c", 12),
    (f'{A}.name.isGreaterThan(semver("v0.0.1", true)) && isSemver("v1.0.0", true)', 7),
    ('device.attributes.exists_one(x, x == "dra.example.com")', 164),
    (f'{A}.exists_one(x, x == "services")', 133),
    ('device.capacity.exists_one(x, x == "dra.example.com")', 164),
    (f'{A}.services.split("example").size() >= 2', 19),
    (f'{A}.services.matches("[^a]?sym")', 18),
    ("device.allowMultipleAllocations == true", 3),
    (SEVEN_NESTED, 85_555_551),
]


@pytest.mark.parametrize(("expression", "expected"), KUBERNETES, ids=[str(cost) for _, cost in KUBERNETES])
def test_estimate_matches_kubernetes(expression: str, expected: int) -> None:
    assert estimate_cost(syntax.parse(expression)).cost == expected


def test_short_circuit_operators_count_both_sides_and_the_dearer_branch() -> None:
    """Worst case: the left side of ``&&`` does not decide; the dearer branch of ``?:`` is taken."""
    lookup = estimate_cost(syntax.parse(f"{A}.name")).cost
    assert estimate_cost(syntax.parse(f"false && {A}.name")).cost == lookup
    assert estimate_cost(syntax.parse(f"true ? {A}.name : false")).cost == lookup
    loop = estimate_cost(syntax.parse(f"{A}.exists_one(x, x == 'services')")).cost
    assert estimate_cost(syntax.parse(f"true ? false : {A}.exists_one(x, x == 'services')")).cost == loop


def test_comprehensions_multiply_by_the_declared_map_size() -> None:
    one = estimate_cost(syntax.parse("device.attributes.all(d, true)")).cost
    two = estimate_cost(syntax.parse("device.attributes.all(d, device.attributes[d].all(i, true))")).cost
    assert one == 2 + 32 * 3 + 1
    assert two == 2 + 32 * (3 + (4 + 32 * 3 + 1)) + 1


def test_bind_variable_and_shadowing_keep_their_sizes() -> None:
    bound = estimate_cost(syntax.parse(f"cel.bind(a, {A}, a.all(i, true))")).cost
    assert bound == 10 + 3 + (1 + 32 * 3 + 1)
    # ``device`` shadowed by a list element: its fields are no longer the device's.
    shadowed = estimate_cost(syntax.parse("[1, 2].all(device, device == 1)")).cost
    assert shadowed == 10 + 2 * (3 + 2) + 1


def test_quadruple_nesting_is_too_complex() -> None:
    estimate = estimate_cost(syntax.parse(f"{GUARD} && {QUADRUPLE}"))
    assert estimate.too_complex
    assert estimate.cost > 32**4
    assert estimate.costliest is not None
    assert syntax.source_of(f"{GUARD} && {QUADRUPLE}", estimate.costliest) == QUADRUPLE


def class_document(expression: str) -> Document:
    return Document(
        "classes.yaml",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "pairs"},
            "spec": {"selectors": [{"cel": {"expression": GUARD}}, {"cel": {"expression": expression}}]},
        },
    )


def test_lint_reports_a_too_complex_selector_with_its_yaml_path() -> None:
    findings = Linter(DRIVER).lint_documents([class_document(f"{GUARD} && {QUADRUPLE}")])
    assert len(findings) == 1, [f.render() for f in findings]
    finding = findings[0]
    assert finding.severity is Severity.ERROR
    assert finding.path == "spec.selectors[1].cel.expression"
    assert finding.object == "DeviceClass/pairs"
    assert "too complex" in finding.message
    assert f"exceeds Kubernetes' limit of {MAX_ESTIMATED_COST:,}" in finding.message
    assert QUADRUPLE in finding.message


def test_lint_accepts_a_nested_comprehension_under_the_limit() -> None:
    triple = "device.attributes.all(d, device.attributes[d].all(i, device.attributes.all(e, e != d)))"
    assert not estimate_cost(syntax.parse(triple)).too_complex
    assert Linter(DRIVER).lint_documents([class_document(f"{GUARD} && {triple}")]) == []


def shipped_selectors() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for path in sorted(CLASS_DIR.rglob("*.yaml")):
        for document in load_documents(path):
            found += [(f"{document.name}:{site.path}", site.expression) for site in selector_sites(document)]
    return found


SHIPPED = shipped_selectors()


@pytest.mark.parametrize(("where", "expression"), SHIPPED, ids=[where for where, _ in SHIPPED])
def test_shipped_classes_are_far_below_the_limit(where: str, expression: str) -> None:
    estimate = estimate_cost(syntax.parse(expression))
    assert not estimate.too_complex
    assert estimate.cost < 1_000, where  # guards, lookups and comparisons: no comprehension


def test_shipped_classes_exist() -> None:
    assert len(SHIPPED) >= 10
