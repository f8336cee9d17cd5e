"""JSON merge patch, JSON patch and strategic merge patch, table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from migdra_devcluster.apiserver.errors import BadRequest, Invalid
from migdra_devcluster.apiserver.patch import apply_json_patch, apply_merge_patch, apply_strategic_merge_patch


@pytest.mark.parametrize(
    ("target", "patch", "expected"),
    [
        pytest.param({"a": 1}, {"b": 2}, {"a": 1, "b": 2}, id="add"),
        pytest.param({"a": 1, "b": 2}, {"a": None}, {"b": 2}, id="null-deletes"),
        pytest.param({"a": {"x": 1, "y": 2}}, {"a": {"y": None, "z": 3}}, {"a": {"x": 1, "z": 3}}, id="nested"),
        pytest.param({"l": [1, 2]}, {"l": [3]}, {"l": [3]}, id="lists-replace"),
        pytest.param({"a": 1}, {"a": {"b": 1}}, {"a": {"b": 1}}, id="scalar-becomes-map"),
    ],
)
def test_merge_patch(target: dict[str, Any], patch: dict[str, Any], expected: dict[str, Any]) -> None:
    assert apply_merge_patch(target, patch) == expected


def test_merge_patch_does_not_touch_its_input() -> None:
    target = {"a": {"b": 1}}
    apply_merge_patch(target, {"a": {"b": 2}})
    assert target == {"a": {"b": 1}}


@pytest.mark.parametrize(
    ("operations", "expected"),
    [
        pytest.param([{"op": "add", "path": "/l/-", "value": 9}], {"m": {"a": 1}, "l": [1, 2, 9]}, id="append"),
        pytest.param([{"op": "add", "path": "/l/0", "value": 0}], {"m": {"a": 1}, "l": [0, 1, 2]}, id="insert"),
        pytest.param([{"op": "remove", "path": "/l/0"}], {"m": {"a": 1}, "l": [2]}, id="remove-item"),
        pytest.param([{"op": "replace", "path": "/m/a", "value": 5}], {"m": {"a": 5}, "l": [1, 2]}, id="replace"),
        pytest.param([{"op": "copy", "from": "/m/a", "path": "/m/b"}], {"m": {"a": 1, "b": 1}, "l": [1, 2]}, id="copy"),
        pytest.param([{"op": "move", "from": "/m", "path": "/n"}], {"n": {"a": 1}, "l": [1, 2]}, id="move"),
        pytest.param([{"op": "test", "path": "/m/a", "value": 1}], {"m": {"a": 1}, "l": [1, 2]}, id="test-passes"),
    ],
)
def test_json_patch(operations: list[dict[str, Any]], expected: dict[str, Any]) -> None:
    assert apply_json_patch({"m": {"a": 1}, "l": [1, 2]}, operations) == expected


@pytest.mark.parametrize(
    ("operations", "error"),
    [
        pytest.param([{"op": "test", "path": "/m/a", "value": 2}], Invalid, id="test-fails"),
        pytest.param([{"op": "remove", "path": "/missing"}], Invalid, id="remove-missing"),
        pytest.param([{"op": "replace", "path": "/l/5", "value": 1}], Invalid, id="index-out-of-range"),
        pytest.param([{"op": "frobnicate", "path": "/m"}], BadRequest, id="unknown-op"),
        pytest.param({"op": "add"}, BadRequest, id="not-a-list"),
        pytest.param([{"op": "add", "path": "/x"}], BadRequest, id="add-without-value"),
    ],
)
def test_json_patch_errors(operations: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        apply_json_patch({"m": {"a": 1}, "l": [1, 2]}, operations)


POD = {
    "metadata": {"name": "p", "finalizers": ["a"], "ownerReferences": [{"uid": "1", "name": "o1"}]},
    "spec": {
        "containers": [
            {"name": "main", "image": "v1", "env": [{"name": "A", "value": "1"}]},
            {"name": "side", "image": "s1"},
        ],
        "tolerations": [{"key": "t1"}],
    },
    "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Init", "status": "True"}]},
}


@pytest.mark.parametrize(
    ("patch", "path", "expected"),
    [
        pytest.param(
            {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
            ("status", "conditions"),
            [{"type": "Ready", "status": "True"}, {"type": "Init", "status": "True"}],
            id="conditions-merge-by-type",
        ),
        pytest.param(
            {"status": {"conditions": [{"type": "New", "status": "True"}]}},
            ("status", "conditions"),
            [
                {"type": "Ready", "status": "False"},
                {"type": "Init", "status": "True"},
                {"type": "New", "status": "True"},
            ],
            id="new-condition-appended",
        ),
        pytest.param(
            {"status": {"conditions": [{"type": "Init", "$patch": "delete"}]}},
            ("status", "conditions"),
            [{"type": "Ready", "status": "False"}],
            id="patch-delete-item",
        ),
        pytest.param(
            {"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "2"}]}]}},
            ("spec", "containers"),
            [
                {"name": "main", "image": "v1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                {"name": "side", "image": "s1"},
            ],
            id="nested-list-merge",
        ),
        pytest.param(
            {"spec": {"tolerations": [{"key": "t2"}]}},
            ("spec", "tolerations"),
            [{"key": "t2"}],
            id="list-without-merge-key-replaces",
        ),
        pytest.param(
            {"metadata": {"finalizers": ["b", "a"]}}, ("metadata", "finalizers"), ["a", "b"], id="finalizers-union"
        ),
        pytest.param(
            {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}},
            ("metadata", "finalizers"),
            [],
            id="delete-from-primitive-list",
        ),
        pytest.param(
            {"metadata": {"ownerReferences": [{"uid": "2", "name": "o2"}]}},
            ("metadata", "ownerReferences"),
            [{"uid": "1", "name": "o1"}, {"uid": "2", "name": "o2"}],
            id="owner-references-by-uid",
        ),
        pytest.param(
            {"status": {"conditions": [{"$patch": "replace"}, {"type": "Only", "status": "True"}]}},
            ("status", "conditions"),
            [{"type": "Only", "status": "True"}],
            id="patch-replace-list",
        ),
        pytest.param(
            {"spec": {"$patch": "replace", "containers": []}}, ("spec",), {"containers": []}, id="patch-replace-map"
        ),
    ],
)
def test_strategic_merge_patch(patch: dict[str, Any], path: tuple[str, ...], expected: Any) -> None:
    result: Any = apply_strategic_merge_patch(POD, patch, "Pod")
    for key in path:
        result = result[key]
    assert result == expected


def test_strategic_merge_of_an_unknown_kind_replaces_lists() -> None:
    result = apply_strategic_merge_patch(POD, {"status": {"conditions": [{"type": "X"}]}}, "ConfigMap")
    assert result["status"]["conditions"] == [{"type": "X"}]


def test_strategic_merge_item_without_its_key_is_a_bad_request() -> None:
    with pytest.raises(BadRequest, match="merge key 'type'"):
        apply_strategic_merge_patch(POD, {"status": {"conditions": [{"status": "True"}]}}, "Pod")
