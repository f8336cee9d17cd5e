"""The three patch formats kube-apiserver accepts besides server-side apply.

- JSON merge patch (RFC 7386, ``application/merge-patch+json``): maps merge, ``null`` deletes, lists
  replace.
- JSON patch (RFC 6902, ``application/json-patch+json``): add/remove/replace/move/copy/test.
- Strategic merge patch (``application/strategic-merge-patch+json``): merge patch plus list merging by
  the keys in :mod:`merge_keys`, and the ``$patch: replace|delete``, ``$deleteFromPrimitiveList/...``
  and ``$retainKeys`` directives (``$setElementOrder`` is accepted and ignored).

Functions here are pure: they return a new document and never touch the store.  A malformed patch is a
:class:`BadRequest`; a well-formed one that cannot apply (missing path, failed ``test``) is
:class:`Invalid`, as kube answers 422 for those.
"""

from __future__ import annotations

import copy
from typing import Any

from migdra_devcluster.apiserver.errors import BadRequest, Invalid
from migdra_devcluster.apiserver.merge_keys import list_merge_rule

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH_TYPES = ("application/apply-patch+yaml", "application/apply-patch+cbor")
_DELETE = object()


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: a map patch merges into a map target, ``null`` removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


def apply_strategic_merge_patch(target: dict[str, Any], patch: Any, kind: str) -> dict[str, Any]:
    """Strategic merge of ``patch`` into ``target`` for an object of ``kind``."""
    if not isinstance(patch, dict):
        raise BadRequest("strategic merge patch must be a JSON object")
    merged = _merge_map(target, patch, "", kind)
    if merged is _DELETE:
        raise Invalid("a strategic merge patch may not delete the whole object")
    result: dict[str, Any] = merged
    return result


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


def _merge_map(target: Any, patch: dict[str, Any], path: str, kind: str) -> Any:
    directive = patch.get("$patch")
    if directive == "delete":
        return _DELETE
    if directive == "replace":
        return _strip_directives(patch)
    if directive is not None:
        raise BadRequest(f"unknown strategic merge patch directive $patch: {directive!r} at {path or '<root>'}")
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith(("$setElementOrder/", "$deleteFromPrimitiveList/")) or key in ("$patch", "$retainKeys"):
            continue
        field_path = _join(path, key)
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = _merge_map(result.get(key), value, field_path, kind)
            if merged is _DELETE:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _merge_list(result.get(key), value, field_path, kind)
        else:
            result[key] = value
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            if isinstance(result.get(name), list) and isinstance(value, list):
                result[name] = [item for item in result[name] if item not in value]
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(target: Any, patch: list[Any], path: str, kind: str) -> list[Any]:
    merges, key = list_merge_rule(kind, path)
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [_strip_directives(item) for item in patch if not (isinstance(item, dict) and "$patch" in item)]
    if not merges or not isinstance(target, list):
        return [
            _strip_directives(item) for item in patch if not (isinstance(item, dict) and item.get("$patch") == "delete")
        ]
    if key is None:
        result = list(target)
        for item in patch:
            if item not in result:
                result.append(item)
        return result
    result = [copy.deepcopy(item) for item in target]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise BadRequest(f"strategic merge patch: an item of {path} lacks its merge key {key!r}")
        index = next((i for i, old in enumerate(result) if isinstance(old, dict) and old.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            result = [old for old in result if not (isinstance(old, dict) and old.get(key) == item[key])]
        elif index is None:
            result.append(_strip_directives(item))
        else:
            result[index] = _merge_map(result[index], item, path, kind)
    return result


def apply_json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902, applied to a copy; any failing operation fails the whole patch."""
    if not isinstance(operations, list):
        raise BadRequest("json patch must be a JSON array of operations")
    document = copy.deepcopy(target)
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise BadRequest(f"invalid json patch operation: {operation!r}")
        op, path = operation["op"], operation["path"]
        if op in ("add", "replace", "test") and "value" not in operation:
            raise BadRequest(f"json patch {op} operation at {path!r} needs a value")
        if op == "add":
            document = _pointer_add(document, path, copy.deepcopy(operation["value"]))
        elif op == "remove":
            document, _ = _pointer_remove(document, path)
        elif op == "replace":
            document, _ = _pointer_remove(document, path)
            document = _pointer_add(document, path, copy.deepcopy(operation["value"]))
        elif op == "move":
            document, value = _pointer_remove(document, _from(operation))
            document = _pointer_add(document, path, value)
        elif op == "copy":
            document = _pointer_add(document, path, copy.deepcopy(_pointer_get(document, _from(operation))))
        elif op == "test":
            if _pointer_get(document, path) != operation["value"]:
                raise Invalid(f"json patch test operation failed at {path!r}")
        else:
            raise BadRequest(f"unknown json patch operation {op!r}")
    return document


def _from(operation: dict[str, Any]) -> str:
    source = operation.get("from")
    if not isinstance(source, str):
        raise BadRequest(f"json patch {operation['op']} operation needs 'from'")
    return source


def _tokens(pointer: str) -> list[str]:
    if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
        raise BadRequest(f"invalid JSON pointer {pointer!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]


def _child(container: Any, token: str, pointer: str) -> Any:
    if isinstance(container, dict):
        if token not in container:
            raise Invalid(f"json patch: path {pointer!r} does not exist")
        return container[token]
    if isinstance(container, list):
        index = _index(container, token, pointer, allow_end=False)
        return container[index]
    raise Invalid(f"json patch: path {pointer!r} does not exist")


def _index(container: list[Any], token: str, pointer: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit():
        raise Invalid(f"json patch: {token!r} in {pointer!r} is not a list index")
    index = int(token)
    if index > len(container) or (index == len(container) and not allow_end):
        raise Invalid(f"json patch: index {index} in {pointer!r} is out of range")
    return index


def _walk(document: Any, tokens: list[str], pointer: str) -> Any:
    value = document
    for token in tokens:
        value = _child(value, token, pointer)
    return value


def _pointer_get(document: Any, pointer: str) -> Any:
    return _walk(document, _tokens(pointer), pointer)


def _pointer_add(document: Any, pointer: str, value: Any) -> Any:
    tokens = _tokens(pointer)
    if not tokens:
        return value
    parent = _walk(document, tokens[:-1], pointer)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, pointer, allow_end=True), value)
    else:
        raise Invalid(f"json patch: cannot add at {pointer!r}")
    return document


def _pointer_remove(document: Any, pointer: str) -> tuple[Any, Any]:
    tokens = _tokens(pointer)
    if not tokens:
        raise Invalid("json patch: cannot remove the whole document")
    parent = _walk(document, tokens[:-1], pointer)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise Invalid(f"json patch: path {pointer!r} does not exist")
        return document, parent.pop(last)
    if isinstance(parent, list):
        return document, parent.pop(_index(parent, last, pointer, allow_end=False))
    raise Invalid(f"json patch: path {pointer!r} does not exist")
