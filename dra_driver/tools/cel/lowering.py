"""Rewriting a checked syntax tree into CEL text that celpy's runners evaluate with cel-go's semantics.

Owns: the rewrites that close celpy's gaps without touching celpy itself:

- ``cel.bind(x, init, body)``      -> ``[init].map(x, body)[0]``  (celpy has no bind; map binds ``x``)
- ``e.f``                          -> ``_migdra_select(e, 'f')``, for the CompiledRunner only: it
                                      calls ``e.get('f')``, an AttributeError on a string that escapes
                                      ``false && ...`` (the InterpretedRunner gets this right, and a
                                      function call costs it more than a field selection)
- ``has(e.f)``                     -> ``_migdra_has(e, 'f')``  (celpy's CompiledRunner returns a
                                      Python bool, and maps *any* error in ``e`` to false)
- ``l.min()``                      -> ``l._migdra_list_min()``  (celpy treats ``min`` as a macro)
- ``l.exists_one(x, p)``           -> ``_migdra_exactly_one(l.map(x, p))``  (celpy counts error values
                                      as true)
- ``l.filter(x, p)``               -> ``_migdra_keep(l.map(x, [x, p]))``  (same problem)
- ``l.map(x, t)``                  -> ``_migdra_strict_list(l.map(x, t))``  (an error in one element
                                      is the result, as in cel-go, not an error value in a list)
- ``l.map(x, p, t)``               -> the same over ``_migdra_keep(l.map(x, [x, p]))``
- ``sets.contains(a, b)`` etc.     -> ``_migdra_sets_contains(a, b)``  (namespaced names)

and re-emitting everything else with the fewest parentheses the grammar needs, because every extra
parenthesis adds ten levels to the tree celpy walks recursively.

Must never: change what an expression means, or accept what the checker rejected.
"""

from __future__ import annotations

from dra_driver.tools.cel.functions import EXACTLY_ONE, HAS, INTERNAL_NAMES, KEEP, SELECT, STRICT_LIST
from dra_driver.tools.cel.syntax import (
    IN,
    Bind,
    Call,
    Comprehension,
    Has,
    Ident,
    Index,
    ListLit,
    Literal,
    MapLit,
    Node,
    Select,
)

_CONDITIONAL, _OR, _AND, _RELATION, _ADDITION, _MULTIPLICATION, _UNARY, _MEMBER, _PRIMARY = range(1, 10)
_BINARY = {
    "_||_": ("||", _OR),
    "_&&_": ("&&", _AND),
    "_<_": ("<", _RELATION),
    "_<=_": ("<=", _RELATION),
    "_>_": (">", _RELATION),
    "_>=_": (">=", _RELATION),
    "_==_": ("==", _RELATION),
    "_!=_": ("!=", _RELATION),
    IN: ("in", _RELATION),
    "_+_": ("+", _ADDITION),
    "_-_": ("-", _ADDITION),
    "_*_": ("*", _MULTIPLICATION),
    "_/_": ("/", _MULTIPLICATION),
    "_%_": ("%", _MULTIPLICATION),
}


def lower(tree: Node, *, select_as_function: bool = True) -> str:
    """CEL source for celpy, equivalent to ``tree`` under cel-go's semantics."""
    return _Lowering(select_as_function).emit(tree)[0]


class _Lowering:
    def __init__(self, select_as_function: bool) -> None:
        self.select_as_function = select_as_function

    def wrap(self, node: Node, minimum: int) -> str:
        text, precedence = self.emit(node)
        return text if precedence >= minimum else f"({text})"

    def args(self, nodes: tuple[Node, ...]) -> str:
        return ", ".join(self.emit(node)[0] for node in nodes)

    def emit(self, node: Node) -> tuple[str, int]:
        """(text, precedence of its outermost construct)."""
        if isinstance(node, Literal):
            return node.text, _UNARY if node.text.startswith("-") else _PRIMARY
        if isinstance(node, Ident):
            return ("." if node.root else "") + node.name, _PRIMARY
        if isinstance(node, Select):
            if self.select_as_function:
                return f"{SELECT}({self.emit(node.operand)[0]}, '{node.field}')", _PRIMARY
            return f"{self.wrap(node.operand, _MEMBER)}.{node.field}", _MEMBER
        if isinstance(node, Index):
            return f"{self.wrap(node.operand, _MEMBER)}[{self.emit(node.index)[0]}]", _MEMBER
        if isinstance(node, ListLit):
            return f"[{self.args(node.elements)}]", _PRIMARY
        if isinstance(node, MapLit):
            entries = ", ".join(f"{self.emit(k)[0]}: {self.emit(v)[0]}" for k, v in node.entries)
            return "{" + entries + "}", _PRIMARY
        if isinstance(node, Has):
            return f"{HAS}({self.emit(node.operand)[0]}, '{node.field}')", _PRIMARY
        if isinstance(node, Bind):
            return f"[{self.emit(node.init)[0]}].map({node.var}, {self.emit(node.body)[0]})[0]", _MEMBER
        if isinstance(node, Comprehension):
            return self.comprehension(node)
        if isinstance(node, Call):
            return self.call(node)
        raise AssertionError(f"unknown node {node!r}")  # pragma: no cover

    def comprehension(self, node: Comprehension) -> tuple[str, int]:
        source = self.wrap(node.range, _MEMBER)
        body = self.emit(node.body)[0]
        if node.macro in {"all", "exists"}:
            return f"{source}.{node.macro}({node.var}, {body})", _MEMBER
        if node.macro == "exists_one":
            return f"{EXACTLY_ONE}({source}.map({node.var}, {body}))", _PRIMARY
        if node.macro == "filter":
            return f"{KEEP}({source}.map({node.var}, [{node.var}, {body}]))", _PRIMARY
        if node.filter is not None:  # map(x, predicate, transform)
            kept = f"{KEEP}({source}.map({node.var}, [{node.var}, {self.emit(node.filter)[0]}]))"
            return f"{STRICT_LIST}({kept}.map({node.var}, {body}))", _PRIMARY
        return f"{STRICT_LIST}({source}.map({node.var}, {body}))", _PRIMARY

    def call(self, node: Call) -> tuple[str, int]:
        function = node.function
        if function in _BINARY and node.target is None and len(node.args) == 2:
            symbol, precedence = _BINARY[function]
            left, right = node.args
            return f"{self.wrap(left, precedence)} {symbol} {self.wrap(right, precedence + 1)}", precedence
        if function == "!_":
            return f"!{self.wrap(node.args[0], _UNARY)}", _UNARY
        if function == "-_":
            return f"- {self.wrap(node.args[0], _UNARY)}", _UNARY
        if function == "_?_:_":
            condition, when_true, when_false = node.args
            return (
                f"{self.wrap(condition, _OR)} ? {self.wrap(when_true, _OR)} : {self.wrap(when_false, _CONDITIONAL)}",
                _CONDITIONAL,
            )
        # Namespaced functions always; ``min`` only as a method (celpy's macro is the method form).
        name = INTERNAL_NAMES.get(function, function) if function != "min" or node.target is not None else function
        if node.target is None:
            return f"{name}({self.args(node.args)})", _PRIMARY
        return f"{self.wrap(node.target, _MEMBER)}.{name}({self.args(node.args)})", _MEMBER
