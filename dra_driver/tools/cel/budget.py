"""The runtime budget of one evaluation: Kubernetes' cost limit, plus a wall-clock guard.

Owns: counting cost units while celpy evaluates (comprehension iterations, and the size of strings and
lists that library functions build), stopping the evaluation when the budget runs out, and the
"current budget" of this thread.

Must never: be consulted outside an evaluation, or be shared between threads.

Kubernetes stops a selector at ``cel.CostLimit(1_000_000)`` with "operation cancelled: actual cost
limit exceeded".  celpy has no cost tracker, and Python is 100-1000x slower than cel-go, so migdra
counts cheaply (one unit per comprehension step, ``ceil(size / 10)`` for building a string or list,
as cel-go charges for string operations) and also stops any evaluation that runs longer than
``max_seconds``.  Every path that can take super-linear time in CEL goes through one of those two
counters, so no expression can hang the process.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

# Kubernetes' per-evaluation runtime limit for DRA selectors (CELSelectorExpressionMaxCost).
KUBERNETES_COST_LIMIT = 1_000_000
DEFAULT_MAX_SECONDS = 0.5
# Reading the clock every step would cost more than the step; every 64th charge is often enough.
_CLOCK_EVERY = 64

COST_LIMIT_MESSAGE = "operation cancelled: actual cost limit exceeded"


@dataclass(frozen=True, slots=True)
class Limits:
    """How much one evaluation may spend.  ``max_seconds=None`` turns the wall-clock guard off."""

    max_cost: int = KUBERNETES_COST_LIMIT
    max_seconds: float | None = DEFAULT_MAX_SECONDS


class BudgetExhausted(Exception):
    """Raised inside celpy to stop the evaluation.

    Deliberately not one of the exception classes celpy converts into a CEL error value, so that
    neither ``false && <exhausted>`` nor ``exists()`` can absorb it: the whole evaluation stops.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Budget:
    """The spending of one evaluation."""

    __slots__ = ("_calls", "cost", "deadline", "limits")

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.cost = 0
        self._calls = 0
        self.deadline = None if limits.max_seconds is None else time.monotonic() + limits.max_seconds

    def charge(self, units: int) -> None:
        """Spend ``units``; raise :class:`BudgetExhausted` past the cost limit or the deadline."""
        self.cost += units
        if self.cost > self.limits.max_cost:
            raise BudgetExhausted(COST_LIMIT_MESSAGE)
        self._calls += 1
        if self.deadline is not None and self._calls % _CLOCK_EVERY == 0 and time.monotonic() > self.deadline:
            raise BudgetExhausted(
                f"{COST_LIMIT_MESSAGE} (migdra wall-clock guard: evaluation ran longer than "
                f"{self.limits.max_seconds:g}s)"
            )


_current = threading.local()


def current() -> Budget | None:
    """The budget of the evaluation running on this thread, if any."""
    budget: Budget | None = getattr(_current, "budget", None)
    return budget


def set_current(budget: Budget | None) -> Budget | None:
    """Install ``budget`` for this thread; return the previous one (evaluations may nest in tools)."""
    previous = current()
    _current.budget = budget
    return previous


def charge_size(size: int) -> None:
    """Charge for building a value of ``size`` characters or elements (cel-go: 0.1 per character)."""
    budget = current()
    if budget is not None:
        budget.charge(1 + size // 10)
