"""CEL source text -> migdra's own small syntax tree, with macros expanded the way cel-go's parser does.

Owns: parsing (celpy's Lark grammar, in a parser instance of our own), the node types every static
pass uses (checker, lint, explain), source spans for messages, macro recognition (``has``, ``all``,
``exists``, ``exists_one``, ``map``, ``filter``, ``cel.bind``), namespaced functions (``sets.*``,
``strings.quote``) and the nesting limit.

Must never: evaluate anything or know about devices.  Lowering the tree for celpy's runners lives in
``lowering.py``.

Why our own parser instance: celpy keeps one process-wide Lark parser whose tree class is fixed by the
first ``celpy.Environment``; ours always builds ``TranspilerTree`` nodes, which both of celpy's runners
accept, and leaves celpy's singleton alone.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import celpy
import lark
from celpy import evaluation

from dra_driver.tools.cel.errors import CELCompileError

# kube-apiserver's CELSelectorExpressionMaxLength, in UTF-8 bytes (Go's len(string)), not characters.
MAX_EXPRESSION_LENGTH = 10 * 1024
# Deepest parse tree we hand to celpy.  celpy's evaluators recurse once per grammar level (about ten
# per parenthesis), so this bounds Python recursion; cel-go's parser has a similar recursion limit.
MAX_PARSE_DEPTH = 600

LarkTree = lark.Tree[lark.Token]

MACRO_COMPREHENSIONS = frozenset({"all", "exists", "exists_one", "map", "filter"})
NAMESPACED_FUNCTIONS = frozenset({"sets.contains", "sets.equivalent", "sets.intersects", "strings.quote"})

_OPERATORS = {
    "relation_lt": "_<_",
    "relation_le": "_<=_",
    "relation_gt": "_>_",
    "relation_ge": "_>=_",
    "relation_eq": "_==_",
    "relation_ne": "_!=_",
    "relation_in": "@in",
    "addition_add": "_+_",
    "addition_sub": "_-_",
    "multiplication_mul": "_*_",
    "multiplication_div": "_/_",
    "multiplication_mod": "_%_",
}
IN = "@in"  # cel-go's internal name for the ``in`` operator


@dataclass(frozen=True, slots=True)
class Span:
    """Where a node came from: character offsets into the expression, and 1-based line/column."""

    start: int
    end: int
    line: int
    column: int


class Node:
    """Base of all syntax nodes; ``span`` locates it in the source."""

    __slots__ = ()
    span: Span

    def children(self) -> tuple[Node, ...]:
        return ()


@dataclass(frozen=True, slots=True)
class Literal(Node):
    kind: str  # int, uint, double, string, bytes, bool, null
    value: object
    text: str  # the token as written; lowering re-emits it verbatim
    span: Span


@dataclass(frozen=True, slots=True)
class Ident(Node):
    name: str
    span: Span
    root: bool = False  # written with a leading dot


@dataclass(frozen=True, slots=True)
class Select(Node):
    operand: Node
    field: str
    span: Span

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True, slots=True)
class Index(Node):
    operand: Node
    index: Node
    span: Span

    def children(self) -> tuple[Node, ...]:
        return (self.operand, self.index)


@dataclass(frozen=True, slots=True)
class Call(Node):
    """A function or method call, operators included (``_&&_``, ``_==_``, ``@in``, ``_?_:_``, ``!_``)."""

    function: str
    target: Node | None
    args: tuple[Node, ...]
    span: Span

    def children(self) -> tuple[Node, ...]:
        return ((self.target,) if self.target is not None else ()) + self.args


@dataclass(frozen=True, slots=True)
class ListLit(Node):
    elements: tuple[Node, ...]
    span: Span

    def children(self) -> tuple[Node, ...]:
        return self.elements


@dataclass(frozen=True, slots=True)
class MapLit(Node):
    entries: tuple[tuple[Node, Node], ...]
    span: Span

    def children(self) -> tuple[Node, ...]:
        return tuple(part for entry in self.entries for part in entry)


@dataclass(frozen=True, slots=True)
class Has(Node):
    """``has(operand.field)``: presence test, never an error for a missing key."""

    operand: Node
    field: str
    span: Span

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True, slots=True)
class Comprehension(Node):
    """``range.all(var, predicate)`` and friends; ``map`` may carry a filter (``map(v, p, t)``)."""

    macro: str  # all, exists, exists_one, map, filter
    range: Node
    var: str
    body: Node  # predicate (all/exists/exists_one/filter) or transform (map)
    filter: Node | None
    span: Span

    def children(self) -> tuple[Node, ...]:
        return (self.range, *((self.filter,) if self.filter is not None else ()), self.body)


@dataclass(frozen=True, slots=True)
class Bind(Node):
    """``cel.bind(var, init, body)``."""

    var: str
    init: Node
    body: Node
    span: Span

    def children(self) -> tuple[Node, ...]:
        return (self.init, self.body)


def walk(node: Node) -> Iterator[Node]:
    """Every node below and including ``node``, parents first."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children()))


def source_of(expression: str, node: Node) -> str:
    """The text ``node`` was parsed from."""
    return expression[node.span.start : node.span.end]


def conjuncts(node: Node) -> list[Node]:
    """The operands of a top-level ``a && b && c`` chain, left to right (just ``[node]`` otherwise)."""
    if isinstance(node, Call) and node.function == "_&&_" and node.target is None:
        return [part for arg in node.args for part in conjuncts(arg)]
    return [node]


# -- parsing --------------------------------------------------------------------------------------

_parser_lock = threading.Lock()
_parser: lark.Lark | None = None


def _ambiguous_literals(token: lark.Token) -> lark.Token:
    """``true``/``false`` lex as identifiers; make them BOOL_LIT tokens *with* their source position.

    celpy's own callback (``CELParser.ambiguous_literals``) builds the new token without one, which
    left a bare ``false`` with no span: its source text became the whole expression.
    """
    if token.value in {"true", "false"}:
        return lark.Token.new_borrow_pos("BOOL_LIT", token.value, token)
    return token


def _lark() -> lark.Lark:
    """The process's Lark parser for celpy's grammar, built on first use (about 0.1-0.3 s)."""
    global _parser  # noqa: PLW0603 -- one immutable parser per process, like celpy's own
    with _parser_lock:
        if _parser is None:
            grammar = (Path(celpy.__file__).parent / "cel.lark").read_text()
            _parser = lark.Lark(
                grammar,
                parser="lalr",
                start="expr",
                g_regex_flags=re.M,
                lexer_callbacks={"IDENT": _ambiguous_literals},
                propagate_positions=True,
                maybe_placeholders=False,
                priority="invert",
                tree_class=evaluation.TranspilerTree,
            )
        return _parser


def byte_length(expression: str) -> int:
    """Length in UTF-8 bytes, as Go's ``len(string)`` and the API validation count it."""
    return len(expression.encode("utf-8", "surrogatepass"))


def parse_tree(expression: str) -> evaluation.TranspilerTree:
    """Parse text into celpy's Lark tree (what the runners consume); syntax errors become compile errors."""
    try:
        tree = _lark().parse(expression)
    except lark.exceptions.UnexpectedInput as exc:
        line = getattr(exc, "line", None)
        column = getattr(exc, "column", None)
        detail = _syntax_detail(exc)
        raise CELCompileError(
            expression,
            f"Syntax error: {detail}",
            line=line if isinstance(line, int) and line > 0 else None,
            column=column if isinstance(column, int) and column > 0 else None,
        ) from exc
    except lark.exceptions.LarkError as exc:
        raise CELCompileError(expression, f"Syntax error: {str(exc).splitlines()[0]}") from exc
    depth = _depth(tree)
    if depth > MAX_PARSE_DEPTH:
        raise CELCompileError(expression, f"expression nesting exceeds the maximum depth ({MAX_PARSE_DEPTH})")
    return cast(evaluation.TranspilerTree, tree)


def _syntax_detail(exc: lark.exceptions.UnexpectedInput) -> str:
    if isinstance(exc, lark.exceptions.UnexpectedCharacters):
        return f"token recognition error at: {exc.char!r}"
    if isinstance(exc, lark.exceptions.UnexpectedToken):
        if exc.token.type == "$END":
            return "mismatched input '<EOF>'"
        return f"mismatched input {exc.token.value!r}"
    if isinstance(exc, lark.exceptions.UnexpectedEOF):
        return "mismatched input '<EOF>'"
    return str(exc).splitlines()[0]


def _depth(tree: LarkTree) -> int:
    deepest = 0
    stack: list[tuple[LarkTree, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in node.children if isinstance(child, lark.Tree))
    return deepest


def parse(expression: str) -> Node:
    """Parse a selector into a syntax tree; :class:`CELCompileError` for syntax, length or macro errors."""
    size = byte_length(expression)
    if size > MAX_EXPRESSION_LENGTH:
        raise CELCompileError(
            expression,
            f"expression is {size} bytes long (UTF-8); the limit is {MAX_EXPRESSION_LENGTH} bytes (10 KiB)",
        )
    return _Builder(expression).build(parse_tree(expression))


class _Builder:
    """Turns celpy's Lark tree into :class:`Node` objects, expanding macros as cel-go's parser does."""

    def __init__(self, expression: str) -> None:
        self.expression = expression

    def build(self, tree: LarkTree) -> Node:
        return self.node(tree)

    def error(self, message: str, span: Span) -> CELCompileError:
        return CELCompileError(self.expression, message, line=span.line, column=span.column)

    @staticmethod
    def span(item: LarkTree | lark.Token) -> Span:
        if isinstance(item, lark.Token):
            start = item.start_pos or 0
            return Span(start, item.end_pos or start, item.line or 1, item.column or 1)
        meta = item.meta
        return Span(meta.start_pos, meta.end_pos, meta.line, meta.column)

    def node(self, tree: LarkTree) -> Node:
        rule = tree.data
        kids = tree.children
        span = self.span(tree)
        if rule in {"expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication"}:
            if len(kids) == 1:
                return self.node(cast(LarkTree, kids[0]))
            if rule == "expr":
                cond, left, right = (self.node(cast(LarkTree, kid)) for kid in kids)
                return Call("_?_:_", None, (cond, left, right), span)
            if rule in {"conditionalor", "conditionaland"}:
                function = "_||_" if rule == "conditionalor" else "_&&_"
                left, right = (self.node(cast(LarkTree, kid)) for kid in kids)
                return Call(function, None, (left, right), span)
            operator_tree, right_tree = cast(tuple[LarkTree, LarkTree], kids)
            left = self.node(cast(LarkTree, operator_tree.children[0]))
            right = self.node(right_tree)
            return Call(_OPERATORS[operator_tree.data], None, (left, right), span)
        if rule == "unary":
            if len(kids) == 1:
                return self.node(cast(LarkTree, kids[0]))
            operator_tree, operand = cast(tuple[LarkTree, LarkTree], kids)
            function = "!_" if operator_tree.data == "unary_not" else "-_"
            return Call(function, None, (self.node(operand),), span)
        if rule in {"member", "primary"}:
            return self.node(cast(LarkTree, kids[0]))
        if rule == "paren_expr":
            return self.node(cast(LarkTree, kids[0]))
        if rule == "member_dot":
            return Select(self.node(cast(LarkTree, kids[0])), cast(lark.Token, kids[1]).value, span)
        if rule == "member_index":
            return Index(self.node(cast(LarkTree, kids[0])), self.node(cast(LarkTree, kids[1])), span)
        if rule == "member_dot_arg":
            return self.method_call(tree, span)
        if rule in {"ident_arg", "dot_ident_arg"}:
            return self.global_call(tree, span)
        if rule in {"ident", "dot_ident"}:
            return Ident(cast(lark.Token, kids[0]).value, span, root=rule == "dot_ident")
        if rule == "list_lit":
            return ListLit(self.exprlist(kids[0]) if kids else (), span)
        if rule == "map_lit":
            entries: list[tuple[Node, Node]] = []
            if kids:
                values = [self.node(cast(LarkTree, kid)) for kid in cast(LarkTree, kids[0]).children]
                entries = list(zip(values[0::2], values[1::2], strict=True))
            return MapLit(tuple(entries), span)
        if rule == "literal":
            token = cast(lark.Token, kids[0])
            return self.literal(token, self.span(token))
        if rule == "member_object":
            raise self.error("message construction (Type{field: value}) is not available in DRA selectors", span)
        raise self.error(f"unsupported syntax ({rule})", span)  # pragma: no cover -- grammar is closed

    def exprlist(self, item: LarkTree | lark.Token) -> tuple[Node, ...]:
        return tuple(self.node(cast(LarkTree, kid)) for kid in cast(LarkTree, item).children)

    def literal(self, token: lark.Token, span: Span) -> Literal:
        text = token.value
        kind = token.type
        try:
            if kind == "INT_LIT":
                negative = text.startswith("-")
                digits = text[1:] if negative else text
                value = int(digits, 16) if digits[:2].lower() == "0x" else int(digits)
                value = -value if negative else value
                if not -(1 << 63) <= value < 1 << 63:
                    raise self.error(f"invalid int literal {text!r}: out of range", span)
                return Literal("int", value, text, span)
            if kind == "UINT_LIT":
                digits = text[:-1]
                value = int(digits, 16) if digits[:2].lower() == "0x" else int(digits)
                if not 0 <= value < 1 << 64:
                    raise self.error(f"invalid uint literal {text!r}: out of range", span)
                return Literal("uint", value, text, span)
            if kind == "FLOAT_LIT":
                return Literal("double", float(text), text, span)
            if kind in {"STRING_LIT", "MLSTRING_LIT"}:
                return Literal("string", str(evaluation.celstr(token)), text, span)
            if kind == "BYTES_LIT":
                return Literal("bytes", bytes(evaluation.celbytes(token)), text, span)
            if kind == "BOOL_LIT":
                return Literal("bool", text == "true", text, span)
            if kind == "NULL_LIT":
                return Literal("null", None, text, span)
        except (ValueError, UnicodeError) as exc:
            raise self.error(f"invalid literal {text!r}: {exc}", span) from exc
        raise self.error(f"unsupported literal {text!r}", span)  # pragma: no cover

    def global_call(self, tree: LarkTree, span: Span) -> Node:
        name = cast(lark.Token, tree.children[0]).value
        args = self.exprlist(tree.children[1]) if len(tree.children) > 1 else ()
        if name == "has" and tree.data == "ident_arg":
            if len(args) != 1 or not isinstance(args[0], Select):
                raise self.error("invalid argument to has() macro", span)
            return Has(args[0].operand, args[0].field, span)
        return Call(name, None, args, span)

    def method_call(self, tree: LarkTree, span: Span) -> Node:
        target = self.node(cast(LarkTree, tree.children[0]))
        name = cast(lark.Token, tree.children[1]).value
        args = self.exprlist(tree.children[2]) if len(tree.children) > 2 else ()
        if isinstance(target, Ident) and not target.root:
            qualified = f"{target.name}.{name}"
            if qualified == "cel.bind":
                if len(args) != 3:
                    raise self.error("cel.bind() takes exactly three arguments", span)
                return Bind(self.variable(args[0], "cel.bind"), args[1], args[2], span)
            if qualified in NAMESPACED_FUNCTIONS:
                return Call(qualified, None, args, span)
        if name in MACRO_COMPREHENSIONS and args:
            if len(args) == 2:
                return Comprehension(name, target, self.variable(args[0], name), args[1], None, span)
            if len(args) == 3 and name == "map":
                return Comprehension(name, target, self.variable(args[0], name), args[2], args[1], span)
            if len(args) == 3:
                raise self.error(
                    f"two-variable comprehensions ({name}(k, v, ...)) are not supported by migdra's CEL evaluator",
                    span,
                )
        return Call(name, target, args, span)

    def variable(self, node: Node, macro: str) -> str:
        if not isinstance(node, Ident) or node.root:
            raise self.error(f"{macro}() variable name must be a simple identifier", node.span)
        return node.name
