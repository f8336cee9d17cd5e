"""Which device lookups in a selector can raise at run time, given the guards around them.

Owns: the facts a sub-expression establishes when it is true or false (``device.driver == 'd'``,
``'x' in device.attributes['d']``, ``has(device.attributes['d'].x)``, ``...type == 'mig'``), how
``&&``, ``||``, ``!`` and ``?:`` pass them on (cel-go absorbs an error on one side of ``&&``/``||``
when the other side decides, so a guard may stand on either side, provided it cannot fail itself),
and the verdict for every ``device.attributes[d][x]`` / ``device.capacity[d][x]`` lookup.

Must never: evaluate, or decide severity or wording for users (``lint.py`` does).

What can raise, for a driver ``D`` (migdra's domain is ``D``):
- a lookup in ``D`` or in ``resource.kubernetes.io`` on a device of another driver (the domain is
  empty there) unless ``device.driver == D`` or a presence test guards it;
- a migdra attribute that is not always published (``numaNode``) or only on one device type
  (``profile`` only on MIG devices) unless a presence test or ``type == ...`` guards it;
- any lookup in a foreign domain, unless a presence test or that driver's ``device.driver`` guard
  stands before it (we cannot know what another driver publishes).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from dra_driver.devicemodel.vocabulary import (
    ATTRIBUTES,
    SHARE_CAPACITIES,
    SHARED_ATTRIBUTE,
    DeviceType,
    published_capacity_ids,
)
from dra_driver.tools.cel.lookups import DeviceLookup, device_lookup, device_map
from dra_driver.tools.cel.syntax import IN, Bind, Call, Comprehension, Has, Ident, Literal, Node, Select

# A fact is a tuple: ("driver", d) | ("has", kind, d, x) | ("domain", kind, d) | ("type", d, t)
Fact = tuple[str, ...]
Facts = frozenset[Fact]
_NONE: Facts = frozenset()
_LOGICAL = frozenset({"_&&_", "_||_", "_?_:_"})


class Risk(enum.StrEnum):
    """Why a lookup can raise ``no such key``."""

    FOREIGN_DEVICE = "foreign-device"  # our domain, but the device may belong to another driver
    OPTIONAL = "optional"  # migdra publishes it only when known
    DEVICE_TYPE = "device-type"  # migdra publishes it on one device type only
    SHARED_ONLY = "shared-only"  # a capacity migdra publishes on shared GPU-instance devices only
    FOREIGN_DOMAIN = "foreign-domain"  # another driver's domain (or a standard name migdra lacks)
    UNPUBLISHED = "unpublished"  # our domain, a name migdra never publishes (lint names it as such)


@dataclass(frozen=True, slots=True)
class RiskyLookup:
    lookup: DeviceLookup
    risk: Risk
    detail: str


@dataclass(frozen=True, slots=True)
class _Spec:
    always: bool
    on: frozenset[DeviceType]


class GuardAnalysis:
    """Finds unguarded lookups for one driver name against migdra's vocabulary."""

    def __init__(self, driver: str) -> None:
        self.driver = driver
        self.specs: dict[tuple[str, str], _Spec] = {}
        for spec in ATTRIBUTES:
            domain, _, ident = spec.qualified(driver).rpartition("/")
            self.specs[(domain, ident)] = _Spec(spec.always, spec.on)
        self.capacities = published_capacity_ids(driver).get(driver, frozenset())

    # -- facts ------------------------------------------------------------------------------------

    def facts(self, node: Node, positive: bool, aliases: Mapping[str, DeviceLookup]) -> Facts:
        """What holds whenever ``node`` evaluates (without error) to ``positive``."""
        if isinstance(node, Call) and node.target is None:
            if node.function == "_&&_":
                left, right = (self.facts(arg, positive, aliases) for arg in node.args)
                return left | right if positive else left & right
            if node.function == "_||_":
                left, right = (self.facts(arg, positive, aliases) for arg in node.args)
                return left & right if positive else left | right
            if node.function == "!_":
                return self.facts(node.args[0], not positive, aliases)
        if isinstance(node, Bind):
            return self.facts(node.body, positive, self._bind_aliases(node, aliases))
        facts = set(self._presence(node, aliases))  # a value of either polarity means no lookup failed
        if isinstance(node, Call) and node.function in {"_==_", "_!=_"}:
            equal = Call("_==_", None, node.args, node.span)
            if positive == (node.function == "_==_"):
                facts |= self._positive(equal, aliases)
            else:
                facts |= self._other_types(self._positive(equal, aliases))
        elif positive:
            facts |= self._positive(node, aliases)
        return frozenset(self._closure(facts))

    def _other_types(self, equal_facts: set[Fact]) -> set[Fact]:
        """``type != 'gpu'`` on migdra's devices means ``type == 'mig'``: there are only the two types."""
        names = {t.value for t in DeviceType}
        found: set[Fact] = set()
        for fact in equal_facts:
            if fact[0] == "type" and fact[1] == self.driver and fact[2] in names:
                found |= {("type", self.driver, other) for other in names - {fact[2]}}
        return found

    def _positive(self, node: Node, aliases: Mapping[str, DeviceLookup]) -> set[Fact]:
        facts: set[Fact] = set()
        if isinstance(node, Has):
            lookup = device_lookup(Select(node.operand, node.field, node.span), aliases)
            if lookup is not None:
                facts.add(_presence_fact(lookup))
        if isinstance(node, Call) and node.function == "_==_":
            for value, other in (node.args, node.args[::-1]):
                if not (isinstance(other, Literal) and other.kind == "string"):
                    continue
                if _is_driver(value):
                    facts.add(("driver", str(other.value)))
                lookup = device_lookup(value, aliases)
                if lookup is not None and lookup.kind == "attributes" and lookup.name == "type":
                    facts.add(("type", lookup.domain, str(other.value)))
        if isinstance(node, Call) and node.function == IN and isinstance(node.args[0], Literal):
            key = str(node.args[0].value)
            container = node.args[1]
            kind = device_map(container)
            if kind is not None:
                facts.add(("domain", kind, key))
            lookup = device_lookup(container, aliases) if isinstance(container, Node) else None
            if lookup is None and isinstance(container, Ident) and container.name in aliases:
                lookup = aliases[container.name]
            if lookup is not None and lookup.name is None:
                facts.add(("has", lookup.kind, lookup.domain, key))
        return facts

    def _presence(self, node: Node, aliases: Mapping[str, DeviceLookup]) -> set[Fact]:
        """Lookups evaluated unconditionally by ``node``: if it produced any value, they succeeded."""
        found: set[Fact] = set()
        stack = [node]
        while stack:
            current = stack.pop()
            if isinstance(current, Call) and current.target is None and current.function in _LOGICAL:
                continue
            if isinstance(current, Comprehension | Has | Bind):
                continue
            lookup = device_lookup(current, aliases)
            if lookup is not None and lookup.name is not None:
                found.add(_presence_fact(lookup))
            stack.extend(current.children())
        return found

    def _closure(self, facts: set[Fact]) -> set[Fact]:
        # Only this driver publishes in its own domain, so a value found there means "our device".
        if any(fact[0] == "has" and fact[2] == self.driver for fact in facts) or any(
            fact[0] == "type" and fact[1] == self.driver for fact in facts
        ):
            facts.add(("driver", self.driver))
        return facts

    @staticmethod
    def _bind_aliases(node: Bind, aliases: Mapping[str, DeviceLookup]) -> dict[str, DeviceLookup]:
        inner = {name: value for name, value in aliases.items() if name != node.var}
        lookup = device_lookup(node.init, aliases)
        if lookup is not None and lookup.name is None:
            inner[node.var] = lookup
        return inner

    # -- verdicts ---------------------------------------------------------------------------------

    def risky_lookups(self, tree: Node, context: Facts = _NONE) -> list[RiskyLookup]:
        """Every lookup in ``tree`` that can raise despite ``context`` and the guards in ``tree``."""
        found: list[RiskyLookup] = []
        self._visit(tree, context, {}, found)
        return found

    def _risk_free(self, node: Node, facts: Facts, aliases: Mapping[str, DeviceLookup]) -> bool:
        probe: list[RiskyLookup] = []
        self._visit(node, facts, aliases, probe)
        return not probe

    def _visit(self, node: Node, facts: Facts, aliases: Mapping[str, DeviceLookup], found: list[RiskyLookup]) -> None:
        if isinstance(node, Call) and node.target is None and node.function in {"_&&_", "_||_"}:
            self._visit_chain(_chain(node, node.function), node.function == "_&&_", facts, aliases, found)
            return
        if isinstance(node, Call) and node.target is None and node.function == "_?_:_":
            condition, when_true, when_false = node.args
            self._visit(condition, facts, aliases, found)
            self._visit(when_true, facts | self.facts(condition, True, aliases), aliases, found)
            self._visit(when_false, facts | self.facts(condition, False, aliases), aliases, found)
            return
        if isinstance(node, Has):
            # has() tests the last field itself; only what leads up to it must not fail.
            if device_lookup(Select(node.operand, node.field, node.span), aliases) is None:
                self._visit(node.operand, facts, aliases, found)
            return
        if isinstance(node, Bind):
            self._visit(node.init, facts, aliases, found)
            self._visit(node.body, facts, self._bind_aliases(node, aliases), found)
            return
        if isinstance(node, Comprehension):
            inner = {name: value for name, value in aliases.items() if name != node.var}
            for child in node.children():
                self._visit(child, facts, inner if child is not node.range else aliases, found)
            return
        lookup = device_lookup(node, aliases)
        if lookup is not None and lookup.name is not None:
            risk = self._verdict(lookup, facts)
            if risk is not None:
                found.append(risk)
            # the operand is the domain map, which never fails
            return
        for child in node.children():
            self._visit(child, facts, aliases, found)

    def _visit_chain(
        self,
        operands: list[Node],
        conjunction: bool,
        facts: Facts,
        aliases: Mapping[str, DeviceLookup],
        found: list[RiskyLookup],
    ) -> None:
        """``a && b && c`` (or ``||``): each operand is protected by the others that decide the result.

        An operand's error is absorbed whenever another operand is false (for ``&&``; true for
        ``||``), so operand i may rely on what the others establish.  Earlier operands always count
        (the usual guard-first style); a later one counts only if it cannot fail itself given the
        operands before it, so that two operands that fail together never vouch for each other.
        """
        decided = [self.facts(operand, conjunction, aliases) for operand in operands]
        for index, operand in enumerate(operands):
            protection = set(facts)
            for earlier in decided[:index]:
                protection |= earlier
            for later in range(index + 1, len(operands)):
                before = facts.union(*(decided[k] for k in range(later) if k != index))
                if self._risk_free(operands[later], before, aliases):
                    protection |= decided[later]
            self._visit(operand, frozenset(protection), aliases, found)

    def _verdict(self, lookup: DeviceLookup, facts: Facts) -> RiskyLookup | None:
        name = lookup.name or ""
        if ("has", lookup.kind, lookup.domain, name) in facts:
            return None
        ours = ("driver", self.driver) in facts
        spec = self.specs.get((lookup.domain, name)) if lookup.kind == "attributes" else None
        if lookup.kind == "capacity" and lookup.domain == self.driver:
            if name not in self.capacities:
                return RiskyLookup(lookup, Risk.UNPUBLISHED, "")  # raises on every device: unguarded, it aborts
            shared_known = ("has", "attributes", self.driver, SHARED_ATTRIBUTE) in facts
            if name in {spec.name for spec in SHARE_CAPACITIES} and not shared_known:
                return RiskyLookup(lookup, Risk.SHARED_ONLY, "")
            return None if ours else RiskyLookup(lookup, Risk.FOREIGN_DEVICE, "")
        if spec is None:
            if lookup.domain == self.driver:
                return RiskyLookup(lookup, Risk.UNPUBLISHED, "")  # raises on every device: unguarded, it aborts
            if ("driver", lookup.domain) in facts:
                return None  # that driver's own guard: we trust it publishes what it is asked for
            return RiskyLookup(lookup, Risk.FOREIGN_DOMAIN, "")
        if not spec.always:
            return RiskyLookup(lookup, Risk.OPTIONAL, "")
        types = {fact[2] for fact in facts if fact[0] == "type" and fact[1] == self.driver}
        if spec.on != frozenset(DeviceType) and not (types and types <= {t.value for t in spec.on}):
            only = " and ".join(sorted(t.value for t in spec.on))
            return RiskyLookup(lookup, Risk.DEVICE_TYPE, only)
        if not ours:
            return RiskyLookup(lookup, Risk.FOREIGN_DEVICE, "")
        return None


def _chain(node: Node, function: str) -> list[Node]:
    """The operands of a chain of one operator: ``a && (b && c) && d`` -> [a, b, c, d]."""
    if isinstance(node, Call) and node.target is None and node.function == function:
        return [part for arg in node.args for part in _chain(arg, function)]
    return [node]


def _presence_fact(lookup: DeviceLookup) -> Fact:
    return ("has", lookup.kind, lookup.domain, lookup.name or "")


def _is_driver(node: Node) -> bool:
    return (
        isinstance(node, Select)
        and node.field == "driver"
        and isinstance(node.operand, Ident)
        and (node.operand.name == "device")
    )
