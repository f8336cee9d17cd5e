"""Why does a claim not fit on a node?  The answer to "why is my pod Pending?" for DRA.

kube-scheduler says only "cannot allocate all claims".  This looks at every request (and every
``firstAvailable`` sub-request) on its own, against what allocated claims already hold, and checks
each device of the node in the allocator's order, recording the first check that excluded it: pool
being updated or invalid, binding conditions with the gate off, a class selector, a request
selector, per-device node selection, taken by another claim, capacity, shared counters (which
counter, how much it needs and how much is left), an untolerated taint.  Where allocated claims
already consume more of a pool's counter than its counter set holds (claims allocated by hand, or a
slice re-published smaller), the allocator places nothing that consumes that pool's counters, however
little: the pool is then reported as a problem of its own, naming the counter set, the slice that
publishes it, each over-consumed counter (consumed against available) and the claims consuming it --
what an admin must release -- and every such device is excluded for that reason.  (The allocator looks at
"taken" first because it is cheap; the explanation looks at the selectors first because "taken" says
more about a device the request wants.)  The later the check, the closer the device came to fitting.  A request
that has enough devices on its own but still fails fails because of the combination: constraints or
counters shared with the other requests, which the report then says.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.jsontypes import JSON
from dra_driver.resourceclaim import ResourceClaimView
from dra_driver.tools.allocation import capacity
from dra_driver.tools.allocation.devices import Candidate, DeviceID, device_fields, device_id_text
from dra_driver.tools.allocation.features import Features
from dra_driver.tools.allocation.nodes import node_matches
from dra_driver.tools.allocation.pools import Pool, gather_pools, spec_of
from dra_driver.tools.allocation.quantities import Amount, format_amount
from dra_driver.tools.allocation.requests import ALL, RequestData, claim_label
from dra_driver.tools.allocation.search import RequestKey, Search
from dra_driver.tools.allocation.taints import BLOCKING_EFFECTS, tolerates

CLOSEST = 5


@dataclass(slots=True)
class Rejection:
    device: str  # driver/pool/device
    reason: str
    stage: int  # how far the device got through the checks (STAGE_*): higher is closer to fitting


@dataclass(slots=True)
class RequestReport:
    claim: str
    request: str
    device_class: str
    wanted: int  # devices needed (All: the matching devices)
    mode: str
    eligible: list[str] = field(default_factory=list)  # devices that pass every check on their own
    rejections: list[Rejection] = field(default_factory=list)

    @property
    def satisfiable_alone(self) -> bool:
        if self.mode == ALL:
            return bool(self.eligible) and not self.rejections_of_selected()
        return len(self.eligible) >= self.wanted

    def rejections_of_selected(self) -> list[Rejection]:
        """``All``: devices that match the selectors but cannot be allocated (so the request fails)."""
        return [r for r in self.rejections if r.stage >= STAGE_SELECTED]

    def counts(self, *, selected_only: bool = False) -> dict[str, int]:
        """Excluded devices per check; ``selected_only``: of the devices the selectors let through."""
        rejections = self.rejections_of_selected() if selected_only else self.rejections
        tally: dict[str, int] = {}
        for rejection in rejections:
            key = rejection.reason.split(":")[0]
            tally[key] = tally.get(key, 0) + 1
        return tally

    def closest(self, limit: int = CLOSEST) -> list[Rejection]:
        ranked = sorted(self.rejections, key=lambda r: -r.stage)
        return ranked[:limit]


@dataclass(slots=True)
class Explanation:
    node: str
    requests: list[RequestReport]
    pools: list[str]  # pool problems: incomplete / invalid
    combination: str | None = None  # why the requests do not fit together, when each fits alone

    def summary(self) -> str:
        lines = [f"cannot allocate on node {self.node}:"]
        lines += [f"  pool {problem}" for problem in self.pools]
        for report in self.requests:
            verdict = "enough devices on their own" if report.satisfiable_alone else "NOT satisfiable"
            need = "all matching devices" if report.mode == ALL else f"{report.wanted} device(s)"
            lines.append(
                f"  claim {report.claim}, request {report.request} (class {report.device_class}, {need}):"
                f" {len(report.eligible)} eligible, {verdict}"
            )
            for reason, count in sorted(report.counts().items(), key=lambda item: -item[1]):
                lines.append(f"    {count:4d} excluded: {reason}")
            closest = report.closest()
            if closest and not report.satisfiable_alone:
                lines.append("    closest candidates:")
                lines += [f"      {r.device}: {r.reason}" for r in closest]
        if self.combination:
            lines.append(f"  together: {self.combination}")
        return "\n".join(lines) + "\n"

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "pools": list(self.pools),
            "requests": [
                {
                    "claim": r.claim,
                    "request": r.request,
                    "deviceClassName": r.device_class,
                    "allocationMode": r.mode,
                    "wanted": r.wanted,
                    "eligible": list(r.eligible),
                    "satisfiableAlone": r.satisfiable_alone,
                    "excluded": r.counts(),
                    "closest": [{"device": c.device, "reason": c.reason} for c in r.closest()],
                }
                for r in self.requests
            ],
            "together": self.combination,
        }


# The checks in order; a device rejected at a later stage came closer to fitting.  From STAGE_SELECTED
# on, the device is one the request wants (an ``All`` request then fails: it wants every such device).
STAGE_POOL, STAGE_BINDING, STAGE_CLASS, STAGE_REQUEST, STAGE_NODE = range(5)
STAGE_SELECTED = STAGE_IN_USE = 5
STAGE_CAPACITY, STAGE_COUNTERS, STAGE_TAINT = 6, 7, 8


def explain(
    claims: Sequence[ResourceClaimView],
    node: JSON,
    slices: Sequence[JSON],
    classes: Iterable[JSON],
    allocated_claims: Iterable[ResourceClaimView],
    features: Iterable[str],
) -> Explanation:
    """Analyse claims that :func:`allocate` found no room for (raises what ``allocate`` raises)."""
    from dra_driver.tools.allocation.allocator import prepare_search  # noqa: PLC0415 -- allocator imports results

    gates = Features.from_names(features)
    pools = gather_pools(slices, node, gates)
    allocated = list(allocated_claims)
    search = prepare_search(claims, node, pools, classes, allocated, gates)
    search.validate()
    holders = _holders(allocated)
    node_label = str((node.get("metadata") or {}).get("name") or "")
    pool_problems = [
        f"{pool.label}: " + ("incomplete (being updated)" if pool.incomplete else f"invalid: {pool.invalid_reason}")
        for pool in pools
        if not pool.usable
    ]
    pool_problems += [
        f"{pool.label}: {problem}"
        for pool in pools
        if pool.usable and search.features.partitionable_devices and search.counters.exhausted(pool)
        for problem in _over_consumed(search, pool, holders)
    ]
    reports = [_report(search, key, data, holders) for key, data in sorted(search.request_data.items())]
    explanation = Explanation(node_label, reports, pool_problems)
    if all(report.satisfiable_alone for report in reports):
        explanation.combination = _combination(search)
    return explanation


def _holders(allocated_claims: Iterable[ResourceClaimView]) -> dict[DeviceID, str]:
    holders: dict[DeviceID, str] = {}
    for claim in allocated_claims:
        for result in claim.results:
            if result.admin_access or result.share_id:
                continue
            holders[(result.driver, result.pool, result.device)] = claim_label(claim)
    return holders


def _report(search: Search, key: RequestKey, data: RequestData, holders: Mapping[DeviceID, str]) -> RequestReport:
    class_name = data.request.class_name
    report = RequestReport(
        claim=claim_label(search.claims[key[0]]),
        request=data.request_name,
        device_class=class_name,
        wanted=data.num_devices,
        mode=data.request.mode,
    )
    for pool in search.pools:
        if not pool.usable:
            report.rejections.append(Rejection(pool.label, "pool not usable: " + _pool_problem(pool), STAGE_POOL))
            continue
        for resource_slice in pool.slices:
            for device in spec_of(resource_slice).get("devices") or ():
                candidate = Candidate(
                    (pool.driver, pool.name, str(device.get("name") or "")),
                    device,
                    resource_slice,
                    pool,
                    search.facts.get(device),
                )
                rejection = _check(search, key, data, candidate, holders)
                if rejection is None:
                    report.eligible.append(device_id_text(candidate.id))
                else:
                    report.rejections.append(rejection)
    return report


def _pool_problem(pool: Pool) -> str:
    return "incomplete (being updated)" if pool.incomplete else f"invalid ({pool.invalid_reason})"


def _check(
    search: Search, key: RequestKey, data: RequestData, candidate: Candidate, holders: Mapping[DeviceID, str]
) -> Rejection | None:
    name = device_id_text(candidate.id)
    spec = data.request
    features = search.features
    if not features.binding_and_status and candidate.facts.binding_conditions:
        return Rejection(name, "has binding conditions: DRADeviceBindingConditions is off", STAGE_BINDING)
    class_failure = _failing_selector(search, data.class_expressions, candidate, data.class_owner)
    if class_failure is not None:
        return Rejection(name, f"class selector: {class_failure}", STAGE_CLASS)
    request_failure = _failing_selector(search, data.request_expressions, candidate, data.claim_owner)
    if request_failure is not None:
        return Rejection(name, f"request selector: {request_failure}", STAGE_REQUEST)
    if spec_of(candidate.slice).get("perDeviceNodeSelection"):
        fields = device_fields(candidate.device)
        if not node_matches(
            search.node, str(fields.get("nodeName") or ""), bool(fields.get("allNodes")), fields.get("nodeSelector")
        ):
            return Rejection(name, "node selection: the device is not available on this node", STAGE_NODE)
    if not spec.admin_access and candidate.id in search.allocated.devices:
        return Rejection(name, f"in use: allocated to claim {holders.get(candidate.id, '?')}", STAGE_IN_USE)
    if features.consumable_capacity and not capacity.fits(
        candidate, spec.capacity, search.allocated.capacity.get(candidate.id), None
    ):
        return Rejection(name, "capacity: the requested capacity does not fit", STAGE_CAPACITY)
    if candidate.facts.consumes:
        if not features.partitionable_devices:
            return Rejection(name, "counters: consumes counters but DRAPartitionableDevices is off", STAGE_COUNTERS)
        if search.counters.exhausted(candidate.pool):
            sets = ", ".join(sorted(_over_consumed_sets(search, candidate.pool)))
            return Rejection(
                name,
                f"counters: pool {candidate.pool.label} is over-consumed by allocated claims (counter set {sets})",
                STAGE_COUNTERS,
            )
        shortage = _counter_shortage(search, candidate)
        if shortage is not None:
            return Rejection(name, f"counters: {shortage}", STAGE_COUNTERS)
    if features.device_taints:
        for taint in candidate.facts.taints:
            if taint.get("effect") in BLOCKING_EFFECTS and not any(tolerates(t, taint) for t in spec.tolerations):
                text = f"{taint.get('key')}={taint.get('value', '')}:{taint.get('effect')}"
                return Rejection(name, f"taint: {text} not tolerated", STAGE_TAINT)
    return None


def class_name(data: RequestData) -> str:
    return str(((data.device_class or {}).get("metadata") or {}).get("name") or data.request.class_name)


def _failing_selector(search: Search, expressions: Sequence[str], candidate: Candidate, owner: str) -> str | None:
    for expression in expressions:
        if not search.evaluator.all_match([expression], candidate.device, candidate.id, owner):
            return expression
    return None


def _counter_shortage(search: Search, candidate: Candidate) -> str | None:
    """Every counter the device needs more of than is left (memory slices first, as they decide)."""
    available = search.counters.available(candidate.pool)
    short = []
    for set_name, counters in candidate.facts.consumes:
        for counter, amount in counters:
            left = available[set_name][counter]
            if amount > left:
                short.append(f"{set_name}/{counter} needs {format_amount(amount)}, {format_amount(max(left, 0))} left")
    if not short:
        return None
    short.sort(key=lambda text: "/memory-slice-" not in text)
    return "; ".join(short[:3]) + (f" (and {len(short) - 3} more)" if len(short) > 3 else "")


def _over_consumed_sets(search: Search, pool: Pool) -> dict[str, list[tuple[str, Amount, Amount]]]:
    """Counter set -> (counter, consumed, available) of each counter allocated claims over-consume."""
    available = search.counters.available(pool)
    found: dict[str, list[tuple[str, Amount, Amount]]] = {}
    for set_name, counters in pool.counter_sets.items():
        for counter, published in counters.items():
            left = available[set_name][counter]
            if left < 0:
                found.setdefault(set_name, []).append((counter, published - left, published))
    return found


def _over_consumed(search: Search, pool: Pool, holders: Mapping[DeviceID, str]) -> list[str]:
    """One line per over-consumed counter set: where it is published, which counters, which claims."""
    devices = pool.devices_by_name()
    lines = []
    for set_name, counters in sorted(_over_consumed_sets(search, pool).items()):
        counters.sort(key=lambda entry: (not entry[0].startswith("memory-slice-"), entry[0]))
        names = {counter for counter, _, _ in counters}
        claims = sorted(
            {
                holders.get((pool.driver, pool.name, device_name), "?")
                for device_name in search.allocated.by_pool.get(pool.id, ())
                if device_name in devices
                for consumed_set, consumed in search.facts.get(devices[device_name]).consumes
                if consumed_set == set_name and any(counter in names for counter, _ in consumed)
            }
        )
        shown = "; ".join(
            f"{counter} {format_amount(consumed)} consumed, {format_amount(published)} available"
            for counter, consumed, published in counters[:3]
        )
        more = f" (and {len(counters) - 3} more)" if len(counters) > 3 else ""
        lines.append(
            f"counter set {set_name} (ResourceSlice {pool.counter_set_slices.get(set_name, '?')}) is over-consumed"
            f" by allocated claims {', '.join(claims)}: {shown}{more}; nothing that consumes this pool's counters"
            " can be allocated until one of those claims is deallocated"
        )
    return lines


def _combination(search: Search) -> str:
    constraints = [c for per_claim in search.constraints for c in per_claim]
    parts = []
    if constraints:
        described = ", ".join(
            f"{type(c).__name__[0].lower() + type(c).__name__[1:]} {c.attribute}"
            + (f" over {sorted(c.request_names)}" if c.request_names else "")
            for c in constraints
        )
        parts.append(f"the constraints ({described}) cannot all hold")
    parts.append("or the requests compete for the same devices or shared counters")
    return "each request has enough devices on its own; together they do not fit: " + " ".join(parts)
