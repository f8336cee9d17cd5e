"""Name, quantity and metadata rules: kube's regexes with kube's messages."""

from __future__ import annotations

import pytest

from dra_driver.tools.validation import validate_object_meta
from dra_driver.tools.validation.metadata import NameRule
from dra_driver.tools.validation.names import (
    is_dns1123_label,
    is_dns1123_subdomain,
    is_extended_resource_name,
    is_label_value,
    is_qualified_name,
    validate_fully_qualified_name,
    validate_qualified_name,
)
from dra_driver.tools.validation.paths import ROOT
from dra_driver.tools.validation.quantity import is_quantity


@pytest.mark.parametrize(
    ("value", "messages"),
    [
        pytest.param("gpu-0", [], id="valid"),
        pytest.param("a.b", ["must not contain dots"], id="dots"),
        pytest.param("-a", ["a lowercase RFC 1123 label must consist of"], id="leading-dash"),
        pytest.param("a" * 64, ["must be no more than 63 characters"], id="too-long"),
        pytest.param("Gpu", ["a lowercase RFC 1123 label must consist of"], id="upper-case"),
        pytest.param("a\n", ["a lowercase RFC 1123 label must consist of"], id="trailing-newline"),
    ],
)
def test_dns_labels(value: str, messages: list[str]) -> None:
    found = is_dns1123_label(value)
    assert len(found) == len(messages)
    for message, fragment in zip(found, messages, strict=True):
        assert message.startswith(fragment)


@pytest.mark.parametrize(
    ("value", "valid"),
    [("gpu.migdra.io", True), ("a", True), ("a..b", False), ("a.", False), ("A.b", False), ("a" * 254, False)],
    ids=str,
)
def test_dns_subdomains(value: str, valid: bool) -> None:
    assert (not is_dns1123_subdomain(value)) is valid


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        pytest.param("gpu.migdra.io/ready", "", id="prefixed"),
        pytest.param("Ready", "", id="bare"),
        pytest.param("/ready", "prefix part must be non-empty", id="empty-prefix"),
        pytest.param("a/b/c", "a valid label key must consist of", id="two-slashes"),
        pytest.param("Bad_Domain/x", "prefix part a lowercase RFC 1123 subdomain", id="bad-prefix"),
        pytest.param("x/" + "a" * 64, "name part must be no more than 63 characters", id="long-name"),
        pytest.param("x/-a", "name part must consist of alphanumeric characters", id="bad-name"),
        pytest.param("", "name part must be non-empty", id="empty"),
    ],
)
def test_label_keys(value: str, fragment: str) -> None:
    messages = is_qualified_name(value)
    if not fragment:
        assert messages == []
    else:
        assert any(message.startswith(fragment) for message in messages), messages


@pytest.mark.parametrize(
    ("value", "valid"), [("", True), ("xid-79", True), ("a_b.c", True), ("-a", False), ("a" * 64, False)], ids=str
)
def test_label_values(value: str, valid: bool) -> None:
    assert (not is_label_value(value)) is valid


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        pytest.param("gpu.migdra.io/profile", "", id="qualified"),
        pytest.param("profile", "", id="bare"),
        pytest.param("gpu.migdra.io/bad-name", "a valid C identifier must start with", id="not-c-identifier"),
        pytest.param("a/b/c", "must not contain more than one slash", id="two-slashes"),
        pytest.param("/profile", "the domain must not be empty", id="empty-domain"),
        pytest.param("gpu.migdra.io/", "the name must not be empty", id="empty-name"),
        pytest.param("x" * 33, "may not be more than 32 bytes", id="long-identifier"),
        pytest.param("a" * 64 + "/x", "may not be more than 63 bytes", id="long-domain"),
        pytest.param("GPU.io/x", "a lowercase RFC 1123 subdomain", id="upper-case-domain"),
    ],
)
def test_qualified_attribute_names(name: str, fragment: str) -> None:
    errors = validate_qualified_name(name, ROOT.child("k"))
    if not fragment:
        assert errors == []
    else:
        assert any(fragment in error.detail() for error in errors), [error.detail() for error in errors]


def test_fully_qualified_names_need_a_domain() -> None:
    assert validate_fully_qualified_name("gpu.migdra.io/profile", ROOT.child("k")) == []
    [error] = validate_fully_qualified_name("profile", ROOT.child("k"))
    assert error.message == "a fully qualified name must be a domain and a name separated by a slash"


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("gpu.migdra.io/mig-1g.10gb", True),
        ("example.com/foo", True),
        ("foo", False),
        ("kubernetes.io/foo", False),
        ("requests.example.com/foo", False),
        ("example.com/-foo", False),
    ],
    ids=str,
)
def test_extended_resource_names(name: str, valid: bool) -> None:
    assert is_extended_resource_name(name) is valid


@pytest.mark.parametrize(
    "value",
    # "Gi" and "." too: apimachinery's parser reads a missing numerator as 0 ("if we stripped all
    # numerator positions, always return 0"), so kube-apiserver accepts them.
    ["1", "1.5", ".5", "5.", "100m", "1Ki", "10Gi", "2e3", "1E-3", "-1", "+1", "1E", "3n", "7u", 40, 1.5, "Gi", "."],
    ids=str,
)
def test_valid_quantities(value: object) -> None:
    assert is_quantity(value)


@pytest.mark.parametrize(
    "value", ["1.5.5", "1GB", "", "1e", "1 Gi", "1KiB", "0x10", "1K", True, None, float("nan")], ids=str
)
def test_invalid_quantities(value: object) -> None:
    assert not is_quantity(value)


@pytest.mark.parametrize(
    ("metadata", "namespaced", "rule", "field", "reason", "fragment"),
    [
        pytest.param(
            {}, False, "dns-subdomain", "metadata.name", "FieldValueRequired", "name or generateName", id="name"
        ),
        pytest.param(
            {"name": "a_b"},
            False,
            "dns-subdomain",
            "metadata.name",
            "FieldValueInvalid",
            "RFC 1123 subdomain",
            id="subdomain",
        ),
        pytest.param(
            {"name": "a.b"},
            False,
            "dns-label",
            "metadata.name",
            "FieldValueInvalid",
            "must not contain dots",
            id="label",
        ),
        pytest.param(
            {"name": "x", "generateName": "Bad-"},
            False,
            "dns-subdomain",
            "metadata.generateName",
            "FieldValueInvalid",
            "RFC 1123 subdomain",
            id="generate-name",
        ),
        pytest.param(
            {"name": "x"}, True, "dns-subdomain", "metadata.namespace", "FieldValueRequired", "", id="namespace"
        ),
        pytest.param(
            {"name": "x", "namespace": "a.b"},
            True,
            "dns-subdomain",
            "metadata.namespace",
            "FieldValueInvalid",
            "must not contain dots",
            id="namespace-label",
        ),
        pytest.param(
            {"name": "x", "namespace": "d"},
            False,
            "dns-subdomain",
            "metadata.namespace",
            "FieldValueForbidden",
            "",
            id="cluster",
        ),
        pytest.param(
            {"name": "x", "labels": {"a/b/c": "v"}},
            False,
            "dns-subdomain",
            "metadata.labels",
            "FieldValueInvalid",
            '"a/b/c": a valid label key',
            id="label-key",
        ),
        pytest.param(
            {"name": "x", "labels": {"k": "-v"}},
            False,
            "dns-subdomain",
            "metadata.labels",
            "FieldValueInvalid",
            '"-v": a valid label must be',
            id="label-value",
        ),
        pytest.param(
            {"name": "x", "annotations": {"_k": "v"}},
            False,
            "dns-subdomain",
            "metadata.annotations",
            "FieldValueInvalid",
            "name part must consist",
            id="annotation-key",
        ),
        pytest.param(
            {"name": "x", "annotations": {"k": "v" * (256 * 1024)}},
            False,
            "dns-subdomain",
            "metadata.annotations",
            "FieldValueTooLong",
            "may not be more than 262144 bytes",
            id="annotation-size",
        ),
    ],
)
def test_object_metadata(
    metadata: dict[str, object], namespaced: bool, rule: NameRule, field: str, reason: str, fragment: str
) -> None:
    errors = validate_object_meta({"metadata": metadata}, namespaced, rule)
    assert [(error.field, error.reason) for error in errors] == [(field, reason)]
    assert fragment in errors[0].detail()


def test_valid_metadata_with_generated_name_prefix() -> None:
    meta = {"name": "train-x7k2p", "generateName": "train-", "namespace": "default", "annotations": {"A.io/K": "v"}}
    assert validate_object_meta({"metadata": meta}, True, "dns-subdomain") == []
