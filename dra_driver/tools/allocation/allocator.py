"""``allocate``: which devices kube-scheduler would give one pod's claims on one node.

This wires the parts together the way ``Allocator.Allocate`` does: gather the node's pools, read what
allocated claims hold, validate every request (classes, gates, ``All`` device sets, the 32-device
limit, constraints), run the depth-first search, and build the results.  Claims come in as the one
claim model (:class:`~dra_driver.resourceclaim.ResourceClaimView`, read where they enter the tool);
slices, classes and the node as the API's JSON.  Pure: no I/O, inputs are never modified, and the
only state kept between calls are caches keyed by the identity of the caller's objects (compiled CEL
programs, device activations, parsed device facts, what an allocated claim holds).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dra_driver.jsontypes import JSON
from dra_driver.resourceclaim import ResourceClaimView
from dra_driver.tools.allocation.devices import DEFAULT_FACTS
from dra_driver.tools.allocation.errors import InvalidPoolsError
from dra_driver.tools.allocation.features import Features
from dra_driver.tools.allocation.nodes import node_name
from dra_driver.tools.allocation.pools import Pool, gather_pools
from dra_driver.tools.allocation.results import build_results
from dra_driver.tools.allocation.search import Search
from dra_driver.tools.allocation.selection import SelectorEvaluator
from dra_driver.tools.allocation.state import allocated_state


@dataclass(slots=True)
class AllocationStats:
    """What the last attempt cost: ``allocateOne`` steps and CEL evaluations (for benchmarks)."""

    steps: int = 0
    evaluations: int = 0
    pools: int = 0


def allocate(
    claims: Sequence[ResourceClaimView],
    node: JSON,
    slices: Sequence[JSON],
    classes: Iterable[JSON],
    allocated_claims: Iterable[ResourceClaimView],
    features: Iterable[str],
    rng: random.Random | None = None,
    *,
    caching: bool = True,
    stats: AllocationStats | None = None,
) -> list[dict[str, Any]] | None:
    """One AllocationResult dict per claim, or None when the claims do not fit on this node.

    Raises :class:`AllocationError` where kube-scheduler aborts the attempt, and
    :class:`InvalidPoolsError` when nothing fit and an invalid pool was seen.  ``caching=False``
    compiles every selector and converts every device per evaluation (the benchmark's baseline).
    """
    if not claims:
        return []
    gates = Features.from_names(features)
    pools = gather_pools(slices, node, gates, rng)
    search = prepare_search(claims, node, pools, classes, allocated_claims, gates, caching=caching)
    search.validate()
    found = search.run()
    if stats is not None:
        stats.steps = search.steps
        stats.evaluations = search.evaluator.evaluations
        stats.pools = len(pools)
    if not found:
        invalid = [pool for pool in pools if pool.invalid]
        if invalid:
            reasons = "; ".join(f"{pool.label}: {pool.invalid_reason}" for pool in invalid)
            raise InvalidPoolsError(f"invalid resource pools were encountered ({reasons})")
        return None
    return build_results(search, node_name(node), gates)


def prepare_search(
    claims: Sequence[ResourceClaimView],
    node: JSON,
    pools: list[Pool],
    classes: Iterable[JSON],
    allocated_claims: Iterable[ResourceClaimView],
    gates: Features,
    *,
    caching: bool = True,
) -> Search:
    """A search ready to validate and run (``migdra allocate``'s explanation reuses its parts)."""
    by_name = {str((c.get("metadata") or {}).get("name") or ""): c for c in classes}
    state = allocated_state(allocated_claims, gates.consumable_capacity)
    return Search(claims, node, pools, by_name, state, gates, SelectorEvaluator(caching), DEFAULT_FACTS)
