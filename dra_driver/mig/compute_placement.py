"""Where inside a shared GPU instance a share's compute instance goes (pure; docs/prepare.md, "Shares").

A shared GPU instance (GI) holds one compute instance (CI) per share.  A CI of N compute slices may
only sit at the placements NVML lists for its CI profile (``ComputeInstanceProfile.placements``, the
same list ``nvmlGpuInstanceGetComputeInstancePossiblePlacements`` returns), and two CIs never overlap.
So a GI with compute slices to spare can still refuse a share: four 1-slice CIs of a 4g GI at 0, 1,
2 and 3, two of them released (0 and 2), leave two free slices but no free 2-slice placement (0:2 and
2:2 are both half taken).  The scheduler counts only slices (``computeSlices`` capacity), so the node
must place CIs so that larger shares stay placeable.

The rule, :func:`choose_compute_placement`: among the free legal placements of the share's CI profile
(``GpuInstanceProfile.compute_instance_for_share(size)``), take the one that, once taken, leaves the
most placements free for the largest share size, then for the next size, and so on (a lexicographic
comparison, largest size first); ties go to the lowest start.  A 1-slice share in an empty 4g GI goes
to 0 (every start keeps one 2-slice placement; 0 is lowest), the next one to 1 (keeps 2:2 free), not 2.

What it cannot promise.  Placing CIs one at a time without knowing the shares still to come, no rule
can always succeed on the largest GIs: in a 7g GI a first 1-slice share must sit at slice 3 if 3 + 3
slices follow (3c at 0:3 and 4:3) and at slice 6 if 4 + 2 follow (4c at 0:4, 2c at 4:2).  For every
other GI profile of the catalog the rule never fails a sequence of shares that fits the GI in some
arrangement (``tests/unit/test_compute_placement.py`` checks both statements over every profile).
When it does fail, prepare says so in one line (a ``DeviceConflictError`` naming the device, the
size and the CIs present), and kubelet retries the claim.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from dra_driver.mig.catalog import GpuInstanceProfile, Placement


def free_compute_placements(profile: GpuInstanceProfile, present: Iterable[Placement], size: int) -> list[Placement]:
    """The legal placements of a ``size``-slice share's CI profile that no CI in ``present`` overlaps."""
    taken = list(present)
    legal = profile.compute_instance_for_share(size).placements
    return [p for p in legal if not any(p.overlaps(other) for other in taken)]


def placeable_counts(profile: GpuInstanceProfile, present: Sequence[Placement]) -> tuple[int, ...]:
    """How many placements are free for each share size of ``profile``, largest size first."""
    return tuple(len(free_compute_placements(profile, present, size)) for size in reversed(profile.share_sizes))


def placeable_share_sizes(profile: GpuInstanceProfile, present: Sequence[Placement]) -> tuple[int, ...]:
    """The share sizes of ``profile`` a new CI could still be placed at, with CIs at ``present``: what a
    shared device admits (its ``computeSlices`` request policy), so kube-scheduler never sends a share
    to a GI that has the slices but not the placement for it.

    When none is (every slice is taken), the whole GI's size alone: a request policy needs a valid
    value, and that one fits only where kube-scheduler counts the GI's every compute slice free -- which,
    with CIs standing, happens only while its view lags the node (a share deallocated before kubelet
    unprepared it), and then no smaller size slips in either."""
    placeable = tuple(size for size in profile.share_sizes if free_compute_placements(profile, present, size))
    return placeable or profile.share_sizes[-1:]


def choose_compute_placement(
    profile: GpuInstanceProfile, present: Sequence[Placement], size: int, legal: Sequence[Placement] | None = None
) -> Placement | None:
    """The placement a ``size``-slice share's CI gets in a GI of ``profile`` holding CIs at ``present``;
    None when no legal placement of that size is free.  See the module docstring for the rule.

    ``legal``: the placements NVML says a CI of that size may have in this GI (the node asks it), which
    win over the catalog's for the candidates; the catalog stays the model for scoring what remains
    placeable of the other sizes."""
    candidates = free_compute_placements(profile, present, size)
    if legal is not None:
        candidates = [p for p in legal if not any(p.overlaps(other) for other in present)]
    if not candidates:
        return None
    return max(candidates, key=lambda p: (placeable_counts(profile, [*present, p]), -p.start))


def describe_compute_instances(present: Iterable[Placement]) -> str:
    """``CIs at 0:1, 1:1`` or ``no CI``: the CIs of a GI, for an error message."""
    placements = sorted(present, key=lambda p: p.start)
    return "CIs at " + ", ".join(str(p) for p in placements) if placements else "no CI"
