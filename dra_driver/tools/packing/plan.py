"""``migdra plan``: will this workload fit these nodes, under this placement policy?

The nodes are GPU models x counts (fresh, MIG enabled, nothing created); the workload is the
ResourceClaims and ResourceClaimTemplates users apply, each with a count.  The claims are placed one
after the other, in the order given, by kube-scheduler's allocator (ported) on the slices each node
would publish under the policy -- re-published after every allocation when the policy follows
occupancy, exactly as in the packing benchmark -- each on the first node (in name order) where it
fits.  The answer: how many of each fit, the first that does not and the allocator's explanation
why, the occupancy map, and -- when every claim asks for one exclusive MIG device -- how many the
repacking oracle could place, which says whether a failure is fragmentation (a better order would fit
it) or capacity (nothing would).

Claims for shares of a shared GPU instance (``mig-shared.migdra.io``, ``capacity.requests``) are placed
the same way, by the allocator with DRAConsumableCapacity on: several on one shared device while its
``computeSlices`` last.  The answer lists every shared device in use with its shares and the compute
slices they take.  The oracle packs GPU instances, not compute instances inside them, so a workload
with shares gets no oracle count and no fragmentation/capacity verdict.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from dra_driver.devicemodel.occupancy import GpuOccupancy, occupancy
from dra_driver.devicemodel.policy import placement_policy
from dra_driver.devicemodel.vocabulary import DEFAULT_DRIVER_NAME
from dra_driver.errors import ConfigurationError
from dra_driver.jsontypes import JSON
from dra_driver.mig.catalog import MigCatalog, load_catalog
from dra_driver.resourceclaim import ObjectMetaView, ResourceClaimSpecView, ResourceClaimView, describe_validation_error
from dra_driver.tools.allocation import DEFAULT_FEATURES
from dra_driver.tools.allocation.explain import explain
from dra_driver.tools.packing.oracle import RepackingOracle
from dra_driver.tools.packing.simulation import SimNode, accepted_profiles, selects_shared
from dra_driver.tools.packing.workloads import ClusterShape

_NODES = re.compile(r"^(?:(?P<count>\d+):)?(?P<gpus>[^:]+)$")
MAX_NODES = 1000
MAX_GPUS_PER_NODE = 64


def parse_nodes(texts: Sequence[str], catalog: MigCatalog | None = None, flag: str = "--nodes") -> ClusterShape:
    """``[COUNT:]MODEL=N[,MODEL=N…]`` per flag: COUNT nodes (default 1), each with N GPUs of each MODEL."""
    catalog = catalog or load_catalog()
    nodes: list[tuple[str, ...]] = []
    for text in texts:
        match = _NODES.match(text.strip())
        if match is None:
            raise ConfigurationError(f"{flag} {text!r}: expected [COUNT:]MODEL=N[,MODEL=N...], e.g. 2:H100-SXM5-80GB=8")
        count = int(match["count"] or 1)
        if not 1 <= count <= MAX_NODES:
            raise ConfigurationError(f"{flag} {text!r}: the node count must be 1 to {MAX_NODES}")
        gpus: list[str] = []
        for part in match["gpus"].split(","):
            model_text, equals, number = part.strip().partition("=")
            number = number.strip() if equals else "1"
            if not number.isdigit() or not 1 <= int(number) <= MAX_GPUS_PER_NODE:
                raise ConfigurationError(
                    f"{flag} {text!r}: {part.strip()!r} needs a GPU count of 1 to {MAX_GPUS_PER_NODE} after '='"
                )
            try:
                model = catalog.model(model_text.strip())
            except KeyError:
                known = ", ".join(catalog.gpus)
                raise ConfigurationError(
                    f"{flag} {text!r}: unknown GPU model {model_text.strip()!r}; known: {known}"
                ) from None
            gpus += [model.key] * int(number)
        if len(gpus) > MAX_GPUS_PER_NODE:
            raise ConfigurationError(f"{flag} {text!r}: {len(gpus)} GPUs on one node; at most {MAX_GPUS_PER_NODE}")
        nodes += [tuple(gpus)] * count
    if not nodes:
        raise ConfigurationError(f"give at least one {flag}")
    return ClusterShape("plan", tuple(nodes))


@dataclass(frozen=True, slots=True)
class PlannedClaim:
    """One claim of the workload: its name, its spec, and how many copies to place."""

    name: str
    spec: ResourceClaimSpecView
    count: int


def claims_from_documents(
    documents: Sequence[JSON], counts: Mapping[str, int], flag: str = "--count"
) -> list[PlannedClaim]:
    """ResourceClaims (their ``spec``) and ResourceClaimTemplates (their ``spec.spec``), counts by name."""
    planned: list[PlannedClaim] = []
    seen: set[str] = set()
    for document in documents:
        kind = document.get("kind")
        name = str((document.get("metadata") or {}).get("name") or "")
        spec = (
            (document.get("spec") or {})
            if kind == "ResourceClaim"
            else ((document.get("spec") or {}).get("spec") or {})
        )
        if name in seen:
            raise ConfigurationError(f"two claims are called {name!r}: plan needs each name once")
        seen.add(name)
        try:
            read = ResourceClaimSpecView.model_validate(spec)
        except ValidationError as e:
            where = "spec" if kind == "ResourceClaim" else "spec.spec"
            raise ConfigurationError(f"{kind} {name}: {where}.{describe_validation_error(e)}") from e
        planned.append(PlannedClaim(name, read, counts.get(name, 1)))
    unknown = sorted(set(counts) - seen)
    if unknown and counts:
        raise ConfigurationError(f"{flag} {unknown[0]}=...: no claim or template of that name in the workload")
    return planned


def compute_pod_counts(pods: Sequence[JSON], claim_names: set[str]) -> dict[str, int]:
    """How many of each claim or template the Pods among a workload's files use; pure.

    Each Pod gets its own claim from a ``resourceClaimTemplateName`` (so a template counts once per Pod)
    and shares a ``resourceClaimName`` with every other Pod naming it (so a claim counts once).  A Pod
    naming a claim or template that is not in the workload is one error naming both.
    """
    counts: dict[str, int] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        label = f"Pod/{meta.get('name', '')}"
        for index, reference in enumerate((pod.get("spec") or {}).get("resourceClaims") or []):
            if not isinstance(reference, Mapping):
                continue
            template = reference.get("resourceClaimTemplateName")
            claim = reference.get("resourceClaimName")
            name = str(template or claim or "")
            if not name:
                continue
            if name not in claim_names:
                field = "resourceClaimTemplateName" if template else "resourceClaimName"
                raise ConfigurationError(
                    f"{label}: spec.resourceClaims[{index}].{field} {name!r} is not among the workload's claims and "
                    "templates; give its file too"
                )
            counts[name] = counts.get(name, 0) + 1 if template else 1
    return counts


@dataclass(frozen=True, slots=True)
class SharedUse:
    """One shared device in use: its node and name, its compute slices, and each share's (claim, size)."""

    node: str
    device: str
    compute_slices: int
    shares: tuple[tuple[str, int], ...]

    @property
    def used(self) -> int:
        return sum(size for _, size in self.shares)


def shared_uses(nodes: Sequence[SimNode]) -> list[SharedUse]:
    """Every shared device the nodes' allocated claims hold, with its shares (claim order)."""
    uses: list[SharedUse] = []
    for node in nodes:
        by_device: dict[str, list[tuple[str, int]]] = {}
        for uid, claim in node.claims.items():
            for result in claim.results:
                if result.share:
                    by_device.setdefault(result.device, []).append((uid, node.share_size(result)))
        for name in sorted(by_device):
            device = node.by_name[name]
            uses.append(SharedUse(node.name, name, device.compute_slices, tuple(by_device[name])))
    return uses


@dataclass
class PlanResult:
    shape: ClusterShape
    policy: str
    placed: Counter[str] = field(default_factory=Counter)
    nodes_used: dict[str, Counter[str]] = field(default_factory=dict)
    first_failure: tuple[str, int] | None = None  # (claim name, copy number from 1)
    why: str = ""
    explanation: dict[str, Any] | None = None
    gpus: list[GpuOccupancy] = field(default_factory=list)
    oracle_placed: dict[str, int] | None = None  # per claim, what the repacking oracle would place (in order)
    requested: dict[str, int] = field(default_factory=dict)
    driver: str = DEFAULT_DRIVER_NAME
    shares: list[SharedUse] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.first_failure is None


def shared_class_problem(claims: Sequence[PlannedClaim]) -> str | None:
    """Why these claims cannot be planned on nodes without shared GPU-instance devices: the first request
    that names the shared DeviceClass (``mig-shared.*``), whose devices a node publishes only with
    ``sharedDevices: true``; None if none does."""
    for claim in claims:
        for request in claim.spec.devices.requests:
            for option in [*([request.exactly] if request.exactly is not None else []), *request.first_available]:
                class_name = option.device_class_name
                if class_name.startswith("mig-shared."):
                    return (
                        f"claim {claim.name}: request {request.name!r} asks for DeviceClass {class_name}, "
                        "whose shared GPU-instance devices a node publishes only with sharedDevices: true: "
                        "plan with --shared-devices"
                    )
    return None


def plan(
    shape: ClusterShape,
    claims: Sequence[PlannedClaim],
    classes: Sequence[JSON],
    policy: str,
    driver: str = DEFAULT_DRIVER_NAME,
) -> PlanResult:
    """Place every copy of every claim in order; stop at the first that does not fit anywhere."""
    nodes = [
        SimNode(f"node-{i + 1}", models, placement_policy(policy), driver, lag=0, shared_devices=shape.shared_devices)
        for i, models in enumerate(shape.nodes)
    ]
    result = PlanResult(shape, policy, requested={c.name: c.count for c in claims}, driver=driver)
    count = 0
    for planned in claims:
        for copy in range(1, planned.count + 1):
            uid = f"{planned.name}-{copy}"
            claim = ResourceClaimView(metadata=ObjectMetaView(name=uid, namespace="plan", uid=uid), spec=planned.spec)
            for node in nodes:
                allocation = node.try_allocate(claim, classes, None)
                if allocation is not None:
                    node.add(uid, claim, allocation)
                    count += 1
                    if node.policy.uses_occupancy:
                        node.publish(count)
                    result.placed[planned.name] += 1
                    result.nodes_used.setdefault(node.name, Counter())[planned.name] += 1
                    break
            else:
                result.first_failure = (planned.name, copy)
                closest = max(nodes, key=lambda n: n.memory_slices - n.used_slices())  # the emptiest node
                explanation = explain(
                    [claim], closest.node, closest.visible, classes, closest.claims.values(), DEFAULT_FEATURES
                )
                result.explanation = explanation.as_dict()
                result.why = explanation.summary()
                break
        if result.first_failure is not None:
            break
    slices = [s for node in nodes for s in node.visible]
    allocated = [c for node in nodes for c in node.claims.values()]
    result.gpus = occupancy(slices, allocated, driver)
    result.shares = shared_uses(nodes)
    result.oracle_placed = _oracle_placed(shape, claims, classes, driver)
    return result


def _single_device_selectors(spec: ResourceClaimSpecView, classes: Sequence[JSON]) -> list[str] | None:
    """The CEL selectors (class first) of a claim that asks for exactly one device; None for any other
    shape, and for a share (a request with ``capacity``)."""
    requests = spec.devices.requests
    if len(requests) != 1 or spec.devices.constraints:
        return None
    exactly = requests[0].exactly
    if exactly is None or (exactly.count or 1) != 1 or (exactly.allocation_mode or "ExactCount") != "ExactCount":
        return None
    if exactly.capacity is not None:
        return None
    by_name = {str((c.get("metadata") or {}).get("name")): c for c in classes}
    device_class = by_name.get(exactly.device_class_name)
    if device_class is None:
        return None
    expressions = [
        s["cel"]["expression"] for s in (device_class.get("spec") or {}).get("selectors") or [] if "cel" in s
    ]
    expressions += [s["cel"]["expression"] for s in exactly.selectors if "cel" in s]
    return expressions


def plan_oracle(
    shape: ClusterShape, claims: Sequence[PlannedClaim], classes: Sequence[JSON], driver: str
) -> RepackingOracle | None:
    """The repacking oracle of these claims (each a request type: the profiles its class's and its own
    selectors accept on each model); None when a claim is not a single exclusive MIG device (a claim
    whose selectors accept a shared device may be a share: the oracle cannot model compute instances)."""
    selectors = {c.name: _single_device_selectors(c.spec, classes) for c in claims}
    if any(s is None for s in selectors.values()):
        return None
    known = {name: expressions or [] for name, expressions in selectors.items()}
    if selects_shared(shape, known, driver):
        return None
    return RepackingOracle(shape.gpu_models, accepted_profiles(shape, known, driver))


def _oracle_placed(
    shape: ClusterShape, claims: Sequence[PlannedClaim], classes: Sequence[JSON], driver: str
) -> dict[str, int] | None:
    """Per claim, how many copies (in order) the repacking oracle places; None if a claim is not one device."""
    oracle = plan_oracle(shape, claims, classes, driver)
    if oracle is None:
        return None
    demand: Counter[str] = Counter()
    placed: dict[str, int] = {c.name: 0 for c in claims}
    for claim in claims:
        for _ in range(claim.count):
            demand[claim.name] += 1
            if not oracle.feasible(dict(demand)):
                return placed
            placed[claim.name] += 1
    return placed


@dataclass(frozen=True, slots=True)
class RateEstimate:
    """Per claim, the share of its arrivals placed: mean and 95 % CI over the seeds."""

    acceptance: Mapping[str, tuple[float, float, float]]
    oracle: Mapping[str, tuple[float, float, float]] | None
    total: tuple[float, float, float]
    oracle_total: tuple[float, float, float] | None


def simulate_rates(
    shape: ClusterShape,
    claims: Sequence[PlannedClaim],
    rates: Mapping[str, float],
    classes: Sequence[JSON],
    policy: str,
    *,
    lifetime: float = 1.0,
    arrivals: int = 500,
    seeds: int = 5,
    driver: str = DEFAULT_DRIVER_NAME,
) -> RateEstimate:
    """Claims arriving at ``rates`` (per unit of time) and living ``lifetime`` on average: what share of
    each is placed in steady state (the packing benchmark's replay), beside the repacking oracle."""
    from dra_driver.tools.packing.bench import mean_ci  # noqa: PLC0415
    from dra_driver.tools.packing.simulation import run_oracle, run_policy  # noqa: PLC0415
    from dra_driver.tools.packing.workloads import UserClaim, rate_trace  # noqa: PLC0415

    kinds = {
        c.name: UserClaim(c.name, c.spec.model_dump(by_alias=True, exclude_none=True))
        for c in claims
        if rates.get(c.name, 0) > 0
    }
    oracle = plan_oracle(shape, [c for c in claims if c.name in kinds], classes, driver)
    per_kind: dict[str, list[float]] = {name: [] for name in kinds}
    per_kind_oracle: dict[str, list[float]] = {name: [] for name in kinds}
    totals: list[float] = []
    oracle_totals: list[float] = []
    for seed in range(1, seeds + 1):
        trace = rate_trace({n: rates[n] for n in kinds}, len(shape.nodes), seed, arrivals, lifetime)
        outcome = run_policy(trace, shape, policy, classes, seed=seed, driver=driver, kinds=kinds)
        totals.append(outcome.acceptance)
        for name in kinds:
            offered = outcome.offered_by_kind[name]
            per_kind[name].append(outcome.accepted_by_kind[name] / offered if offered else 1.0)
        if oracle is not None:
            best = run_oracle(trace, shape, driver=driver, kinds=kinds, oracle=oracle)
            oracle_totals.append(best.acceptance)
            for name in kinds:
                offered = best.offered_by_kind[name]
                per_kind_oracle[name].append(best.accepted_by_kind[name] / offered if offered else 1.0)
    return RateEstimate(
        acceptance={name: mean_ci(values) for name, values in per_kind.items()},
        oracle=None if oracle is None else {name: mean_ci(values) for name, values in per_kind_oracle.items()},
        total=mean_ci(totals),
        oracle_total=None if oracle is None else mean_ci(oracle_totals),
    )
