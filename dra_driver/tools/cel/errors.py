"""The errors of migdra's DRA CEL environment.

    MigdraError                      dra_driver.errors
     └── CELError                    anything about one CEL selector; carries ``expression``
          ├── CELCompileError        the expression can never run: syntax, undeclared names, wrong
          │                          types, a non-bool result, over 10 KiB.  Permanent; kube-apiserver
          │                          rejects the object that holds it.
          └── CELRuntimeError        evaluating against one device failed: ``no such key``, ``no such
               │                     overload``, a non-bool result.  Permanent for that device; in
               │                     Kubernetes it aborts the pod's whole scheduling attempt, so the
               │                     caller must not treat it as "device does not match".
               ├── CELCostLimitError the runtime budget ran out (``actual cost limit exceeded``).
               └── DeviceValueError  the device object itself cannot be turned into a CEL value
                                     (malformed attribute or capacity); a publisher bug.

Messages follow cel-go and Kubernetes wording where one exists, so an admin can search for them.
"""

from __future__ import annotations

from dra_driver.errors import MigdraError


class CELError(MigdraError):
    """One selector expression could not be compiled or evaluated; ``expression`` is its source."""

    kind = "CEL error"

    def __init__(self, expression: str, message: str) -> None:
        super().__init__(f"{self.kind}: {message}")
        self.expression = expression
        self.message = message


class CELCompileError(CELError):
    """The expression is invalid in the DRA environment; ``line``/``column`` (1-based) when known."""

    kind = "CEL compile error"

    def __init__(self, expression: str, message: str, *, line: int | None = None, column: int | None = None) -> None:
        super().__init__(expression, message)
        self.line = line
        self.column = column

    def details(self) -> str:
        """cel-go's multi-line form: ``ERROR: <input>:L:C: message`` with the source line and a caret."""
        if self.line is None or self.column is None:
            return f"ERROR: <input>: {self.message}"
        lines = self.expression.splitlines() or [""]
        source = lines[self.line - 1] if 0 < self.line <= len(lines) else ""
        caret = "." * (self.column - 1) + "^"
        return f"ERROR: <input>:{self.line}:{self.column}: {self.message}\n | {source}\n | {caret}"


class CELRuntimeError(CELError):
    """Evaluation against one device failed; Kubernetes would abort the scheduling attempt."""

    kind = "CEL runtime error"


class CELCostLimitError(CELRuntimeError):
    """The per-evaluation budget (cost units or wall-clock guard) ran out."""


class DeviceValueError(CELRuntimeError):
    """The device dict cannot become the ``device`` variable (e.g. an attribute with no value)."""
