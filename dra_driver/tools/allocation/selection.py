"""Does a device satisfy a class's and a request's CEL selectors?  Evaluated through dra_driver.tools.cel.

With caching (the default), each expression is compiled once per process (kube-scheduler's CEL cache
does the same), each device is converted to a CEL value once and reused by every selector, and each
(expression, device) verdict is remembered across attempts: a selector is a pure function of an
immutable device, so the verdict (or the runtime error) cannot change while the device dict is the
same object.  The search additionally remembers each (device, request) verdict for the attempt, as
kube-scheduler does.  Without caching (the benchmark's baseline) every evaluation compiles its
expression and converts its device.  A compile or runtime error aborts the attempt, worded as
kube-scheduler words it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dra_driver.jsontypes import JSON
from dra_driver.tools.allocation.devices import DeviceID, device_id_text
from dra_driver.tools.allocation.errors import AllocationError
from dra_driver.tools.cel.device import ActivationCache, build_device_activation
from dra_driver.tools.cel.errors import CELCompileError, CELError
from dra_driver.tools.cel.program import CompiledSelector, compile_selector

# Big enough for every device of ~80 nodes of 8 GPUs, so a scheduling loop over a cluster keeps them.
ALLOCATION_ACTIVATIONS = ActivationCache(maxsize=16384)
VERDICT_CACHE_SIZE = 1 << 18  # (expression, device) pairs; emptied when full (a few tens of MiB at most)


class VerdictCache:
    """(expression, driver, device dict) -> True/False or the CEL error, by identity of the dict."""

    def __init__(self, maxsize: int = VERDICT_CACHE_SIZE) -> None:
        self.maxsize = maxsize
        self._entries: dict[tuple[str, str, int], tuple[JSON, bool | CELError]] = {}

    def get(self, expression: str, driver: str, device: JSON) -> bool | CELError | None:
        entry = self._entries.get((expression, driver, id(device)))
        if entry is None or entry[0] is not device:
            return None
        return entry[1]

    def put(self, expression: str, driver: str, device: JSON, verdict: bool | CELError) -> None:
        if len(self._entries) >= self.maxsize:
            self._entries.clear()
        self._entries[(expression, driver, id(device))] = (device, verdict)

    def clear(self) -> None:
        self._entries.clear()


VERDICTS = VerdictCache()


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

    def all_match(self, expressions: Sequence[str], device: JSON, device_id: DeviceID, owner: str) -> bool:
        """Whether every selector accepts the device; ``owner`` (``class X``/``claim ns/name``) for errors."""
        for index, expression in enumerate(expressions):
            verdict = VERDICTS.get(expression, device_id[0], device) if self.caching else None
            if verdict is None:
                verdict = self._evaluate(expression, device, device_id, owner, index)
            if isinstance(verdict, CELError):
                where = f"{owner}: selector #{index} on device {device_id_text(device_id)}"
                raise AllocationError(f"{where}: CEL runtime error: {verdict.message}") from verdict
            if not verdict:
                return False
        return True

    def _evaluate(self, expression: str, device: JSON, device_id: DeviceID, owner: str, index: int) -> bool | CELError:
        program = self._program(expression, owner, index)
        self.evaluations += 1
        verdict: bool | CELError
        try:
            if self.caching:
                verdict = program.matches(device, driver=device_id[0], activations=ALLOCATION_ACTIVATIONS)
            else:
                verdict = program.matches(build_device_activation(device, device_id[0]))
        except CELError as exc:
            verdict = exc
        if self.caching:
            VERDICTS.put(expression, device_id[0], device, verdict)
        return verdict

    def _program(self, expression: str, owner: str, index: int) -> CompiledSelector:
        try:
            return compile_selector(expression) if self.caching else CompiledSelector(expression)
        except CELCompileError as exc:
            raise AllocationError(f"{owner}: selector #{index}: CEL compile error: {exc.message}") from exc
