"""The runtime functions of the DRA CEL environment, as celpy calls them, and their registry.

``FUNCTIONS`` maps CEL names (operators as ``_&&_``, ``_==_``, ``_[_]``...) to Python functions in the
modules of this package: ``values`` (kinds, equality, ordering, error handling), ``operators``,
``strings``, ``lists`` and ``kube`` (quantity and semver).  Names starting ``_migdra_`` are what
``lowering.py`` rewrites macros and celpy's blind spots into; the checker never accepts them from users.

Must never: define a function anywhere but at module level under its own name.  celpy's
CompiledRunner writes each function into generated Python source as ``<module>.<qualname>`` and looks
it up by that text; a lambda, a closure or a renamed alias would break it.

Conventions: a function receives celpy values (``celtypes.*``, our Quantity/Semver, and celpy's
``CELEvalError`` when an argument already failed); ``&&``, ``||`` and ``?:`` are the exception: they
receive their first operand as a value and the others unevaluated (``&&``/``||`` a thunk, ``?:`` the
branches, of which it returns the one to evaluate), so the runners can short-circuit.  A function
raises ``TypeError`` for "no such overload", ``ValueError`` for a failed conversion, ``KeyError`` for
a missing key and ``IndexError`` for an index out of range; ``values.propagating`` turns an erroneous
argument into the result and those exceptions into CEL error values, and
``environment.translate_error`` words them as Kubernetes does.  The few undecorated hot operators
(``&&``, ``==``, ordering) only ever raise ``TypeError``, which both of celpy's runners handle alike.
"""

from __future__ import annotations

from dra_driver.tools.cel.functions.kube import (
    as_approximate_float,
    as_integer,
    compare_to,
    is_greater_than,
    is_integer,
    is_less_than,
    is_quantity,
    is_semver,
    major,
    minor,
    patch,
    quantity,
    quantity_add,
    quantity_sub,
    semver,
    sign,
)
from dra_driver.tools.cel.functions.lists import (
    is_sorted,
    list_max,
    list_min,
    list_sum,
    sets_contains,
    sets_equivalent,
    sets_intersects,
)
from dra_driver.tools.cel.functions.operators import (
    add,
    choose,
    contained_in,
    divide,
    equals,
    exactly_one,
    greater,
    greater_equal,
    has_field,
    index,
    keep,
    less,
    less_equal,
    logical_and,
    logical_not,
    logical_or,
    modulo,
    multiply,
    negate,
    not_equals,
    select,
    size,
    strict_list,
    subtract,
)
from dra_driver.tools.cel.functions.strings import (
    char_at,
    contains,
    ends_with,
    find,
    find_all,
    format_string,
    index_of,
    join,
    last_index_of,
    lower_ascii,
    matches,
    quote,
    replace,
    split,
    starts_with,
    substring,
    trim,
    upper_ascii,
)
from dra_driver.tools.cel.functions.values import Function, kind_of

# Internal names the lowering pass emits; the checker never accepts them from users.
HAS = "_migdra_has"
SELECT = "_migdra_select"
LIST_MIN = "_migdra_list_min"
EXACTLY_ONE = "_migdra_exactly_one"
KEEP = "_migdra_keep"
STRICT_LIST = "_migdra_strict_list"
INTERNAL_NAMES = {
    "sets.contains": "_migdra_sets_contains",
    "sets.equivalent": "_migdra_sets_equivalent",
    "sets.intersects": "_migdra_sets_intersects",
    "strings.quote": "_migdra_strings_quote",
    "min": LIST_MIN,  # celpy treats .min() as a macro of its own
}

FUNCTIONS: dict[str, Function] = {
    "_&&_": logical_and,
    "_||_": logical_or,
    "!_": logical_not,
    "_?_:_": choose,
    "_==_": equals,
    "_!=_": not_equals,
    "_<_": less,
    "_<=_": less_equal,
    "_>_": greater,
    "_>=_": greater_equal,
    "_+_": add,
    "_-_": subtract,
    "_*_": multiply,
    "_/_": divide,
    "_%_": modulo,
    "-_": negate,
    "_[_]": index,
    "_in_": contained_in,
    "size": size,
    "contains": contains,
    "startsWith": starts_with,
    "endsWith": ends_with,
    "matches": matches,
    "find": find,
    "findAll": find_all,
    "charAt": char_at,
    "indexOf": index_of,
    "lastIndexOf": last_index_of,
    "lowerAscii": lower_ascii,
    "upperAscii": upper_ascii,
    "trim": trim,
    "replace": replace,
    "split": split,
    "substring": substring,
    "join": join,
    "format": format_string,
    "isSorted": is_sorted,
    "sum": list_sum,
    "max": list_max,
    "quantity": quantity,
    "isQuantity": is_quantity,
    "sign": sign,
    "asApproximateFloat": as_approximate_float,
    "asInteger": as_integer,
    "isInteger": is_integer,
    "add": quantity_add,
    "sub": quantity_sub,
    "compareTo": compare_to,
    "isGreaterThan": is_greater_than,
    "isLessThan": is_less_than,
    "semver": semver,
    "isSemver": is_semver,
    "major": major,
    "minor": minor,
    "patch": patch,
    HAS: has_field,
    SELECT: select,
    LIST_MIN: list_min,
    EXACTLY_ONE: exactly_one,
    KEEP: keep,
    STRICT_LIST: strict_list,
    INTERNAL_NAMES["sets.contains"]: sets_contains,
    INTERNAL_NAMES["sets.equivalent"]: sets_equivalent,
    INTERNAL_NAMES["sets.intersects"]: sets_intersects,
    INTERNAL_NAMES["strings.quote"]: quote,
}


__all__ = ["EXACTLY_ONE", "FUNCTIONS", "HAS", "INTERNAL_NAMES", "KEEP", "SELECT", "STRICT_LIST", "kind_of"]
