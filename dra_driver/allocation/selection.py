"""Does a device satisfy a class's and a request's CEL selectors?  Evaluated through dra_driver.cel.

With caching (the default, and what kube-scheduler does with its CEL cache), each expression is
compiled once per process and each device is converted to a CEL value once and reused by every
selector; the search additionally remembers each (device, request) verdict for the attempt.  Without
caching (the benchmark's baseline) every evaluation compiles its expression and converts its device.
A compile or runtime error aborts the attempt, worded as kube-scheduler words it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dra_driver.allocation.devices import DeviceID, device_id_text
from dra_driver.allocation.errors import AllocationError
from dra_driver.cel.device import ActivationCache, build_device_activation
from dra_driver.cel.errors import CELCompileError, CELError
from dra_driver.cel.program import CompiledSelector, compile_selector

JSON = Mapping[str, Any]

# Big enough for every device of ~80 nodes of 8 GPUs, so a scheduling loop over a cluster keeps them.
ALLOCATION_ACTIVATIONS = ActivationCache(maxsize=16384)


def selector_expression(selector: JSON) -> str | None:
    cel = selector.get("cel")
    if not isinstance(cel, Mapping):
        return None
    expression = cel.get("expression")
    return expression if isinstance(expression, str) else None


class SelectorEvaluator:
    """Evaluates selectors for one allocation attempt; ``caching=False`` is the uncached baseline."""

    def __init__(self, caching: bool = True) -> None:
        self.caching = caching
        self.evaluations = 0

    def all_match(self, selectors: Sequence[JSON], device: JSON, device_id: DeviceID, owner: str) -> bool:
        """Whether every selector accepts the device; ``owner`` (``class X``/``claim ns/name``) for errors."""
        for index, selector in enumerate(selectors):
            expression = selector_expression(selector)
            if expression is None:
                raise AllocationError(f"{owner}: selector #{index}: CEL expression empty (unsupported selector type?)")
            program = self._program(expression, owner, index)
            self.evaluations += 1
            try:
                if self.caching:
                    matched = program.matches(device, driver=device_id[0], activations=ALLOCATION_ACTIVATIONS)
                else:
                    matched = program.matches(build_device_activation(device, device_id[0]))
            except CELError as exc:
                where = f"{owner}: selector #{index} on device {device_id_text(device_id)}"
                raise AllocationError(f"{where}: CEL runtime error: {exc.message}") from exc
            if not matched:
                return False
        return True

    def _program(self, expression: str, owner: str, index: int) -> CompiledSelector:
        try:
            return compile_selector(expression) if self.caching else CompiledSelector(expression)
        except CELCompileError as exc:
            raise AllocationError(f"{owner}: selector #{index}: CEL compile error: {exc.message}") from exc
