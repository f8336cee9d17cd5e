"""Which of a GPU's aggregate counters its memory-slice counters already imply, so they need not be published.

Why: kube-scheduler converts and checks every counter every device consumes, for every node it filters,
for every pod (docs/device-model.md, "What kube-scheduler pays per node"); a counter that can never be
the one that refuses a device only costs it time.  A GPU's counter set meters its memory slices (one
counter each, so overlapping placements exclude each other) and its aggregate resources (memory,
SMs, copy engines, decoders, encoders, JPEG and OFA engines).  On every GPU the catalog knows, most
aggregates follow from the memory slices: placements that do not overlap never add up to more SMs or
memory than the GPU has.  Some do not -- a ``+me`` profile takes every media engine of the GPU, so
the decoders are what keeps it from sharing the GPU with another instance that has one.

The rule is exact, not a heuristic: an aggregate counter is left out only if no set of the GPU's
published placements that fits every *other* published counter (memory slices first) exceeds it.
Each counter removed keeps the sets of devices the scheduler can allocate together exactly what they
were, so the next one is judged against the reduced set; the order is fixed (the vocabulary's), so
the result is deterministic.  The search enumerates the sets of pairwise disjoint placements, which
is small for the memory-slice layouts of real GPUs (an H100 has under 2,000); above
``MAX_SETS_VISITED`` it gives up and keeps every counter, which is always correct.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache

MAX_SETS_VISITED = 200_000

Consumption = tuple[tuple[str, int], ...]
"""What one placement consumes of the aggregate counters, sorted by counter name."""


def implied_counters(
    placements: Sequence[tuple[frozenset[int], Mapping[str, int]]], budget: Mapping[str, int]
) -> frozenset[str]:
    """The aggregate counters of ``budget`` (memory slices left out) that the memory slices imply.

    ``placements``: every published placement of the GPU, as its memory slices and what it consumes
    of the aggregate counters; ``budget``: the counter set's aggregate values (what is left after
    foreign instances).  Memory-slice counters are never returned: they are what the rest rests on."""
    items = tuple(
        sorted(
            {(_mask(slices), tuple(sorted((c, v) for c, v in used.items() if v))) for slices, used in placements},
        )
    )
    return _implied(items, tuple(sorted(budget.items())))


def _mask(slices: frozenset[int]) -> int:
    mask = 0
    for index in slices:
        mask |= 1 << index
    return mask


@lru_cache(maxsize=256)
def _implied(items: tuple[tuple[int, Consumption], ...], budget: tuple[tuple[str, int], ...]) -> frozenset[str]:
    limits = dict(budget)
    kept = [counter for counter, _ in budget]
    dropped: set[str] = set()
    for counter in list(kept):
        others = [c for c in kept if c != counter]
        if not _can_exceed(items, limits, others, counter):
            kept.remove(counter)
            dropped.add(counter)
    return frozenset(dropped)


def _can_exceed(
    items: tuple[tuple[int, Consumption], ...], limits: Mapping[str, int], constraints: list[str], target: str
) -> bool:
    """Whether some set of pairwise disjoint placements within ``constraints`` uses more of ``target``
    than there is (True, too, when the search is too large to finish: keep the counter)."""
    watched = [*constraints, target]
    index_of = {counter: n for n, counter in enumerate(watched)}
    amounts = [tuple((index_of[c], v) for c, v in used if c in index_of) for _, used in items]
    masks = [mask for mask, _ in items]
    caps = [limits[c] for c in watched]
    target_index = len(watched) - 1
    sums = [0] * len(watched)
    visited = 0

    def extend(start: int, taken: int) -> bool:
        nonlocal visited
        visited += 1
        if visited > MAX_SETS_VISITED:
            return True
        for n in range(start, len(items)):
            if masks[n] & taken:
                continue
            for i, v in amounts[n]:
                sums[i] += v
            fits_others = all(sums[i] <= caps[i] for i, _ in amounts[n] if i != target_index)
            found = fits_others and (sums[target_index] > caps[target_index] or extend(n + 1, taken | masks[n]))
            for i, v in amounts[n]:
                sums[i] -= v
            if found:
                return True
        return False

    return extend(0, 0)
