"""Pausing CPython's cyclic garbage collector around work that makes many small acyclic objects.

Why: the collector starts a collection every few hundred allocations, and its full collections walk
every object the process holds.  Work that builds many small dicts, tuples and pydantic models, none of
them in a reference cycle, gains nothing from it and pays for it again and again -- the more so the
more the process already holds.  Two places measured it: ``migdra slices`` (the inventory, the pool and
the rendered slices; slightly worse than linear in the number of GPUs with the collector on,
hack/bench/scale_bench.py) and reading many claims into the claim model beside the JSON they came from
(10,000 claims: 1.06 s with the collector on, 0.34 s paused; docs/benchmarks.md, "migdra's own
components at scale").  Reference counting still frees what is dropped meanwhile.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def garbage_collector_paused() -> Iterator[None]:
    """Hold off the cyclic collector for the block; resume it afterwards, even after a failure, unless
    someone else had paused it (then it is theirs to resume).  Safe across threads: a pause only delays
    collections, and whoever paused it first resumes it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
