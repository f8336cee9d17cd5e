"""kube-scheduler's DRA structured allocator, ported: which devices would Kubernetes give these claims?

    from dra_driver.tools.allocation import allocate, AllocationError
    results = allocate(claims, node, slices, classes, allocated_claims, features)  # or None

A faithful port of the 1.36/1.37 ``incubating`` allocator (``k8s.io/dynamic-resource-allocation/
structured``): pool gathering with generations, completeness and validity; the deterministic order
(pools by driver and name, binding-condition pools last, slices by name, devices in list order);
depth-first first-fit search with backtracking over counters, constraints and capacity.  See
``docs/allocation.md`` for what is ported, what is not, and how migdra's device order uses it.

Modules: ``features`` (gates), ``nodes`` (node selectors), ``pools`` (GatherPools), ``state``
(allocated claims), ``requests`` (request accessors), ``selection`` (CEL), ``counters``,
``capacity``, ``constraints``, ``taints``, ``devices`` (candidates and parsed facts), ``search``
(allocateOne), ``results`` (AllocationResult dicts), ``allocator`` (``allocate``), ``explain`` (why
a claim does not fit).  Pure: no Kubernetes client, NVML or gRPC.
"""

from __future__ import annotations

from dra_driver.tools.allocation.allocator import AllocationStats, allocate
from dra_driver.tools.allocation.errors import AllocationError, InvalidPoolsError
from dra_driver.tools.allocation.features import DEFAULT_FEATURES, KNOWN_FEATURES

__all__ = [
    "DEFAULT_FEATURES",
    "KNOWN_FEATURES",
    "AllocationError",
    "AllocationStats",
    "InvalidPoolsError",
    "allocate",
]
