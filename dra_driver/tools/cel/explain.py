"""Why a selector does not match a device: which top-level ``&&`` clause was false, or which raised.

Owns: splitting a selector into its top-level conjuncts (by source span, so the clauses are shown as
the admin wrote them), evaluating each on its own, and a one-line reason.

Must never: change the verdict.  The verdict is the whole selector's (``CompiledSelector.matches``);
the clauses only explain it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dra_driver.tools.cel.device import DeviceActivation
from dra_driver.tools.cel.errors import CELError, CELRuntimeError
from dra_driver.tools.cel.lookups import device_lookup
from dra_driver.tools.cel.program import DEFAULT_ACTIVATIONS, CompiledSelector, compile_selector
from dra_driver.tools.cel.syntax import conjuncts, source_of, walk

_NO_SUCH_KEY = "no such key: "


class Outcome(enum.StrEnum):
    MATCH = "match"
    NO_MATCH = "no match"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class ClauseResult:
    index: int  # 1-based
    text: str
    outcome: Outcome
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Explanation:
    device: str
    outcome: Outcome
    reason: str | None
    error: str | None
    clauses: tuple[ClauseResult, ...]


def explain(program: CompiledSelector, device: Mapping[str, Any] | DeviceActivation, *, driver: str) -> Explanation:
    """The verdict of ``program`` on ``device`` and, unless it matched, the clause that decided it."""
    activation = device if isinstance(device, DeviceActivation) else DEFAULT_ACTIVATIONS.get(device, driver)
    try:
        matched = program.matches(activation)
    except CELRuntimeError as exc:
        clauses = _clauses(program, activation)
        culprit = next((c for c in clauses if c.outcome is Outcome.ERROR), None)
        where = _raised_by(program, exc.message)
        if culprit is not None and len(clauses) > 1:
            where += f" (in clause {culprit.index} of {len(clauses)}: {culprit.text})"
        return Explanation(activation.name, Outcome.ERROR, f"{exc.message}{where}", exc.message, clauses)
    if matched:
        return Explanation(activation.name, Outcome.MATCH, None, None, ())
    clauses = _clauses(program, activation)
    false = next((c for c in clauses if c.outcome is Outcome.NO_MATCH), None)
    if false is None or len(clauses) == 1:
        reason = "the expression is false"
    else:
        reason = f"clause {false.index} of {len(clauses)} is false: {false.text}"
    return Explanation(activation.name, Outcome.NO_MATCH, reason, None, clauses)


def _raised_by(program: CompiledSelector, message: str) -> str:
    """`` from device.attributes['d'].x`` when a ``no such key: x`` names a lookup in the expression."""
    if not message.startswith(_NO_SUCH_KEY):
        return ""
    key = message.removeprefix(_NO_SUCH_KEY)
    lookups = {lookup.describe() for node in walk(program.tree) if (lookup := device_lookup(node)) is not None}
    named = sorted(text for text in lookups if text.endswith(f".{key}"))
    return f" from {' or '.join(named)}" if named else ""


def _clauses(program: CompiledSelector, activation: DeviceActivation) -> tuple[ClauseResult, ...]:
    parts = conjuncts(program.tree)
    results: list[ClauseResult] = []
    for index, part in enumerate(parts, start=1):
        text = source_of(program.expression, part).strip()
        try:
            clause = compile_selector(text, runner=program.runner) if len(parts) > 1 else program
            outcome = Outcome.MATCH if clause.matches(activation) else Outcome.NO_MATCH
            results.append(ClauseResult(index, text, outcome))
        except CELError as exc:
            results.append(ClauseResult(index, text, Outcome.ERROR, exc.message))
    return tuple(results)
