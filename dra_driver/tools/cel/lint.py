"""``migdra cel lint``: what is wrong, or will go wrong at scheduling time, with a set of selectors.

Owns: the findings for one selector (compile errors; non-bool results; an estimated cost above
Kubernetes' limit, from ``cost.py``; attribute and capacity names migdra never publishes in its own
domain; comparisons that fail on migdra's value types; quantity and semver literals that can never
parse; lookups that can raise ``no such key`` without a guard) with the YAML path, a message an admin
can act on and, where one exists, a guarded form of the selector.

Must never: print, read files, or evaluate a selector against devices.

Severity: an *error* is something Kubernetes rejects, or something that will abort the scheduling of
a pod on some device migdra publishes.  A *warning* depends on context lint cannot see (a request
whose DeviceClass is not among the inputs) or is suspicious but harmless (a comparison that is
always false).
"""

from __future__ import annotations

import difflib
import enum
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dra_driver.devicemodel.vocabulary import (
    ATTRIBUTES,
    published_attribute_ids,
    published_capacity_ids,
)
from dra_driver.mig.catalog import load_catalog
from dra_driver.quantity import Quantity, QuantityError
from dra_driver.tools.cel import syntax
from dra_driver.tools.cel.checker import BOOL, INT, SEMVER, STRING, CelType, check
from dra_driver.tools.cel.cost import MAX_ESTIMATED_COST, estimate_cost
from dra_driver.tools.cel.documents import Document, SelectorSite, class_references, selector_sites
from dra_driver.tools.cel.errors import CELCompileError
from dra_driver.tools.cel.guards import Facts, GuardAnalysis, Risk, RiskyLookup
from dra_driver.tools.cel.lookups import DeviceLookup, device_lookup
from dra_driver.tools.cel.semver import Semver, SemverError
from dra_driver.tools.cel.syntax import Bind, Call, Literal, Node, walk


def known_profile_names() -> frozenset[str]:
    """Every MIG profile name (``3g.40gb``, ``1g.10gb+me``) of every GPU in the shipped catalog."""
    catalog = load_catalog()
    return frozenset(profile.name for model in catalog.gpus.values() for profile in model.gpu_instance_profiles)


_VALUE_TYPES: dict[str, CelType] = {"int": INT, "bool": BOOL, "string": STRING, "version": SEMVER}
_LOGICAL = frozenset({"_&&_", "_||_", "!_", "_?_:_"})


class Severity(enum.StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Finding:
    severity: Severity
    source: str
    object: str
    path: str
    message: str
    suggestion: str | None = None

    def render(self) -> str:
        text = f"{self.source}: {self.object}: {self.path}: {self.severity.value}: {self.message}"
        if self.suggestion:
            text += f"\n    suggested: {self.suggestion}"
        return text


@dataclass(frozen=True, slots=True)
class Problem:
    """A finding before it is placed in a document."""

    severity: Severity
    message: str
    suggestion: str | None = None


class Linter:
    """Lints selectors for one driver name; ``classes`` gives the selectors of known DeviceClasses."""

    def __init__(
        self, driver: str, classes: Mapping[str, tuple[str, ...]] | None = None, *, classes_complete: bool = False
    ) -> None:
        """``classes_complete``: ``classes`` are every DeviceClass there is (``--classes``), so a request
        naming another one names a class that does not exist."""
        self.driver = driver
        self.classes = dict(classes or {})
        self.classes_complete = classes_complete
        self.profiles = known_profile_names()
        self.guards = GuardAnalysis(driver)
        self.attributes = published_attribute_ids(driver)
        self.capacities = published_capacity_ids(driver)
        self.attribute_types: dict[tuple[str, str], CelType] = {}
        for spec in ATTRIBUTES:
            domain, _, ident = spec.qualified(driver).rpartition("/")
            self.attribute_types[(domain, ident)] = _VALUE_TYPES[spec.value_type.value]

    # -- documents --------------------------------------------------------------------------------

    def lint_documents(self, documents: Iterable[Document]) -> list[Finding]:
        """Findings for every selector in ``documents``; their DeviceClasses join the known classes."""
        documents = list(documents)
        for document in documents:
            if document.kind == "DeviceClass":
                self.classes[document.name] = tuple(site.expression for site in selector_sites(document))
        findings: list[Finding] = []
        for document in documents:
            findings += [
                Finding(Severity.ERROR, document.source, document.label, path, message)
                for path, message in self._unknown_classes(document)
            ]
            for site in selector_sites(document):
                findings += [
                    Finding(p.severity, document.source, document.label, site.path, p.message, p.suggestion)
                    for p in self.lint_site(site)
                ]
        return findings

    def _unknown_classes(self, document: Document) -> list[tuple[str, str]]:
        """A request naming a DeviceClass that is not among every class there is: kube-scheduler leaves
        its pod unschedulable ("device class ... does not exist") until someone creates it."""
        if not self.classes_complete:
            return []
        found = []
        for path, name in class_references(document):
            if name in self.classes:
                continue
            close = difflib.get_close_matches(name, sorted(self.classes), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            found.append(
                (
                    path,
                    f"DeviceClass '{name}' is not among the classes given: kube-scheduler cannot allocate the "
                    f"request until a class of that name exists{hint}",
                )
            )
        return found

    def lint_site(self, site: SelectorSite) -> list[Problem]:
        context, known = self._context(site)
        return self.lint_expression(site.expression, context=context, context_known=known)

    def _context(self, site: SelectorSite) -> tuple[Facts, bool]:
        """Facts that hold before this selector runs, and whether lint knows all of them."""
        expressions = list(site.earlier)
        known = True
        if not site.in_class:
            if site.device_class is not None and site.device_class in self.classes:
                expressions = [*self.classes[site.device_class], *expressions]
            else:
                known = False
        facts: Facts = frozenset()
        for expression in expressions:
            try:
                facts |= self.guards.facts(syntax.parse(expression), True, {})
            except CELCompileError:
                continue
        return facts, known

    # -- one expression ---------------------------------------------------------------------------

    def lint_expression(
        self, expression: str, *, context: Facts = frozenset(), context_known: bool = True
    ) -> list[Problem]:
        try:
            tree = syntax.parse(expression)
        except CELCompileError as exc:
            return [Problem(Severity.ERROR, f"does not compile: {_located(exc)}")]
        base = check(tree)
        if base.issues:
            return [
                Problem(Severity.ERROR, f"does not compile: {issue.message} (at {issue.span.line}:{issue.span.column})")
                for issue in base.issues
            ]
        risky_lookups = self.guards.risky_lookups(tree, context)
        problems = self._too_complex(expression, tree)
        problems += self._unknown_names(tree, {id(r.lookup.node) for r in risky_lookups if r.risk is Risk.UNPUBLISHED})
        problems += self._typed_by_vocabulary(tree, {issue.message for issue in base.issues})
        problems += self._bad_literals(tree)
        problems += self._unknown_profiles(tree)
        unknown = {p.message for p in problems}
        for risky in risky_lookups:
            if risky.risk is Risk.UNPUBLISHED:
                continue  # _unknown_names says it, with what is published instead
            problem = self._risk_problem(expression, tree, risky, context_known)
            if problem is not None and problem.message not in unknown:
                problems.append(problem)
        return problems

    @staticmethod
    def _too_complex(expression: str, tree: Node) -> list[Problem]:
        estimate = estimate_cost(tree)
        if not estimate.too_complex:
            return []
        where = ""
        if estimate.costliest is not None:
            where = f"; most of it is {syntax.source_of(expression, estimate.costliest).strip()!r}"
        return [
            Problem(
                Severity.ERROR,
                f"too complex: estimated cost {estimate.cost:,} exceeds Kubernetes' limit of "
                f"{MAX_ESTIMATED_COST:,}, so kube-apiserver rejects it ('too complex, exceeds cost limit'); "
                f"every comprehension multiplies by the size of what it iterates (up to 32 domains or "
                f"attributes per map, 64 characters per attribute value){where}",
            )
        ]

    def _unknown_names(self, tree: Node, risky: set[int]) -> list[Problem]:
        """Names of the driver's domain it never publishes: an error where the lookup can run unguarded
        (it aborts scheduling on every device of the driver), a warning where a guard (``'x' in ...``)
        protects it -- a selector written for another driver's vocabulary, always false here."""
        problems: list[Problem] = []
        seen: set[tuple[str, str]] = set()
        aliases: dict[str, syntax.Node] = {}
        for node in walk(tree):
            if isinstance(node, Bind):
                aliases[node.var] = node.init
            lookup = device_lookup(node, _alias_lookups(aliases))
            if lookup is None or lookup.name is None or lookup.domain != self.driver:
                continue
            published = (self.attributes if lookup.kind == "attributes" else self.capacities).get(
                self.driver, frozenset()
            )
            if lookup.name in published or (lookup.kind, lookup.name) in seen:
                continue
            seen.add((lookup.kind, lookup.name))
            noun = "attribute" if lookup.kind == "attributes" else "capacity"
            close = difflib.get_close_matches(lookup.name, sorted(published), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            guarded = id(lookup.node) not in risky
            severity, effect = (
                (Severity.WARNING, f", so this guarded clause is always false on {self.driver}'s devices")
                if guarded
                else (Severity.ERROR, "")
            )
            problems.append(
                Problem(
                    severity,
                    f"{lookup.describe()}: {self.driver} never publishes {noun} '{lookup.name}'{effect} "
                    f"(it publishes {', '.join(sorted(published))}){hint}",
                )
            )
        return problems

    def _typed_by_vocabulary(self, tree: Node, already: set[str]) -> list[Problem]:
        problems: list[Problem] = []
        for issue in check(tree, attribute_types=self.attribute_types).issues:
            if issue.message in already:
                continue
            if "'_==_'" in issue.message or "'_!=_'" in issue.message:
                problems.append(
                    Problem(
                        Severity.WARNING,
                        f"compares values of different types, so it is never equal on {self.driver}'s devices: "
                        f"{issue.message} (at {issue.span.line}:{issue.span.column})",
                    )
                )
            else:
                problems.append(
                    Problem(
                        Severity.ERROR,
                        f"raises at run time on {self.driver}'s devices (attribute types from the vocabulary): "
                        f"{issue.message} (at {issue.span.line}:{issue.span.column})",
                    )
                )
        return problems

    def _unknown_profiles(self, tree: Node) -> list[Problem]:
        """A profile name compared with ``profile`` that no GPU in the MIG catalog has (``3g.45gb``): the
        comparison is never true, so the request never gets a device.  A warning: a GPU migdra does not
        know yet may have it."""
        problems: list[Problem] = []
        for node in walk(tree):
            if not (isinstance(node, Call) and node.target is None and node.function in {"_==_", "_!=_", "@in"}):
                continue
            lookup = next(
                (found for arg in node.args if (found := device_lookup(arg, {})) is not None),
                None,
            )
            if lookup is None or lookup.domain != self.driver or lookup.name != "profile":
                continue
            literals = [a for a in node.args if isinstance(a, Literal) and a.kind == "string"]
            if node.function == "@in" and isinstance(node.args[1], syntax.ListLit):
                literals = [e for e in node.args[1].elements if isinstance(e, Literal) and e.kind == "string"]
            for literal in literals:
                name = str(literal.value)
                if name in self.profiles:
                    continue
                close = difflib.get_close_matches(name, sorted(self.profiles), n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                problems.append(
                    Problem(
                        Severity.WARNING,
                        f"'{name}' is no MIG profile of any GPU migdra knows, so this comparison never matches "
                        f"a device{hint}",
                    )
                )
        return problems

    @staticmethod
    def _bad_literals(tree: Node) -> list[Problem]:
        problems: list[Problem] = []
        for node in walk(tree):
            if not (isinstance(node, Call) and node.target is None and node.args):
                continue
            literal = node.args[0]
            if not (isinstance(literal, Literal) and literal.kind == "string"):
                continue
            text = str(literal.value)
            try:
                if node.function == "quantity":
                    Quantity.parse(text)
                elif node.function == "semver":
                    flag = node.args[1] if len(node.args) > 1 else None
                    normalize = isinstance(flag, Literal) and flag.value is True
                    Semver.parse(text, normalize=normalize)
            except (QuantityError, SemverError) as exc:
                problems.append(
                    Problem(Severity.ERROR, f"{node.function}('{text}') raises at run time on every device: {exc}")
                )
        return problems

    def _risk_problem(self, expression: str, tree: Node, risky: RiskyLookup, context_known: bool) -> Problem | None:
        lookup = risky.lookup
        name = lookup.name or ""
        raises = f"raises 'no such key: {name}' and aborts the pod's scheduling attempt"
        presence = f"'{name}' in device.{lookup.kind}['{lookup.domain}']"
        guarded = _guarded(expression, tree, lookup.node, presence)
        if risky.risk is Risk.FOREIGN_DEVICE:
            driver_guard = f"device.driver == '{self.driver}' && {expression}"
            if not context_known:
                return Problem(
                    Severity.WARNING,
                    f"{lookup.describe()} {raises} on devices of other drivers, unless the request's "
                    f"DeviceClass (not among the inputs) already checks device.driver",
                    driver_guard,
                )
            return Problem(
                Severity.ERROR,
                f"{lookup.describe()} {raises} on devices of other drivers (their '{lookup.domain}' "
                f"domain is empty): check device.driver first",
                driver_guard,
            )
        if risky.risk is Risk.OPTIONAL:
            return Problem(
                Severity.ERROR,
                f"{lookup.describe()}: {self.driver} publishes '{name}' only when it is known; on a device "
                f"without it the lookup {raises}",
                guarded,
            )
        if risky.risk is Risk.SHARED_ONLY:
            return Problem(
                Severity.ERROR if context_known else Severity.WARNING,
                f"{lookup.describe()}: {self.driver} publishes capacity '{name}' on shared devices only; on "
                f"the others the lookup {raises} (check 'shared' in device.attributes['{self.driver}'] first"
                + ("" if context_known else ", unless the request's DeviceClass, not among the inputs, does")
                + ")",
                guarded,
            )
        if risky.risk is Risk.DEVICE_TYPE:
            return Problem(
                Severity.ERROR if context_known else Severity.WARNING,
                f"{lookup.describe()}: {self.driver} publishes '{name}' only on type '{risky.detail}' "
                f"devices; on the others the lookup {raises} (check type or presence first"
                + ("" if context_known else ", unless the request's DeviceClass, not among the inputs, does")
                + ")",
                guarded,
            )
        return Problem(
            Severity.ERROR,
            f"{lookup.describe()} {raises} on every device that lacks it, {self.driver}'s included "
            f"(a foreign domain is an empty map there)",
            guarded,
        )


def _alias_lookups(aliases: Mapping[str, syntax.Node]) -> dict[str, DeviceLookup]:
    found: dict[str, DeviceLookup] = {}
    for name, init in aliases.items():
        lookup = device_lookup(init)
        if lookup is not None and lookup.name is None:
            found[name] = lookup
    return found


def _located(error: CELCompileError) -> str:
    where = f" (at {error.line}:{error.column})" if error.line is not None and error.column is not None else ""
    return f"{error.message}{where}"


def _guarded(expression: str, tree: Node, target: Node, guard: str) -> str:
    """``expression`` with the predicate around ``target`` replaced by ``(guard && predicate)``."""
    path = _path_to(tree, target)
    if not path:
        return f"{guard} && {expression}"
    predicate = path[0]
    for parent, child in itertools.pairwise(path):
        if isinstance(parent, Call) and parent.target is None and parent.function in _LOGICAL:
            predicate = child
    if predicate is tree:
        return f"{guard} && {expression}"
    start, end = predicate.span.start, predicate.span.end
    return f"{expression[:start]}({guard} && {expression[start:end]}){expression[end:]}"


def _path_to(tree: Node, target: Node) -> list[Node]:
    """Nodes from ``tree`` down to ``target`` (by identity), or [] if absent."""
    stack: list[tuple[Node, list[Node]]] = [(tree, [tree])]
    while stack:
        node, path = stack.pop()
        if node is target:
            return path
        stack.extend((child, [*path, child]) for child in node.children())
    return []
