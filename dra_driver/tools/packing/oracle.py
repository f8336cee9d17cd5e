"""The repacking oracle: could *any* packing hold this demand, if every instance could be moved?

A placement policy only ever adds instances beside the ones already there, so it can reject an
arrival that a different arrangement of the same live instances would have held.  The oracle answers
the question with instances freely movable: is there an assignment of every demanded instance to a
GPU, a profile its request type accepts there and a legal placement?  That makes it an upper bound
for every scheduler, so the benchmark can say how far each policy is from the best possible -- which
only means something if the oracle is exact, never wrong in either direction.

Legality on one GPU is exactly what the driver's published counters enforce
(``dra_driver.devicemodel.pool``): the instances' memory-slice ranges do not overlap, no profile
has more than its ``instance_count`` instances, and for every :data:`RESOURCE_FIELDS` resource the
instances' amounts (:func:`resource_amounts`) sum to at most the GPU's :func:`resource_budget`.  The
catalog is the only source of those numbers.

The search, and why it is exact:

1. *Profile loadings* (per GPU model, once): every legal set of (profile, placement) pairs, by a DFS
   over the pairs in one fixed order (each set is met exactly once, as its sorted sequence).  Legal
   sets are closed under removal, so only the multisets of profiles that no other legal multiset
   contains (the maximal ones) matter: any packing of a GPU is a sub-multiset of one of them.
2. *Type loadings* (per model and request-type list): how many instances of each type one GPU can
   hold at once.  Every way of handing a maximal loading's instances to types that accept them (or to
   none) is a legal type loading, and every legal type loading is dominated by one of these; only the
   Pareto-maximal vectors are kept.  A GPU holding fewer of a type than a loading allows is still
   legal (closure under removal), so "the GPU covers ``min(demand, loading)``" is all a GPU does.
3. *Covering* the demand: GPUs of one model are interchangeable, so the state is (model group, GPUs
   left in it, demand still uncovered) and each GPU takes one type loading ``L``, leaving
   ``max(0, r - L)``.  A successor that another one is componentwise <= to is skipped once that one
   failed (a smaller remainder is never harder: feasibility is monotone).  A state is cut only when a
   *valid* bound proves it hopeless: for a weight ``w >= 0`` per type, no GPU covers more than
   ``max_L w.L``, so ``w.r`` above the sum of those over the GPUs left is infeasible.  The weights are
   the unit vectors, instance counts, each model's smallest acceptable profile per type in memory
   slices, compute slices and every catalog resource, and the certificates the LP below finds.  Cuts
   are therefore never wrong, and the rest of the search is exhaustive, so the answer is exact.
4. *The LP*, for the searches that run long (tight demands, where the greedy first choices fail):
   past a budget of states the search starts again with the configuration LP (fractional GPUs per
   loading) at every state.  Its solution orders the successors -- the loadings it uses first, which
   finds a packing almost without backtracking -- and when it is infeasible its dual is a weight
   vector as above, rounded to integers and checked exactly before it may cut the state (and is then
   kept as a bound for all later states).  The LP is floating point and only ever guides or proposes;
   integers decide.

An answer for a state depends on the cluster and the types only, never on the demand that led to it,
so the memo is kept across calls.  A simulation asks about the last demand plus or minus one
instance, so the oracle also keeps the last packings it found (a demand they hold, with their free
GPUs searched for any rest, fits) and the last demands that did not fit (a demand containing one does
not): most questions are settled without a search from the start.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import mul

from dra_driver.mig.catalog import RESOURCE_FIELDS, GpuModel, MigCatalog, load_catalog, resource_amounts

Vector = tuple[int, ...]

# The memo (and the answers) are cleared past this many entries, so a long simulation's memory stays bounded.
_MEMO_LIMIT = 2_000_000
# States the plain search may expand for one demand before it starts again with the LP at every state
# (measured on the benchmark's clusters: 50-100 is fastest; the LP costs about a millisecond a state).
_PLAIN_BUDGET = 100
# LP certificates kept as bounds; simplex pivots before one LP is given up, and degenerate pivots in a
# row before Bland's rule (slower, but it cannot cycle) takes over from Dantzig's.
_CUT_LIMIT = 200
_PIVOT_LIMIT = 500
_DEGENERATE_LIMIT = 8
# Recent packings kept, the states the search of one's free GPUs may expand, and recent refuted demands.
_RECENT_WITNESSES = 2
_WITNESS_BUDGET = 50
_RECENT = 32


@dataclass(frozen=True)
class RequestType:
    """One kind of instance request: the profile names it accepts on each GPU model.

    ``profiles`` maps a GPU model (catalog key or alias) to the profile names acceptable there; a
    model that is missing, or maps to an empty set, cannot hold the type at all.
    """

    name: str
    profiles: Mapping[str, frozenset[str]]


def _pareto_max(vectors: Iterable[Vector]) -> tuple[Vector, ...]:
    """The vectors that no other one is componentwise >= to (duplicates folded), largest sum first."""
    kept: list[Vector] = []
    for vector in sorted(set(vectors), key=lambda v: (-sum(v), v)):
        if not any(_dominated(vector, other) for other in kept):
            kept.append(vector)
    return tuple(kept)


def _dominated(vector: Vector, by: Vector) -> bool:
    return all(a <= b for a, b in zip(vector, by, strict=True))


# id(model) -> (model, its maximal profile loadings); the model is kept so that its id stays its own.
_PROFILE_LOADINGS: dict[int, tuple[GpuModel, tuple[Mapping[str, int], ...]]] = {}


def profile_loadings(model: GpuModel) -> tuple[Mapping[str, int], ...]:
    """Every maximal multiset of profiles one GPU of ``model`` can hold at once (profile name -> count).

    "Maximal": no other legal multiset contains it.  Legal is the driver's rule (see the module
    docstring): no overlapping placements, at most ``instance_count`` per profile, every resource
    within the GPU's budget.  Computed once per model object (tens of milliseconds for an 8-slice GPU;
    the catalog's models are frozen, so the answer cannot go stale).
    """
    cached = _PROFILE_LOADINGS.get(id(model))
    if cached is None or cached[0] is not model:
        cached = _PROFILE_LOADINGS[id(model)] = (model, _profile_loadings(model))
    return cached[1]


def _profile_loadings(model: GpuModel) -> tuple[Mapping[str, int], ...]:
    profiles = model.gpu_instance_profiles
    budget = tuple(model.resource_budget[field] for field in RESOURCE_FIELDS)
    amounts = [tuple(resource_amounts(p)[field] for field in RESOURCE_FIELDS) for p in profiles]
    items = [
        (index, sum(1 << s for s in placement.slices()))
        for index, profile in enumerate(profiles)
        for placement in profile.placements
    ]
    found: set[Vector] = set()
    counts = [0] * len(profiles)
    used = [0] * len(RESOURCE_FIELDS)

    def extend(start: int, occupied: int) -> None:
        found.add(tuple(counts))
        for position in range(start, len(items)):
            index, mask = items[position]
            if mask & occupied or counts[index] >= profiles[index].instance_count:
                continue
            need = amounts[index]
            if any(u + n > b for u, n, b in zip(used, need, budget, strict=True)):
                continue
            counts[index] += 1
            for field, amount in enumerate(need):
                used[field] += amount
            extend(position + 1, occupied | mask)
            counts[index] -= 1
            for field, amount in enumerate(need):
                used[field] -= amount

    extend(0, 0)
    return tuple({profiles[i].name: count for i, count in enumerate(vector) if count} for vector in _pareto_max(found))


def _compositions(total: int, parts: int) -> Iterator[Vector]:
    """Every way of writing ``total`` as an ordered sum of ``parts`` non-negative integers."""
    if parts == 1:
        yield (total,)
        return
    for first in range(total + 1):
        for rest in _compositions(total - first, parts - 1):
            yield (first, *rest)


def type_loadings(loadings: Iterable[Mapping[str, int]], accepted: Sequence[frozenset[str]]) -> tuple[Vector, ...]:
    """The Pareto-maximal per-type instance counts one GPU can hold, ``accepted[t]`` being type t's profiles.

    Every instance of a profile loading goes to one type that accepts its profile; instances no type
    accepts are simply left out (a GPU holding fewer instances is still legal).
    """
    width = len(accepted)
    vectors: set[Vector] = set()
    for loading in loadings:
        partial: set[Vector] = {(0,) * width}
        for name, count in loading.items():
            takers = [t for t in range(width) if name in accepted[t]]
            if not takers:
                continue
            shares = list(_compositions(count, len(takers)))
            grown: set[Vector] = set()
            for vector in partial:
                for share in shares:
                    new = list(vector)
                    for taker, amount in zip(takers, share, strict=True):
                        new[taker] += amount
                    grown.add(tuple(new))
            partial = grown  # every share hands out the same instances: none dominates another
        vectors |= partial
    return tuple(v for v in _pareto_max(vectors) if any(v))


@dataclass(frozen=True)
class _Witness:
    """A packing found: the GPUs before state ``(g, left)`` hold ``used`` (per type); the rest are free."""

    used: Vector
    g: int
    left: int


@dataclass(frozen=True)
class _Group:
    """The GPUs of one model: how many, and the type loadings each of them can take."""

    model: str
    size: int
    loadings: tuple[Vector, ...]
    order: Vector  # per type, > 0: memory slices of its smallest acceptable profile here (else 1)


class RepackingOracle:
    """Exact feasibility of a demand (request type -> instance count) on a fixed set of MIG GPUs."""

    def __init__(
        self, gpu_models: Sequence[str], request_types: Sequence[RequestType], catalog: MigCatalog | None = None
    ) -> None:
        catalog = catalog or load_catalog()
        self._catalog = catalog
        self._types = tuple(request_types)
        self._index = {t.name: i for i, t in enumerate(self._types)}
        if len(self._index) != len(self._types):
            raise ValueError(f"duplicate request type names: {[t.name for t in self._types]}")
        width = len(self._types)
        accepted = [self._accepted(t, catalog) for t in self._types]
        models: dict[str, GpuModel] = {}
        sizes: dict[str, int] = {}
        for name in gpu_models:
            model = _resolve(catalog, name)
            models[model.key] = model
            sizes[model.key] = sizes.get(model.key, 0) + 1
        groups = [
            _Group(
                key,
                sizes[key],
                type_loadings(profile_loadings(models[key]), [a.get(key, frozenset()) for a in accepted]),
                _slice_order(models[key], [a.get(key, frozenset()) for a in accepted]),
            )
            for key in sizes
        ]
        # The search fills the GPUs that hold the fewest types first: they take the shared types, and
        # what only the versatile GPUs hold is left for them (the other way round, the versatile GPUs
        # greedily take shared instances and the search backtracks through their choices).
        groups.sort(key=lambda group: (sum(1 for t in range(width) if any(L[t] for L in group.loadings)), group.model))
        self._groups = tuple(groups)
        weights = self._weights(models, accepted, width)
        # For group g: (w, capacity of one GPU of g under w, capacity of every GPU after group g under w).
        self._bounds: list[list[tuple[Vector, int, int]]] = []
        for g, group in enumerate(self._groups):
            rows = []
            for w in weights:
                after = sum(later.size * _capacity(w, later.loadings) for later in self._groups[g + 1 :])
                rows.append((w, _capacity(w, group.loadings), after))
            self._bounds.append(rows)
        self._memo: dict[tuple[int, int, Vector], bool] = {}
        self._answers: dict[Vector, bool] = {}
        self._cuts: set[Vector] = set()
        self._via: dict[tuple[int, int, Vector], Vector | None] = {}  # state settled True -> the loading taken
        self._witnesses: list[_Witness] = []  # recent packings, most recent first
        self._refuted: list[Vector] = []  # recent demands that do not fit
        self._budget = _PLAIN_BUDGET
        self._lp = False
        # The search recurses two frames per GPU (a state, its expansion); plain Python calls, so a
        # higher limit costs no C stack.  Without it a cluster of some 480 GPUs would hit the default.
        depth = 2 * len(gpu_models) + 200
        if sys.getrecursionlimit() < depth:
            sys.setrecursionlimit(depth)

    @staticmethod
    def _accepted(request_type: RequestType, catalog: MigCatalog) -> dict[str, frozenset[str]]:
        """Model key -> profile names, with aliases resolved and every name checked against the catalog."""
        out: dict[str, frozenset[str]] = {}
        for model_name, names in request_type.profiles.items():
            model = _resolve(catalog, model_name)
            known = {p.name for p in model.gpu_instance_profiles}
            unknown = sorted(set(names) - known)
            if unknown:
                raise ValueError(
                    f"request type {request_type.name!r}: {model.key} has no profile {', '.join(unknown)} "
                    f"(it has {', '.join(sorted(known))})"
                )
            out[model.key] = out.get(model.key, frozenset()) | frozenset(names)
        return out

    @staticmethod
    def _weights(
        models: Mapping[str, GpuModel], accepted: Sequence[Mapping[str, frozenset[str]]], width: int
    ) -> list[Vector]:
        """The per-type weights of the pruning bounds: any non-negative weights give a valid bound."""
        weights: set[Vector] = {tuple(int(t == u) for u in range(width)) for t in range(width)}
        weights.add((1,) * width)
        for key, model in models.items():
            measures: list[dict[str, int]] = [
                {p.name: p.placement_size for p in model.gpu_instance_profiles},
                {p.name: p.slice_count for p in model.gpu_instance_profiles},
            ]
            measures += [{p.name: resource_amounts(p)[f] for p in model.gpu_instance_profiles} for f in RESOURCE_FIELDS]
            for measure in measures:
                w = tuple(min((measure[n] for n in accepted[t].get(key, ())), default=0) for t in range(width))
                if any(w):
                    weights.add(w)
        return sorted(weights)

    @property
    def request_types(self) -> tuple[RequestType, ...]:
        return self._types

    def loadings(self, model: str) -> tuple[Vector, ...]:
        """The maximal per-type counts one GPU of ``model`` holds, in request-type order (for reports)."""
        key = _resolve(self._catalog, model).key
        for group in self._groups:
            if group.model == key:
                return group.loadings
        raise ValueError(f"no GPU of model {key} in this cluster")

    def feasible(self, demand: Mapping[str, int]) -> bool:
        """Whether some packing places every demanded instance (request type name -> count)."""
        return self._feasible(self._vector(demand))

    def max_fill(self, request_type: str, demand: Mapping[str, int] | None = None) -> int:
        """The most extra instances of ``request_type`` that fit beside ``demand`` (0 if it does not fit).

        Feasibility is monotone in the count, so a binary search between 0 and the type's capacity
        (what every GPU holds of it alone) is exact.
        """
        if request_type not in self._index:
            raise ValueError(self._unknown(request_type))
        base = self._vector(demand or {})
        if not self._feasible(base):
            return 0
        t = self._index[request_type]
        unit = tuple(int(u == t) for u in range(len(self._types)))
        low, high = 0, max(0, sum(g.size * _capacity(unit, g.loadings) for g in self._groups) - base[t])
        while low < high:
            middle = (low + high + 1) // 2
            if self._feasible(tuple(c + middle * u for c, u in zip(base, unit, strict=True))):
                low = middle
            else:
                high = middle - 1
        return low

    def _unknown(self, name: str) -> str:
        return f"unknown request type {name!r} (known: {', '.join(self._index)})"

    def _vector(self, demand: Mapping[str, int]) -> Vector:
        counts = [0] * len(self._types)
        for name, count in demand.items():
            if name not in self._index:
                raise ValueError(self._unknown(name))
            if count < 0:
                raise ValueError(f"negative demand {count} for request type {name!r}")
            counts[self._index[name]] += count
        return tuple(counts)

    def _feasible(self, demand: Vector) -> bool:
        answer = self._answers.get(demand)
        if answer is not None:
            return answer
        if len(self._memo) > _MEMO_LIMIT or len(self._answers) > _MEMO_LIMIT:
            self._memo.clear()
            self._via.clear()
            self._answers.clear()
        if not any(demand):
            answer = True
        elif not self._groups:
            answer = False
        elif any(_dominated(refuted, demand) for refuted in self._refuted):
            answer = False  # it contains a demand that does not fit
        elif self._by_witness(demand):
            answer = True
        else:
            answer = self._search(0, self._groups[0].size, demand)
            if answer:
                self._remember(_Witness((0,) * len(demand), 0, self._groups[0].size), demand)
            else:
                self._refuted = [demand, *self._refuted[: _RECENT - 1]]
        self._answers[demand] = answer
        return answer

    def _search(self, g: int, left: int, remaining: Vector) -> bool:
        """:meth:`_covers` from a state: the plain search first, then -- past its budget -- with the LP.

        Most demands are settled by a few hundred states of the plain search; the LP at every state
        costs more than that, so it is switched on only for the searches that run long.  States settled
        before the switch are exact (the budget only ever stops a search, it never decides one).
        """
        self._budget, self._lp = _PLAIN_BUDGET, False
        try:
            return self._covers(g, left, remaining)
        except _OutOfBudget:
            self._lp = True
            return self._covers(g, left, remaining)

    def _by_witness(self, demand: Vector) -> bool:
        """Whether a recent packing, with its free GPUs searched for the rest, holds ``demand`` (True is exact).

        A simulation asks about the last demand plus or minus one instance; the last packing usually
        has room for it, so this settles most questions without a search from the start.
        """
        for witness in self._witnesses:
            rest = tuple(d - u if d > u else 0 for d, u in zip(demand, witness.used, strict=True))
            if not any(rest):
                return True
            if witness.g == len(self._groups):
                continue
            self._budget, self._lp = _WITNESS_BUDGET, False
            try:
                if self._covers(witness.g, witness.left, rest):
                    self._remember(witness, rest)
                    return True
            except _OutOfBudget:
                pass
        return False

    def _remember(self, start: _Witness, remaining: Vector) -> None:
        """Keep the packing the search just found for ``remaining`` from ``start`` (read back from the memo)."""
        used, g, left = list(start.used), start.g, start.left
        while any(remaining):
            key = (g, left, remaining)
            if key not in self._via:
                return  # cannot happen: every state the search settled as True has its step
            loading = self._via[key]
            if loading is None:  # the search skipped the rest of this group
                g, left = g + 1, self._groups[g + 1].size
                continue
            used = [u + c for u, c in zip(used, loading, strict=True)]
            remaining = tuple(r - c if r > c else 0 for r, c in zip(remaining, loading, strict=True))
            g, left = self._after_gpu(g, left)
        self._witnesses = [_Witness(tuple(used), g, left), *self._witnesses[: _RECENT_WITNESSES - 1]]

    def _after_gpu(self, g: int, left: int) -> tuple[int, int]:
        """The state after one more GPU of group ``g`` is taken; ``(len(groups), 0)`` when none is left."""
        if left > 1:
            return g, left - 1
        if g + 1 < len(self._groups):
            return g + 1, self._groups[g + 1].size
        return len(self._groups), 0

    def _covers(self, g: int, left: int, remaining: Vector) -> bool:
        """Whether ``left`` GPUs of group ``g`` and every GPU of the groups after it cover ``remaining``."""
        if not any(remaining):
            return True
        key = (g, left, remaining)
        known = self._memo.get(key)
        if known is not None:
            return known
        if not self._lp:
            self._budget -= 1
            if self._budget < 0:
                raise _OutOfBudget
        answer = False
        if all(sum(map(mul, w, remaining)) <= left * here + after for w, here, after in self._bounds[g]):
            answer = self._expand(key)
        self._memo[key] = answer
        return answer

    def _expand(self, key: tuple[int, int, Vector]) -> bool:
        """Try each GPU loading at a state the bounds did not rule out; on success, record the step taken.

        Successors that another one is componentwise <= to are skipped once that one failed (they
        could only be harder).  Without the LP they are tried in increasing order of a positive
        weighting (so every tried successor is Pareto-minimal); with it, in the order of the LP's
        solution (the loadings it uses most first), which finds a packing for tight demands at once.
        """
        g, left, remaining = key
        group = self._groups[g]
        steps: dict[Vector, Vector] = {}  # successor -> the (first, largest) loading that leads there
        for loading in group.loadings:
            steps.setdefault(tuple([r - c if r > c else 0 for r, c in zip(remaining, loading, strict=True)]), loading)
        if not steps or set(steps) == {remaining}:  # no GPU of this group holds anything still wanted
            if g + 1 < len(self._groups) and self._covers(g + 1, self._groups[g + 1].size, remaining):
                self._via[key] = None
                return True
            return False
        after = self._after_gpu(g, left)
        if after[0] == len(self._groups):  # the last GPU: it must take all that is left
            done = steps.get((0,) * len(remaining))
            if done is not None:
                self._via[key] = done
            return done is not None
        score = dict.fromkeys(steps, 0.0)
        if self._lp:
            use = self._relaxation(g, left, remaining)
            if use is None:
                return False
            for loading, amount in zip(group.loadings, use, strict=True):
                child = tuple([r - c if r > c else 0 for r, c in zip(remaining, loading, strict=True)])
                score[child] = max(score[child], amount)
        failed: list[Vector] = []
        for child in _try_order(steps, score, group.order):
            if any(_dominated(f, child) for f in failed):
                continue
            if self._covers(after[0], after[1], child):
                self._via[key] = steps[child]
                return True
            failed.append(child)
        return False

    def _relaxation(self, g: int, left: int, remaining: Vector) -> list[float] | None:
        """The configuration LP at a state: None if it proves the state infeasible, else how much of
        each of group ``g``'s loadings its solution uses.

        The LP (fractional GPUs per loading, each loading capped at what is still wanted) is solved in
        floating point, but it only ever *proves* infeasibility through an integer certificate checked
        exactly here: weights ``w >= 0`` with ``w.r`` above what the GPUs left can cover under ``w``.
        A certificate that survives is also kept as a bound for every later state.
        """
        active = [t for t, r in enumerate(remaining) if r]
        columns: list[tuple[int, Vector]] = []
        capacities: list[int] = []
        here: dict[Vector, int] = {}  # group g's capped loading -> its column
        for h in range(g, len(self._groups)):
            capacities.append(left if h == g else self._groups[h].size)
            seen: set[Vector] = set()
            for loading in self._groups[h].loadings:
                column = tuple([min(loading[t], remaining[t]) for t in active])
                if column not in seen and any(column):
                    seen.add(column)
                    if h == g:
                        here[column] = len(columns)
                    columns.append((h - g, column))
        solution = _solve_cover(columns, capacities, tuple(remaining[t] for t in active))
        unguided = [0.0] * len(self._groups[g].loadings)
        if isinstance(solution, list):
            used = []
            for loading in self._groups[g].loadings:
                position = here.get(tuple([min(loading[t], remaining[t]) for t in active]))
                used.append(0.0 if position is None else solution[position])
            return used
        if solution is None or max(solution) <= 0:
            return unguided  # the LP gave no answer: search on, unguided
        top = max(solution)
        weights = [0] * len(remaining)
        for t, value in zip(active, solution, strict=True):
            weights[t] = round(value * 1000 / top)
        w = tuple(weights)
        demanded = sum(map(mul, w, remaining))
        capped = sum(
            (left if h == g else self._groups[h].size)
            * _capacity(w, [tuple(map(min, loading, remaining)) for loading in self._groups[h].loadings])
            for h in range(g, len(self._groups))
        )
        if demanded <= capped:
            return unguided  # rounding lost the certificate: search on
        if len(self._cuts) < _CUT_LIMIT and w not in self._cuts:
            self._add_bound(w)
        return None

    def _add_bound(self, w: Vector) -> None:
        self._cuts.add(w)
        for g, group in enumerate(self._groups):
            after = sum(later.size * _capacity(w, later.loadings) for later in self._groups[g + 1 :])
            self._bounds[g].append((w, _capacity(w, group.loadings), after))


def _try_order(children: Iterable[Vector], score: Mapping[Vector, float], weights: Vector) -> list[Vector]:
    """The order successors are tried in: most used by the LP first, then least (weighted) demand left.

    Only speed depends on it: skipping a successor is sound in any order (tests try the worst one).
    """
    return sorted(children, key=lambda v: (-score[v], sum(map(mul, weights, v))))


class _OutOfBudget(Exception):
    """The plain search ran past its budget of states: search again with the LP."""


def _solve_cover(
    columns: Sequence[tuple[int, Vector]], capacities: Sequence[int], remaining: Vector
) -> list[float] | tuple[float, ...] | None:
    """Phase 1 of the simplex method for ``x >= 0``, ``sum_j x_j col_j >= remaining``, and per group
    ``h`` ``sum_{j in h} x_j <= capacities[h]``.

    Returns the ``x`` of a feasible solution (a list), or -- infeasible -- the covering rows' duals (a
    tuple ``y >= 0`` with ``y.remaining`` above what the capacities allow under ``y``), or None when
    the method stalls (never seen; the caller then learns nothing).  Dantzig's rule, and Bland's -- which
    cannot cycle -- after a run of degenerate pivots.
    """
    k, n, groups = len(remaining), len(columns), len(capacities)
    width = n + k + groups + k
    rows: list[list[float]] = []
    for i in range(k):
        row = [float(col[i]) for _, col in columns] + [0.0] * (k + groups + k) + [float(remaining[i])]
        row[n + i] = -1.0
        row[n + k + groups + i] = 1.0
        rows.append(row)
    for h in range(groups):
        row = [1.0 if group == h else 0.0 for group, _ in columns] + [0.0] * (k + groups + k) + [float(capacities[h])]
        row[n + k + h] = 1.0
        rows.append(row)
    basis = [n + k + groups + i for i in range(k)] + [n + k + h for h in range(groups)]
    cost = [-sum(rows[i][j] for i in range(k)) for j in range(width + 1)]
    for i in range(k):
        cost[n + k + groups + i] = 0.0
    eps = 1e-9
    stalled = 0  # degenerate pivots in a row: past a few, Bland's rule, which cannot cycle
    for _ in range(_PIVOT_LIMIT):
        if stalled < _DEGENERATE_LIMIT:
            entering = min(range(width), key=cost.__getitem__)
            if cost[entering] >= -eps:
                break
        else:
            found = next((j for j in range(width) if cost[j] < -eps), None)
            if found is None:
                break
            entering = found
        best: tuple[float, int, int] | None = None
        for i, row in enumerate(rows):
            if row[entering] > eps:
                ratio = row[-1] / row[entering]
                if best is None or (ratio, basis[i]) < best[:2]:
                    best = (ratio, basis[i], i)
        if best is None:
            return None  # unbounded: cannot happen for a phase-1 problem
        stalled = stalled + 1 if best[0] <= eps else 0
        pivot_row = rows[best[2]]
        factor = pivot_row[entering]
        pivot_row[:] = [v / factor for v in pivot_row]
        for i, row in enumerate(rows):
            if i != best[2] and row[entering]:
                f = row[entering]
                row[:] = [a - f * b for a, b in zip(row, pivot_row, strict=True)]
        f = cost[entering]
        cost[:] = [a - f * b for a, b in zip(cost, pivot_row, strict=True)]
        basis[best[2]] = entering
    else:
        return None
    if -cost[-1] > 1e-7:
        return tuple(max(0.0, cost[n + i]) for i in range(k))
    x = [0.0] * n
    for i, var in enumerate(basis):
        if var < n:
            x[var] = rows[i][-1]
    return x


def _slice_order(model: GpuModel, accepted: Sequence[frozenset[str]]) -> Vector:
    """Per type, the memory slices of its smallest acceptable profile on ``model`` (1 where none): > 0 throughout."""
    sizes = {p.name: p.placement_size for p in model.gpu_instance_profiles}
    return tuple(min((sizes[n] for n in names), default=1) for names in accepted)


def _capacity(weights: Vector, loadings: Iterable[Vector]) -> int:
    """The most ``weights . L`` any one loading gives: no GPU covers more weight than this."""
    return max((sum(a * b for a, b in zip(weights, loading, strict=True)) for loading in loadings), default=0)


def _resolve(catalog: MigCatalog, name: str) -> GpuModel:
    try:
        return catalog.model(name)
    except KeyError as error:
        raise ValueError(error.args[0] if error.args else f"unknown GPU model {name!r}") from None


__all__ = ["RepackingOracle", "RequestType", "profile_loadings", "type_loadings"]
