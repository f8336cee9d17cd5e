"""The ``FailedScheduling`` message: kube-scheduler's summary line, then per node what did not fit.

kube-scheduler says ``0/2 nodes are available: 2 cannot allocate all claims.`` (reasons counted and
sorted as Go's FitError does).  That alone does not tell a user *which* request failed, so migdra's
scheduler appends, per node, the allocator's explanation in one clause: the request, how many devices
were eligible against how many it wants, and the most common reason the others were excluded (of the
devices its selectors chose, when there are any).  Pool problems come first: a pool being updated or
invalid, or a counter set that allocated claims over-consume (named with its slice, counters and
claims), since then no request fits there whatever it asks.  Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from dra_driver.allocation.explain import Explanation

CANNOT_ALLOCATE = "cannot allocate all claims"
MAX_MESSAGE = 1024  # what an Event keeps


def explanation_clause(explanation: Explanation) -> str:
    """One line for one node: the requests that cannot be satisfied, or why they do not fit together."""
    parts = [f"pool {problem}" for problem in explanation.pools]
    for report in explanation.requests:
        if report.satisfiable_alone:
            continue
        # The devices the request selects say why it fails; those its selectors skip say only what it asked for.
        tally = report.counts(selected_only=True) or report.counts()
        counts = sorted(tally.items(), key=lambda item: (-item[1], item[0]))
        top = f"; {counts[0][1]} excluded: {counts[0][0]}" if counts else ""
        wanted = "all" if report.mode == "All" else str(report.wanted)
        parts.append(
            f'claim {report.claim} request "{report.request}" (class {report.device_class}): '
            f"{len(report.eligible)} eligible device(s), needs {wanted}{top}"
        )
    if not parts and explanation.combination:
        parts.append(f"each request fits alone, not together: {explanation.combination}")
    return "; ".join(parts) or "no allocation found"


def failed_scheduling_message(node_reasons: Mapping[str, str], details: Mapping[str, str]) -> str:
    """``node_reasons``: node -> short reason (kube's words); ``details``: node -> allocator clause."""
    if not node_reasons:
        return "0/0 nodes are available: no nodes available to schedule pods."
    tally: dict[str, int] = {}
    for reason in node_reasons.values():
        tally[reason] = tally.get(reason, 0) + 1
    summary = ", ".join(sorted(f"{count} {reason}" for reason, count in tally.items()))
    message = f"0/{len(node_reasons)} nodes are available: {summary}."
    for node in sorted(details):
        message += f" {node}: {details[node]}."
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 3] + "..."
    return message
