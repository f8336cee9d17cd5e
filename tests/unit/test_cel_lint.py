"""``migdra cel lint`` as a library: findings, YAML paths, severities and the suggested guarded forms."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.tools.cel import compile_selector
from dra_driver.tools.cel.documents import Document, selector_sites
from dra_driver.tools.cel.lint import Finding, Linter, Severity

DRIVER = "gpu.migdra.io"
D = f"device.attributes['{DRIVER}']"
GUARD = f"device.driver == '{DRIVER}'"
STD = "device.attributes['resource.kubernetes.io']"


def device_class(name: str, *expressions: str) -> Document:
    return Document(
        "classes.yaml",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]},
        },
    )


def claim(requests: list[dict[str, Any]], *, kind: str = "ResourceClaim") -> Document:
    devices = {"devices": {"requests": requests}}
    spec: dict[str, Any] = {"spec": devices} if kind == "ResourceClaimTemplate" else devices
    return Document(
        "claims.yaml",
        {"apiVersion": "resource.k8s.io/v1", "kind": kind, "metadata": {"name": "c"}, "spec": spec},
    )


def exactly(class_name: str, *expressions: str) -> dict[str, Any]:
    return {
        "name": "r",
        "exactly": {"deviceClassName": class_name, "selectors": [{"cel": {"expression": e}} for e in expressions]},
    }


def lint(*documents: Document) -> list[Finding]:
    return Linter(DRIVER).lint_documents(documents)


def only(findings: list[Finding]) -> Finding:
    assert len(findings) == 1, [f.render() for f in findings]
    return findings[0]


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param(f"{GUARD} && {D}.type == 'mig'", id="nvidia-style-class"),
        pytest.param(f"{D}.type == 'mig' && {GUARD}", id="guard-after-works-too"),
        pytest.param(f"{GUARD} && {D}.type == 'mig' && {D}.profile == '1g.10gb'", id="type-guards-mig-only-names"),
        pytest.param(f"{GUARD} && {D}.profile.startsWith('1g') && {D}.type == 'mig'", id="type-guard-later"),
        pytest.param(f"{GUARD} && ({D}.type == 'gpu' || {D}.profile == '7g.80gb')", id="or-of-the-two-types"),
        pytest.param(f"{GUARD} && '{'numaNode'}' in {STD} && {STD}.numaNode == 0", id="in-guard"),
        pytest.param(f"{GUARD} && (!has({STD}.numaNode) || {STD}.numaNode == 0)", id="has-guard"),
        pytest.param(f"{GUARD} && cel.bind(a, {D}, a.type == 'mig' && a.profile == '1g.10gb')", id="bind-alias"),
        pytest.param(f"{GUARD} && {STD}.pciBusID.startsWith('0000:')", id="always-published-standard-name"),
        pytest.param(
            "device.driver == 'nvidia.com' && device.attributes['nvidia.com'].type == 'gpu'", id="their-guard"
        ),
        pytest.param("has(device.attributes['nvidia.com'].type) && device.attributes['nvidia.com'].type == 'gpu'"),
        pytest.param(f"{GUARD} && device.capacity['{DRIVER}'].memory.compareTo(quantity('10Gi')) >= 0", id="capacity"),
    ],
)
def test_guarded_classes_are_clean(expression: str) -> None:
    assert lint(device_class("c", expression)) == []


def test_unguarded_lookup_in_our_domain_needs_the_driver_guard() -> None:
    finding = only(lint(device_class("mig", f"{D}.type == 'mig'")))
    assert finding.severity is Severity.ERROR
    assert finding.path == "spec.selectors[0].cel.expression"
    assert finding.object == "DeviceClass/mig"
    assert "on devices of other drivers" in finding.message
    assert finding.suggestion == f"{GUARD} && {D}.type == 'mig'"
    compile_selector(finding.suggestion)


def test_optional_attribute_needs_a_presence_guard() -> None:
    finding = only(lint(device_class("numa", f"{GUARD} && {STD}.numaNode == 0")))
    assert finding.severity is Severity.ERROR
    assert "only when it is known" in finding.message
    assert finding.suggestion == f"{GUARD} && ('numaNode' in {STD} && {STD}.numaNode == 0)"
    assert lint(device_class("numa", finding.suggestion)) == []


def test_mig_only_attribute_needs_a_type_or_presence_guard() -> None:
    finding = only(lint(device_class("p", f"{GUARD} && {D}.profile == '1g.10gb'")))
    assert "only on type 'mig' devices" in finding.message
    assert finding.suggestion is not None
    assert lint(device_class("p", finding.suggestion)) == []


def test_shared_attribute_and_share_capacity_need_a_guard_that_the_shared_class_gives() -> None:
    shared = only(lint(device_class("s", f"{GUARD} && {D}.shared == true")))
    assert "only when it is known" in shared.message
    assert shared.suggestion is not None
    assert lint(device_class("s", shared.suggestion)) == []
    slices = f"device.capacity['{DRIVER}'].computeSlices.compareTo(quantity('2')) >= 0"
    capacity = only(lint(device_class("c", f"{GUARD} && {slices}")))
    assert capacity.severity is Severity.ERROR
    assert "capacity 'computeSlices' on shared devices only" in capacity.message
    assert lint(device_class("c", f"{GUARD} && 'shared' in {D} && {slices}")) == []
    # A claim of the shared class may look at computeSlices: the class checked 'shared' already.
    shared_class = device_class("mig-shared.migdra.io", f"{GUARD} && 'shared' in {D} && {D}.shared == true")
    assert lint(shared_class, claim([exactly("mig-shared.migdra.io", slices)])) == []
    assert only(lint(claim([exactly("mig.migdra.io", slices)]))).severity is Severity.WARNING


def test_foreign_domain_lookup_raises_on_our_devices() -> None:
    finding = only(lint(device_class("f", "device.attributes['nvidia.com'].type == 'gpu'")))
    assert "on every device that lacks it" in finding.message
    assert (
        finding.suggestion
        == "'type' in device.attributes['nvidia.com'] && device.attributes['nvidia.com'].type == 'gpu'"
    )


def test_unknown_names_in_our_domain_are_errors_with_a_hint() -> None:
    findings = lint(
        device_class("x", f"{GUARD} && {D}.profil == '1g.10gb' && device.capacity['{DRIVER}'].mem.sign() > 0")
    )
    messages = [f.message for f in findings]
    assert any("never publishes attribute 'profil'" in m and "did you mean 'profile'" in m for m in messages)
    assert any("never publishes capacity 'mem'" in m and "did you mean 'memory'" in m for m in messages)
    assert all(f.severity is Severity.ERROR for f in findings)


def test_other_domains_may_use_any_name() -> None:
    assert (
        lint(device_class("x", "device.driver == 'x.example.com' && device.attributes['x.example.com'].anything")) == []
    )


def test_compile_errors_and_non_bool_results() -> None:
    findings = lint(device_class("bad", "device.attributes[", f"{GUARD} && {D}.placementStart + 1", "1"))
    assert [f.path for f in findings] == [f"spec.selectors[{i}].cel.expression" for i in range(3)]
    assert "does not compile: Syntax error" in findings[0].message
    assert "no matching overload for '_&&_'" in findings[1].message
    assert "must evaluate to bool" in findings[2].message


def test_vocabulary_types_catch_runtime_type_errors() -> None:
    ordering = only(lint(device_class("v", f"{GUARD} && {D}.driverVersion > '580'")))
    assert ordering.severity is Severity.ERROR
    assert "(kubernetes.Semver, string)" in ordering.message
    equality = lint(device_class("v", f"{GUARD} && {D}.type == 'mig' && {D}.placementStart == '0'"))
    assert only(equality).severity is Severity.WARNING
    assert "never equal" in equality[0].message


def test_literals_that_never_parse() -> None:
    finding = only(lint(device_class("v", f"{GUARD} && {D}.driverVersion.compareTo(semver('580.0')) >= 0")))
    assert "semver('580.0') raises at run time" in finding.message
    assert lint(device_class("v", f"{GUARD} && {D}.driverVersion.compareTo(semver('580.0', true)) >= 0")) == []
    assert "quantity('10GB')" in only(lint(device_class("q", "quantity('10GB').sign() == 1"))).message


def test_claim_paths_and_class_context() -> None:
    mig = device_class("mig.migdra.io", f"{GUARD} && {D}.type == 'mig'")
    request = exactly("mig.migdra.io", f"{D}.profile == '1g.10gb'", f"{STD}.numaNode == 0")
    first_available = {
        "name": "fa",
        "firstAvailable": [
            {"name": "small", "deviceClassName": "mig.migdra.io", "selectors": [{"cel": {"expression": "1"}}]},
            {"name": "big", "deviceClassName": "mig.migdra.io", "selectors": [{"cel": {"expression": "2"}}]},
        ],
    }
    findings = lint(mig, claim([request, first_available]))
    assert [(f.object, f.path) for f in findings] == [
        ("ResourceClaim/c", "spec.devices.requests[0].exactly.selectors[1].cel.expression"),
        ("ResourceClaim/c", "spec.devices.requests[1].firstAvailable[0].selectors[0].cel.expression"),
        ("ResourceClaim/c", "spec.devices.requests[1].firstAvailable[1].selectors[0].cel.expression"),
    ]
    assert "only when it is known" in findings[0].message  # profile is fine: the class checked type == 'mig'


def test_claim_with_an_unknown_class_gets_warnings_not_errors() -> None:
    findings = lint(claim([exactly("somewhere-else", f"{D}.profile == '1g.10gb'")]))
    assert {f.severity for f in findings} == {Severity.WARNING}
    assert "not among the inputs" in findings[0].message


def test_template_paths() -> None:
    template = claim([exactly("mig.migdra.io", "device.attributes['nvidia.com'].x")], kind="ResourceClaimTemplate")
    assert [s.path for s in selector_sites(template)] == [
        "spec.spec.devices.requests[0].exactly.selectors[0].cel.expression"
    ]
    assert only(lint(template)).path == "spec.spec.devices.requests[0].exactly.selectors[0].cel.expression"


def test_earlier_selectors_of_a_class_guard_later_ones() -> None:
    assert lint(device_class("two", GUARD, f"{D}.type == 'mig'")) == []
    assert only(lint(device_class("two", f"{D}.type == 'mig'", GUARD))).path == "spec.selectors[0].cel.expression"


def test_rendering_names_file_object_path_and_suggestion() -> None:
    text = only(lint(device_class("mig", f"{D}.type == 'mig'"))).render()
    assert text.startswith("classes.yaml: DeviceClass/mig: spec.selectors[0].cel.expression: error: ")
    assert f"\n    suggested: {GUARD} && " in text


def test_an_unknown_name_behind_a_presence_guard_is_a_warning_always_false_not_an_error() -> None:
    """A selector written for another driver's vocabulary (NVIDIA's Fabric Manager ``gpuModuleID``),
    guarded: harmless, never matches -- not a scheduling abort."""
    guarded = only(lint(device_class("x", f"{GUARD} && 'gpuModuleID' in {D} && {D}.gpuModuleID == 1")))
    assert guarded.severity is Severity.WARNING
    assert "never publishes attribute 'gpuModuleID', so this guarded clause is always false" in guarded.message
    unguarded = only(lint(device_class("x", f"{GUARD} && {D}.gpuModuleID == 1")))
    assert unguarded.severity is Severity.ERROR


def test_brand_and_addressing_mode_are_published_where_nvml_answers_so_a_lookup_needs_its_guard() -> None:
    """NVIDIA's ``brand`` and ``addressingMode`` exist in migdra's vocabulary but not on every node (older
    drivers and vGPU guests do not answer them): guarded they pass, unguarded they could abort scheduling."""
    for name, value in (("brand", "'Nvidia'"), ("addressingMode", "'HMM'")):
        assert lint(device_class("x", f"{GUARD} && '{name}' in {D} && {D}.{name} == {value}")) == []
        unguarded = only(lint(device_class("x", f"{GUARD} && {D}.{name} == {value}")))
        assert unguarded.severity is Severity.ERROR, unguarded.render()


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param(f"{D}.profile == '3g.45gb'", id="equal"),
        pytest.param(f"{D}.profile in ['1g.10gb', '3g.45gb']", id="in-a-list"),
    ],
)
def test_a_profile_no_gpu_has_is_a_warning_with_the_closest_name(expression: str) -> None:
    finding = only(lint(device_class("x", f"{GUARD} && {D}.type == 'mig' && {expression}")))
    assert finding.severity is Severity.WARNING
    assert "'3g.45gb' is no MIG profile of any GPU migdra knows" in finding.message
    assert "did you mean '3g.4" in finding.message


def test_a_misspelt_device_class_is_an_error_when_every_class_is_given() -> None:
    classes = {"mig.migdra.io": (f"{GUARD} && {D}.type == 'mig'",)}
    document = claim([exactly("mig.migdra.oi")])
    finding = only(Linter(DRIVER, classes, classes_complete=True).lint_documents([document]))
    assert (finding.severity, finding.path) == (Severity.ERROR, "spec.devices.requests[0].exactly.deviceClassName")
    assert "DeviceClass 'mig.migdra.oi' is not among the classes given" in finding.message
    assert "did you mean 'mig.migdra.io'" in finding.message
    assert Linter(DRIVER, classes).lint_documents([document]) == []  # other classes may exist: no verdict
