"""String functions: standard CEL, Kubernetes' regex library, and ext.Strings version 2.

Owns: ``contains``/``startsWith``/``endsWith``, ``matches``/``find``/``findAll`` (RE2, as cel-go),
``charAt``, ``indexOf``/``lastIndexOf`` (strings and lists), ``lowerAscii``/``upperAscii``, ``trim``,
``replace``, ``split`` (Go's ``SplitN``), ``substring``, ``join``, ``format`` and ``strings.quote``.
Indexes count code points, as CEL does.

Must never: hold state other than the cache of compiled regular expressions.
"""

from __future__ import annotations

import functools
from typing import Any

import re2  # type: ignore[import-untyped]  # google-re2 ships no type information
from celpy import celtypes

from dra_driver.tools.cel import budget
from dra_driver.tools.cel.functions.values import (
    Value,
    equal,
    int_value,
    kind_of,
    no_overload,
    propagating,
    require_int,
    require_string,
)

# -- strings: standard, regex (Kubernetes) and ext.Strings v2 ---------------------------------------


@propagating
def contains(text: Value, part: Value) -> Value:
    require_string("contains", text, part)
    return celtypes.BoolType(part in text)


@propagating
def starts_with(text: Value, prefix: Value) -> Value:
    require_string("startsWith", text, prefix)
    return celtypes.BoolType(text.startswith(prefix))


@propagating
def ends_with(text: Value, suffix: Value) -> Value:
    require_string("endsWith", text, suffix)
    return celtypes.BoolType(text.endswith(suffix))


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # errors are reported as CEL errors, not on stderr


@functools.lru_cache(maxsize=256)
def compile_regex(pattern: str) -> Any:
    """RE2, as cel-go uses; ``ValueError`` with RE2's message for a bad pattern."""
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ValueError(f"error parsing regexp: {reason}: `{pattern}`") from exc


@propagating
def matches(text: Value, pattern: Value) -> Value:
    require_string("matches", text, pattern)
    budget.charge_size(len(text))
    return celtypes.BoolType(compile_regex(str(pattern)).search(str(text)) is not None)


@propagating
def find(text: Value, pattern: Value) -> Value:
    require_string("find", text, pattern)
    budget.charge_size(len(text))
    match = compile_regex(str(pattern)).search(str(text))
    return celtypes.StringType(match.group(0) if match else "")


@propagating
def find_all(text: Value, pattern: Value, limit: Value = None) -> Value:
    require_string("findAll", text, pattern)
    budget.charge_size(len(text))
    found = [celtypes.StringType(m.group(0)) for m in compile_regex(str(pattern)).finditer(str(text))]
    if limit is not None:
        require_int("findAll", limit)
        if int(limit) >= 0:
            found = found[: int(limit)]
    return celtypes.ListType(found)


@propagating
def char_at(text: Value, position: Value) -> Value:
    require_string("charAt", text)
    require_int("charAt", position)
    if not 0 <= position <= len(text):
        raise IndexError(f"index out of range: {int(position)}")
    return celtypes.StringType(text[position : position + 1])


def _index_of(text: Value, part: Value, offset: Value, function: str) -> int:
    if isinstance(text, celtypes.ListType):
        raise no_overload(function, text, part)
    require_string(function, text, part)
    if offset is None:
        return -1 if function == "lastIndexOf" else 0
    require_int(function, offset)
    if not 0 <= offset <= len(text):
        raise IndexError(f"index out of range: {int(offset)}")
    return int(offset)


@propagating
def index_of(target: Value, part: Value, offset: Value = None) -> Value:
    """``s.indexOf(sub[, offset])`` (code points) and the lists library's ``l.indexOf(x)``."""
    if isinstance(target, celtypes.ListType) and offset is None:
        return int_value(next((i for i, e in enumerate(target) if equal(e, part)), -1))
    start = _index_of(target, part, offset, "indexOf")
    return int_value(target.find(part, start))


@propagating
def last_index_of(target: Value, part: Value, offset: Value = None) -> Value:
    if isinstance(target, celtypes.ListType) and offset is None:
        positions = [i for i, e in enumerate(target) if equal(e, part)]
        return int_value(positions[-1] if positions else -1)
    end = _index_of(target, part, offset, "lastIndexOf")
    if offset is None:
        return int_value(target.rfind(part))
    return int_value(target.rfind(part, 0, end + len(part)))


@propagating
def lower_ascii(text: Value) -> Value:
    require_string("lowerAscii", text)
    return celtypes.StringType("".join(c.lower() if "A" <= c <= "Z" else c for c in text))


@propagating
def upper_ascii(text: Value) -> Value:
    require_string("upperAscii", text)
    return celtypes.StringType("".join(c.upper() if "a" <= c <= "z" else c for c in text))


@propagating
def trim(text: Value) -> Value:
    require_string("trim", text)
    return celtypes.StringType(text.strip())


@propagating
def replace(text: Value, old: Value, new: Value, count: Value = None) -> Value:
    require_string("replace", text, old, new)
    limit = -1
    if count is not None:
        require_int("replace", count)
        limit = int(count)
    result = text.replace(old, new, limit)
    budget.charge_size(len(result))
    return celtypes.StringType(result)


@propagating
def split(text: Value, separator: Value, count: Value = None) -> Value:
    """Go's ``strings.SplitN``: n == 0 gives no parts, n < 0 all of them, "" splits characters."""
    require_string("split", text, separator)
    limit = -1
    if count is not None:
        require_int("split", count)
        limit = int(count)
    budget.charge_size(len(text))
    if limit == 0:
        return celtypes.ListType([])
    if separator == "":
        chars = list(text)
        parts = chars if limit < 0 or limit >= len(chars) else [*chars[: limit - 1], "".join(chars[limit - 1 :])]
    else:
        parts = text.split(separator, -1 if limit < 0 else limit - 1)
    return celtypes.ListType([celtypes.StringType(part) for part in parts])


@propagating
def substring(text: Value, start: Value, end: Value = None) -> Value:
    require_string("substring", text)
    require_int("substring", start, *(() if end is None else (end,)))
    stop = len(text) if end is None else int(end)
    if not 0 <= start <= len(text):
        raise IndexError(f"index out of range: {int(start)}")
    if not 0 <= stop <= len(text):
        raise IndexError(f"index out of range: {stop}")
    if start > stop:
        raise IndexError(f"invalid substring range. start: {int(start)}, end: {stop}")
    return celtypes.StringType(text[start:stop])


@propagating
def join(parts: Value, separator: Value = None) -> Value:
    if not isinstance(parts, celtypes.ListType):
        raise no_overload("join", parts)
    glue = "" if separator is None else separator
    require_string("join", glue, *parts)
    texts = [str(part) for part in parts]
    budget.charge_size(sum(len(text) for text in texts))
    return celtypes.StringType(str(glue).join(texts))


@propagating
def quote(text: Value) -> Value:
    """``strings.quote``: a double-quoted CEL string literal with escapes."""
    require_string("strings.quote", text)
    escapes = {"\\": "\\\\", '"': '\\"', "\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r"}
    escapes |= {"\t": "\\t", "\v": "\\v"}
    return celtypes.StringType('"' + "".join(escapes.get(c, c) for c in text) + '"')


def _format_value(verb: str, precision: int | None, value: Value) -> str:
    kind = kind_of(value)
    if verb == "s":
        if kind == "string":
            return str(value)
        if kind == "bool":
            return "true" if value else "false"
        if kind == "list":
            return "[" + ", ".join(_format_value("s", None, v) for v in value) + "]"
        if kind in {"int", "uint", "double", "kubernetes.Quantity", "kubernetes.Semver"}:
            return str(value)
        if kind == "null_type":
            return "null"
        raise TypeError(f"string clause can only be used on strings, bools, numbers and lists, was given {kind}")
    if verb == "d":
        if kind not in {"int", "uint"}:
            raise TypeError(f"decimal clause can only be used on integers, was given {kind}")
        return str(int(value))
    if verb in {"f", "e"}:
        if kind not in {"int", "uint", "double"}:
            raise TypeError(f"fixed-point clause can only be used on numbers, was given {kind}")
        return f"{float(value):.{6 if precision is None else precision}{verb}}"
    if verb in {"x", "X", "o", "b"}:
        if kind in {"int", "uint"}:
            return format(int(value), verb)
        if kind in {"string", "bytes"} and verb in {"x", "X"}:
            data = value.encode() if kind == "string" else bytes(value)
            return data.hex() if verb == "x" else data.hex().upper()
        raise TypeError(f"{verb} clause can only be used on integers, was given {kind}")
    raise ValueError(f'could not parse formatting clause: unrecognized formatting clause "{verb}"')


@propagating
def format_string(template: Value, args: Value) -> Value:
    """``'%s of %d'.format([a, b])``: the ext.Strings clauses %s %d %f %e %x %X %o %b (and %%)."""
    require_string("format", template)
    if not isinstance(args, celtypes.ListType):
        raise no_overload("format", template, args)
    out: list[str] = []
    position = 0
    i = 0
    while i < len(template):
        char = template[i]
        if char != "%":
            out.append(char)
            i += 1
            continue
        i += 1
        precision: int | None = None
        if i < len(template) and template[i] == ".":
            start = i + 1
            i = start
            while i < len(template) and template[i].isdigit():
                i += 1
            precision = int(template[start:i] or "0")
        if i >= len(template):
            raise ValueError("could not parse formatting clause: unexpected end of string")
        verb = template[i]
        i += 1
        if verb == "%":
            out.append("%")
            continue
        if position >= len(args):
            raise IndexError(f"index {position} out of range")
        out.append(_format_value(verb, precision, args[position]))
        position += 1
    result = "".join(out)
    budget.charge_size(len(result))
    return celtypes.StringType(result)
