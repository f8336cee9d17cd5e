"""The DRA CEL environment, case by case: what Kubernetes' selectors evaluate to, on both celpy runners.

Each case names the rule it protects (a lookup rule, a library function, error absorption, a limit).
Expected outcomes are Kubernetes' (kube-scheduler with cel-go, 1.34+), not whatever celpy does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from dra_driver.tools.cel import (
    CELCompileError,
    CELCostLimitError,
    CELRuntimeError,
    Limits,
    RunnerKind,
    build_device_activation,
    compile_selector,
)
from dra_driver.tools.cel.device import DomainMap

DRIVER = "gpu.migdra.io"
D = f"device.attributes['{DRIVER}']"
C = f"device.capacity['{DRIVER}']"

# One H100 1g.10gb placement as the device model publishes it, plus one foreign-domain bool.
DEVICE: dict[str, Any] = {
    "name": "gpu-0-mig-1g-10gb-0",
    "attributes": {
        "type": {"string": "mig"},
        "profile": {"string": "1g.10gb"},
        "parentUUID": {"string": "GPU-0b1c2d3e-0000-0000-0000-000000000000"},
        "productName": {"string": "NVIDIA H100 80GB HBM3"},
        "architecture": {"string": "Hopper"},
        "cudaComputeCapability": {"version": "9.0.0"},
        "driverVersion": {"version": "580.65.6"},
        "cudaDriverVersion": {"version": "13.0.0"},
        "placementStart": {"int": 0},
        "placementSize": {"int": 1},
        "computeSlices": {"int": 1},
        "resource.kubernetes.io/pciBusID": {"string": "0000:3b:00.0"},
        "example.com/healthy": {"bool": True},
    },
    "capacity": {
        "memory": {"value": "9984Mi"},
        "multiprocessors": {"value": "16"},
        "copyEngines": {"value": "1"},
    },
}


@dataclass(frozen=True)
class Compile:
    """Expect a CELCompileError whose message contains ``text``."""

    text: str


@dataclass(frozen=True)
class Runtime:
    """Expect a CELRuntimeError whose message contains ``text``."""

    text: str


Outcome = bool | Compile | Runtime
LONG_OK = "'" + "a" * 10232 + "' != ''"  # exactly 10240 characters
LONG_TOO_MUCH = "true && " * 1280 + "true"  # 10244 characters
# Kubernetes limits bytes (UTF-8), not characters.
MULTIBYTE_OK = "'" + "é" * 5116 + "' != ''"  # 5124 characters, exactly 10240 bytes
MULTIBYTE_TOO_MUCH = "'" + "é" * 5117 + "' != ''"  # 5125 characters, 10242 bytes
FOUR_BYTE_OK = "'" + "\U0001f642" * 2558 + "' != ''"  # 2566 characters, exactly 10240 bytes
THREE_BYTE_TOO_MUCH = "'" + "€" * 3411 + "' != ''"  # 3419 characters, 10241 bytes

CASES: list[tuple[str, str, Outcome]] = [
    # -- the device variable and its lookup rules ---------------------------------------------------
    ("driver", "device.driver == 'gpu.migdra.io'", True),
    ("attribute-select", f"{D}.profile == '1g.10gb'", True),
    ("attribute-index", f"{D}['profile'] == '1g.10gb'", True),
    ("bare-name-is-driver-domain", f"{D}.type == 'mig'", True),
    ("qualified-standard-domain", "device.attributes['resource.kubernetes.io'].pciBusID.startsWith('0000:')", True),
    ("attribute-int", f"{D}.placementStart == 0", True),
    ("attribute-bool", "device.attributes['example.com'].healthy", True),
    ("attribute-version-is-semver", f"{D}.driverVersion.isGreaterThan(semver('535.0.0'))", True),
    ("attribute-version-major", f"{D}.driverVersion.major() == 580", True),
    ("unknown-domain-not-in", "'nvidia.com' in device.attributes", False),
    ("known-domain-in", "'gpu.migdra.io' in device.attributes", True),
    ("unknown-domain-is-empty-map", "device.attributes['nvidia.com'].size() == 0", True),
    ("unknown-domain-lookup-raises", "device.attributes['nvidia.com'].type == 'gpu'", Runtime("no such key: type")),
    ("unknown-attribute-raises", f"{D}.numaNode == 0", Runtime("no such key: numaNode")),
    ("unknown-attribute-index-raises", f"{D}['numaNode'] == 0", Runtime("no such key: numaNode")),
    ("in-guard", f"'numaNode' in {D} && {D}.numaNode == 0", False),
    ("has-missing", f"has({D}.numaNode)", False),
    ("has-present", f"has({D}.profile)", True),
    ("not-has", f"!has({D}.numaNode) || {D}.numaNode == 0", True),
    ("driver-guard", "device.driver == 'nvidia.com' && device.attributes['nvidia.com'].type == 'gpu'", False),
    ("allow-multiple-default-false", "!device.allowMultipleAllocations", True),
    ("has-device-field", "has(device.driver)", True),
    ("capacity-compare-to", f"{C}.memory.compareTo(quantity('9Gi')) > 0", True),
    ("capacity-is-greater-than", f"{C}.multiprocessors.isGreaterThan(quantity('10'))", True),
    ("capacity-unknown-domain-raises", "device.capacity['nvidia.com'].memory.sign() == 1", Runtime("no such key")),
    ("undefined-device-field", "device.foo == 1", Compile("undefined field 'foo'")),
    ("select-on-scalar-raises", f"{D}.type.foo == 1", Runtime("type 'string' does not support field selection")),
    ("select-on-scalar-absorbed", f"false && {D}.type.foo == 1", False),
    ("device-is-not-a-map", "device['driver'] == 'x'", Compile("found no matching overload for '_[_]'")),
    # -- error absorption by && and || (commutative, as in cel-go) ----------------------------------
    ("false-and-error", f"false && {D}.numaNode == 0", False),
    ("error-and-false", f"{D}.numaNode == 0 && false", False),
    ("error-or-true", f"{D}.numaNode == 0 || true", True),
    ("true-or-error", f"true || {D}.numaNode == 0", True),
    ("true-and-error", f"true && {D}.numaNode == 0", Runtime("no such key: numaNode")),
    ("false-or-error", f"false || {D}.numaNode == 0", Runtime("no such key: numaNode")),
    ("ternary-skips-error", f"{D}.type == 'mig' ? true : {D}.numaNode == 0", True),
    ("ternary-skips-error-in-true-branch", f"{D}.type == 'gpu' ? {D}.numaNode == 0 : true", True),
    ("ternary-error-condition", f"{D}.numaNode == 0 ? true : false", Runtime("no such key: numaNode")),
    ("ternary-non-bool-condition", f"{D}.placementStart ? true : false", Runtime("no matching overload for '_?_:_'")),
    ("error-and-error", f"{D}.numaNode == 0 && {D}.uuid == ''", Runtime("no such key: numaNode")),
    ("error-or-false", f"{D}.numaNode == 0 || false", Runtime("no such key: numaNode")),
    ("non-bool-and-false", f"{D}.placementStart && false", False),
    ("non-bool-and-true", f"{D}.placementStart && true", Runtime("no matching overload for '_&&_'")),
    ("non-bool-or-true", f"{D}.placementStart || true", True),
    ("exists-absorbs-error", "[0, 1].exists(x, 1 / x == 1)", True),
    ("all-false-absorbs-error", "[0, 1].all(x, 1 / x == 0)", False),
    # -- Kubernetes quantity library --------------------------------------------------------------
    ("quantity-equal-binary", "quantity('1Gi') == quantity('1024Mi')", True),
    ("quantity-equal-decimal", "quantity('0.5') == quantity('500m')", True),
    ("quantity-binary-not-decimal", "quantity('1G') == quantity('1Gi')", False),
    ("quantity-exponent", "quantity('12e6') == quantity('12M')", True),
    ("is-quantity", "isQuantity('1.5Gi') && !isQuantity('10GB')", True),
    ("quantity-invalid-raises", "quantity('10GB').sign() == 1", Runtime("quantities must match the regular")),
    ("quantity-bad-suffix-raises", "quantity('10k3').sign() == 1", Runtime("unable to parse quantity's suffix")),
    ("quantity-sign", "quantity('-1m').sign() == -1", True),
    ("quantity-is-less-than", "quantity('999Mi').isLessThan(quantity('1Gi'))", True),
    ("quantity-approximate-float", "quantity('1.5').asApproximateFloat() == 1.5", True),
    ("quantity-as-integer", "quantity('1Gi').asInteger() == 1073741824", True),
    ("quantity-as-integer-fraction", "quantity('1.5').asInteger() == 1", Runtime("cannot convert value to integer")),
    ("quantity-as-integer-overflow", "quantity('10E').asInteger() > 0", Runtime("cannot convert value to integer")),
    ("quantity-is-integer", "quantity('5').isInteger() && !quantity('1.5').isInteger()", True),
    ("quantity-add", "quantity('1Gi').add(quantity('1Gi')) == quantity('2Gi')", True),
    ("quantity-add-int", "quantity('1k').add(24) == quantity('1024')", True),
    ("quantity-sub-int", "quantity('1Gi').sub(1073741824).sign() == 0", True),
    ("quantity-has-no-operators", f"{C}.memory > 5", Compile("found no matching overload for '_>_'")),
    # -- Kubernetes semver library ----------------------------------------------------------------
    ("semver-minor", "semver('1.2.3').minor() == 2", True),
    ("semver-patch", "semver('1.2.3').patch() == 3", True),
    ("semver-normalize", "semver('v1.2', true) == semver('1.2.0')", True),
    ("semver-normalize-zeros", "semver('01.02.03', true) == semver('1.2.3')", True),
    ("semver-strict-raises", "semver('v1.2') == semver('1.2.0')", Runtime("Major.Minor.Patch")),
    ("is-semver", "isSemver('1.2', true) && !isSemver('1.2') && isSemver('1.2.3-rc.1+b5')", True),
    ("semver-prerelease-below-release", "semver('1.0.0-rc.1').isLessThan(semver('1.0.0'))", True),
    ("semver-numeric-prerelease", "semver('1.0.0-2').isLessThan(semver('1.0.0-10'))", True),
    ("semver-alpha-above-numeric", "semver('1.0.0-beta').isGreaterThan(semver('1.0.0-99'))", True),
    ("semver-compare-numeric", "semver('2.0.0').compareTo(semver('10.0.0')) == -1", True),
    ("semver-build-ignored", "semver('1.0.0+a') == semver('1.0.0+b')", True),
    # -- cross-type numeric comparison and equality -----------------------------------------------
    ("int-ge-double", "2 >= 2.0", True),
    ("int-lt-double", "1 < 2.0", True),
    ("uint-gt-int", "2u > 1", True),
    ("double-lt-int", "1.5 < 2", True),
    ("dyn-int-lt-double", f"{D}.placementStart < 0.5", True),
    ("dyn-int-equals-double", f"{D}.placementStart == 0.0", True),
    ("typed-int-equals-double", "1 == 1.0", Compile("found no matching overload for '_==_'")),
    ("mixed-kinds-unequal", f"{D}.profile == 1", False),
    ("mixed-kinds-unordered", f"{D}.profile > 1", Runtime("found no matching overload for '_>_'")),
    # -- cel.bind --------------------------------------------------------------------------------
    ("bind", f"cel.bind(a, {D}, a.type == 'mig' && a.profile == '1g.10gb')", True),
    ("bind-nested", "cel.bind(x, 2, cel.bind(y, x * 3, y == 6))", True),
    ("bind-error-absorbed", f"false && cel.bind(a, {D}, a.numaNode == 0)", False),
    ("bind-error-raises", f"cel.bind(a, {D}, a.numaNode == 0)", Runtime("no such key: numaNode")),
    # -- strings: standard, regex and ext.Strings -------------------------------------------------
    ("lower-upper-ascii", "'ÀBc'.lowerAscii() == 'Àbc' && 'abc'.upperAscii() == 'ABC'", True),
    ("split", f"{D}.profile.split('.') == ['1g', '10gb']", True),
    ("split-limit", "'a.b.c'.split('.', 2) == ['a', 'b.c']", True),
    ("replace", "'1g.10gb'.replace('.', '-') == '1g-10gb'", True),
    ("substring", f"{D}.profile.substring(0, 2) == '1g'", True),
    ("substring-out-of-range", "'abc'.substring(2, 9) == 'c'", Runtime("index out of range: 9")),
    ("library-error-absorbed", "'abc'.substring(2, 9) == 'c' || true", True),
    ("trim", "'  x \\t'.trim() == 'x'", True),
    ("index-of", "'1g.10gb'.indexOf('.') == 2 && '1g.10gb'.lastIndexOf('g') == 5", True),
    ("join", "['1g', '10gb'].join('.') == '1g.10gb'", True),
    ("char-at", "'mig'.charAt(1) == 'i' && 'mig'.charAt(3) == ''", True),
    ("format", "'%s has %d SMs'.format(['1g.10gb', 16]) == '1g.10gb has 16 SMs'", True),
    ("strings-quote", "strings.quote('a\"b') == '\"a\\\\\"b\"'", True),
    ("matches", f"{D}.profile.matches('^[0-9]+g\\\\.[0-9]+gb$')", True),
    ("find", f"{D}.productName.find('H[0-9]+') == 'H100'", True),
    ("find-all", "'1g.10gb+me'.findAll('[0-9]+') == ['1', '10']", True),
    ("invalid-regex-literal", "'x'.matches('(')", Compile("invalid matches argument")),
    ("invalid-regex-at-runtime", f"'x'.matches({D}.profile + '(')", Runtime("error parsing regexp")),
    ("size-code-points", "size('grün') == 4", True),
    # -- lists and sets ---------------------------------------------------------------------------
    ("is-sorted", "[1, 2, 2, 3].isSorted() && ![2, 1].isSorted()", True),
    ("sum", "[1, 2, 3].sum() == 6", True),
    ("min-max", "[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3", True),
    ("min-empty-raises", "[0].filter(x, x > 0).min() == 0", Runtime("min called on empty list")),
    ("list-index-of", "[1, 2, 1].indexOf(1) == 0 && [1, 2, 1].lastIndexOf(1) == 2", True),
    ("list-index-out-of-range", "[1, 2][2] == 1", Runtime("index out of range: 2")),
    ("sets", "sets.contains([1, 2, 3], [2]) && sets.equivalent([1, 2], [2, 1]) && !sets.intersects([1], [2])", True),
    ("homogeneous-list-literal", "[1, 'a'].size() == 2", Compile("expected type 'int' but found 'string'")),
    # -- macros -------------------------------------------------------------------------------------
    ("all", "[1, 2, 3].all(x, x > 0)", True),
    ("exists", f"{D}.all(k, k != 'numaNode')", True),
    ("exists-one", "[1, 2, 3].exists_one(x, x == 2)", True),
    ("map", "[1, 2].map(x, x * 2) == [2, 4]", True),
    ("map-filter", "[1, 2, 3].map(x, x > 1, x * 10) == [20, 30]", True),
    ("filter", "[1, 2, 3].filter(x, x != 2) == [1, 3]", True),
    ("map-error-is-error", "[0, 1].map(x, 1 / x).size() == 2", Runtime("division by zero")),
    ("two-variable-comprehension", f"{D}.all(k, v, true)", Compile("two-variable comprehensions")),
    ("has-needs-select", "has(device)", Compile("invalid argument to has() macro")),
    # -- results, names, syntax and limits ----------------------------------------------------------
    ("int-result", "1", Compile("must evaluate to bool or the unknown type, not int")),
    ("string-result", "'x'", Compile("must evaluate to bool or the unknown type, not string")),
    ("list-result", "[true]", Compile("not list(bool)")),
    ("dyn-non-bool-result", f"{D}.placementStart", Runtime("CEL result of type int could not be converted to bool")),
    ("undeclared-variable", "gpu == 1", Compile("undeclared reference to 'gpu'")),
    ("undeclared-function", "device.driver.frobnicate()", Compile("undeclared reference to 'frobnicate'")),
    ("syntax-error", "device.driver ==", Compile("Syntax error")),
    ("division-by-zero", f"1 / {D}.placementStart == 1", Runtime("division by zero")),
    ("int-overflow", f"9223372036854775807 + {D}.placementSize > 0", Runtime("overflow")),
    ("length-at-limit", LONG_OK, True),
    ("length-over-limit", LONG_TOO_MUCH, Compile("the limit is 10240")),
    ("length-in-bytes-at-limit", MULTIBYTE_OK, True),
    ("length-in-bytes-over-limit", MULTIBYTE_TOO_MUCH, Compile("expression is 10242 bytes long")),
    ("length-four-byte-at-limit", FOUR_BYTE_OK, True),
    ("length-three-byte-over-limit", THREE_BYTE_TOO_MUCH, Compile("expression is 10241 bytes long")),
]


PATHOLOGICAL = "{0}.all(a, {0}.all(b, {0}.all(c, {0}.all(d, {0}.all(e, {0}.all(f, true))))))".format(
    "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"
)
FIVE = "[1, 2, 3, 4, 5]"
NESTED_25_STEPS = f"{FIVE}.all(a, {FIVE}.all(b, true))"  # 5 + 25 comprehension steps


@pytest.fixture(params=[RunnerKind.COMPILED, RunnerKind.INTERPRETED], ids=lambda kind: kind.value)
def runner(request: pytest.FixtureRequest) -> RunnerKind:
    kind: RunnerKind = request.param
    return kind


def test_case_table_is_big_enough() -> None:
    assert len(CASES) >= 60
    assert len({case_id for case_id, _, _ in CASES}) == len(CASES)


@pytest.mark.parametrize(("expression", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_expression(expression: str, expected: Outcome, runner: RunnerKind) -> None:
    if isinstance(expected, Compile):
        with pytest.raises(CELCompileError) as compile_error:
            compile_selector(expression, runner=runner)
        assert expected.text in compile_error.value.message
        assert compile_error.value.expression == expression
        return
    program = compile_selector(expression, runner=runner)
    if isinstance(expected, Runtime):
        with pytest.raises(CELRuntimeError) as runtime_error:
            program.matches(DEVICE, driver=DRIVER)
        assert expected.text in runtime_error.value.message
        assert runtime_error.value.expression == expression
        return
    assert program.matches(DEVICE, driver=DRIVER) is expected


def test_pathological_comprehension_stops_in_bounded_time(runner: RunnerKind) -> None:
    """Kubernetes' cost limit alone would let it run for seconds (a minute interpreted); migdra's
    wall-clock guard, on by default, stops it, with kube's wording so users recognise the error."""
    program = compile_selector(PATHOLOGICAL, runner=runner)
    with pytest.raises(CELCostLimitError) as exhausted:
        program.matches(DEVICE, driver=DRIVER)
    assert "actual cost limit exceeded" in exhausted.value.message
    assert "wall-clock guard" in exhausted.value.message


def test_cost_limit_counts_comprehension_steps_deterministically(runner: RunnerKind) -> None:
    program = compile_selector("[1, 2, 3, 4, 5].all(a, [1, 2, 3, 4, 5].all(b, true))", runner=runner)
    assert program.matches(DEVICE, driver=DRIVER, limits=Limits(max_cost=100, max_seconds=None))
    with pytest.raises(CELCostLimitError, match="actual cost limit exceeded"):
        program.matches(DEVICE, driver=DRIVER, limits=Limits(max_cost=20, max_seconds=None))


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        pytest.param(f"false && {PATHOLOGICAL}", False, id="false-and"),
        pytest.param(f"true || {PATHOLOGICAL}", True, id="true-or"),
        pytest.param(f"1 == 2 && {PATHOLOGICAL}", False, id="computed-false-and"),
        pytest.param(f"false && ({PATHOLOGICAL} || {PATHOLOGICAL})", False, id="nested"),
        pytest.param(f"true ? true : {PATHOLOGICAL}", True, id="ternary-false-branch"),
        pytest.param(f"false ? {PATHOLOGICAL} : false", False, id="ternary-true-branch"),
    ],
)
def test_short_circuit_skips_the_pathological_side(runner: RunnerKind, expression: str, expected: bool) -> None:
    """cel-go never evaluates the operand that cannot change the result: no cost, no time, no error."""
    program = compile_selector(expression, runner=runner)
    # Evaluating the pathological side would cost a million; ten is ample for the rest.
    assert program.matches(DEVICE, driver=DRIVER, limits=Limits(max_cost=10, max_seconds=None)) is expected


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param(f"false && {NESTED_25_STEPS}", id="false-and"),
        pytest.param(f"!(true || {NESTED_25_STEPS})", id="true-or"),
        pytest.param(f"false ? {NESTED_25_STEPS} : false", id="ternary"),
    ],
)
def test_skipped_side_is_not_charged(runner: RunnerKind, expression: str) -> None:
    tight = Limits(max_cost=1, max_seconds=None)
    assert compile_selector(expression, runner=runner).matches(DEVICE, driver=DRIVER, limits=tight) is False
    evaluated = expression.replace("false &&", "true &&").replace("true ||", "false ||").replace("false ?", "true ?")
    with pytest.raises(CELCostLimitError):
        compile_selector(evaluated, runner=runner).matches(DEVICE, driver=DRIVER, limits=tight)


def test_driver_guard_skips_the_lookup_on_other_drivers_devices(
    runner: RunnerKind, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``device.driver == 'other' && <lookup>``: the lookup never runs on a device of another driver."""
    looked_up: list[object] = []
    original_getitem, original_get = DomainMap.__getitem__, DomainMap.get

    def getitem(self: DomainMap, key: Any) -> Any:
        looked_up.append(key)
        return original_getitem(self, key)

    def get(self: DomainMap, key: Any, default: Any = None) -> Any:
        looked_up.append(key)
        return original_get(self, key, default)

    foreign = build_device_activation(DEVICE, "nvidia.com")  # gpu.migdra.io is an empty domain there
    monkeypatch.setattr(DomainMap, "__getitem__", getitem)
    monkeypatch.setattr(DomainMap, "get", get)
    program = compile_selector(f"device.driver == 'other' && {D}.x == 1", runner=runner)
    assert program.matches(foreign) is False
    assert looked_up == []
    # The same lookup, evaluated, is the error the guard protects against.
    with pytest.raises(CELRuntimeError, match="no such key: x"):
        compile_selector(f"device.driver == 'nvidia.com' && {D}.x == 1", runner=runner).matches(foreign)
    assert looked_up == [DRIVER]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        pytest.param("false ? false : " * 590 + "true", True, id="ternary-else-chain"),
        pytest.param("true && " * 590 + "true", True, id="and-chain"),
        pytest.param("false || " * 590 + "false", False, id="or-chain"),
    ],
)
def test_long_operator_chains_evaluate(runner: RunnerKind, expression: str, expected: bool) -> None:
    """The deepest chains the parser accepts still evaluate: short-circuiting adds no Python recursion
    per ``?:`` level (the branch is evaluated by the runner, not inside an operator function)."""
    assert compile_selector(expression, runner=runner).matches(DEVICE, driver=DRIVER) is expected


def test_cost_limit_is_not_absorbed_by_and(runner: RunnerKind) -> None:
    """An exhausted budget stops the evaluation; it is not an error value ``&& false`` can swallow."""
    ten = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"
    program = compile_selector(f"{ten}.all(a, {ten}.all(b, true)) && false", runner=runner)
    with pytest.raises(CELCostLimitError):
        program.matches(DEVICE, driver=DRIVER, limits=Limits(max_cost=50, max_seconds=None))


def test_growing_strings_are_charged(runner: RunnerKind) -> None:
    nested = "'x'"
    for _ in range(24):
        nested = f"cel.bind(s, {nested}, s + s)"
    program = compile_selector(f"size({nested}) > 0", runner=runner)
    assert program.matches(DEVICE, driver=DRIVER, limits=Limits(max_cost=10**7, max_seconds=None))
    with pytest.raises(CELCostLimitError):
        program.matches(DEVICE, driver=DRIVER, limits=Limits(max_seconds=None))


def test_errors_carry_expression_and_kube_wording() -> None:
    expression = f"{D}.numaNode == 0"
    with pytest.raises(CELRuntimeError) as raised:
        compile_selector(expression).matches(DEVICE, driver=DRIVER)
    assert str(raised.value) == "CEL runtime error: no such key: numaNode"
    with pytest.raises(CELCompileError) as compile_error:
        compile_selector("device.driver == ")
    assert compile_error.value.line == 1
    assert compile_error.value.column is not None
    assert compile_error.value.details().startswith("ERROR: <input>:1:")
