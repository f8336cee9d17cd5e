"""What the packing benchmark and ``migdra plan`` place: kinds of claims, their mixes, clusters, traces.

A *claim kind* is one ResourceClaim shape: one request for one device of the ``mig.migdra.io`` class
with a CEL selector, exactly what a user applies.  The benchmark's kinds select by generic attributes
(``computeSlices``, ``placementSize``) rather than profile names, so one kind means the same share
of a GPU on every model (``1g`` is 1g.10gb on an H100, 1g.5gb on an A100-40GB, 1g.6gb on an A30) and a
mixed cluster needs no per-model workload.  ``+me``/``+gfx`` variants are left out: they differ only
in engines.

A *pod kind* (:class:`PodKind`) is a pod's need instead -- N compute slices and M GiB of GPU memory,
each pod its own compute instance (full SM isolation) -- asked for in one of three ways: an exclusive
MIG device (``mig.migdra.io``, at least N compute slices and M GiB), a *share* of a shared GPU
instance (``mig-shared.migdra.io``, ``capacity.requests.computeSlices: N``), or a share if one fits
and else an exclusive device (``firstAvailable``).  A share's memory is the GPU instance's, pooled
and not isolated, so the share's selector asks for GPU instances whose memory per compute slice is at
least M/N: if every sharer asks so, the sharers' needs add up to at most the instance's memory, and
each can count on its proportional part (memory x N / the instance's compute slices) as long as the
others keep to theirs.  The sharing workloads run the same pods all three ways side by side.

A *trace* is the same sequence of arrivals for every policy of a run (same seed): arrival times
(Poisson, or Poisson bursts), exponential lifetimes, kinds drawn by weight, and per arrival the order
in which nodes are tried -- kube-scheduler's choice between nodes is not DRA's (no DRA scoring), and
for pods without CPU or memory requests the node scores tie, so the node is a uniform choice among
those that fit: a random permutation tried in order gives exactly that.
"""

from __future__ import annotations

import enum
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from dra_driver.devicemodel.vocabulary import DEFAULT_DRIVER_NAME
from dra_driver.mig.catalog import GpuModel, load_catalog

MIG_CLASS = "mig.migdra.io"


@dataclass(frozen=True, slots=True)
class ClaimKind:
    """One shape of ResourceClaim: a single request for a MIG device matching ``selector``."""

    name: str
    selector: str  # CEL, with {driver} for the driver name
    memory_slices: int  # of an 8-slice GPU, for the offered load (A30 kinds are half-GPU there)

    def expression(self, driver: str = DEFAULT_DRIVER_NAME) -> str:
        return self.selector.replace("{driver}", driver)

    def spec(self, driver: str = DEFAULT_DRIVER_NAME) -> dict[str, Any]:
        """The claim's spec, as a user would write it."""
        return {
            "devices": {
                "requests": [
                    {
                        "name": "mig",
                        "exactly": {
                            "deviceClassName": MIG_CLASS,
                            "selectors": [{"cel": {"expression": self.expression(driver)}}],
                        },
                    }
                ]
            }
        }


class ClaimShape(Protocol):
    """What a simulation needs of a kind of claim: its name, its spec, its size for the offered load."""

    @property
    def name(self) -> str: ...

    @property
    def memory_slices(self) -> int: ...

    def spec(self, driver: str = DEFAULT_DRIVER_NAME) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class UserClaim:
    """A claim a user wrote (``migdra plan``): its spec as given; its size is not known in advance."""

    name: str
    claim_spec: Mapping[str, Any]
    memory_slices: int = 0

    def spec(self, driver: str = DEFAULT_DRIVER_NAME) -> dict[str, Any]:
        return dict(self.claim_spec)


def _kind(name: str, compute: int, size: int) -> ClaimKind:
    attributes = "device.attributes['{driver}']"
    return ClaimKind(
        name,
        f"{attributes}.computeSlices == {compute} && {attributes}.placementSize == {size} && "
        f"!{attributes}.profile.contains('+')",
        size,
    )


KINDS: dict[str, ClaimKind] = {
    kind.name: kind
    for kind in (
        _kind("1g", 1, 1),
        _kind("1g-2s", 1, 2),  # 1g with two memory slices: H100 1g.20gb, A100-40GB 1g.10gb
        _kind("2g", 2, 2),
        _kind("3g", 3, 4),
        _kind("4g", 4, 4),
        _kind("7g", 7, 8),
    )
}
SEVEN_G = "7g"

SHARED_CLASS = "mig-shared.migdra.io"
GIB = 1 << 30


class Asked(enum.StrEnum):
    """How a pod asks for its compute instance."""

    EXCLUSIVE = "exclusive"  # its own GPU instance (mig.migdra.io)
    SHARED = "shared"  # a compute instance in a shared GPU instance (mig-shared.migdra.io)
    SHARED_OR_EXCLUSIVE = "shared-or-exclusive"  # firstAvailable: a share, else its own GPU instance
    SHARED_7G = "shared-7g"  # a compute instance in a shared 7g GPU instance (the whole GPU)


@dataclass(frozen=True, slots=True)
class PodKind:
    """A pod that needs ``compute_slices`` compute slices and ``memory_gib`` GiB of GPU memory, asked
    for as ``asked`` says (module docstring: what a sharer's memory selector guarantees)."""

    name: str
    compute_slices: int
    memory_gib: float
    asked: Asked = Asked.EXCLUSIVE

    @property
    def memory_slices(self) -> int:
        """Its memory in units of an H100 memory slice (10 GB), rounded up: its size for the offered load."""
        return max(1, math.ceil(self.memory_gib / 10))

    def exclusive_expression(self, driver: str = DEFAULT_DRIVER_NAME) -> str:
        """An exclusive MIG device with at least the pod's compute slices and memory (no ``+me`` variants)."""
        attributes = f"device.attributes['{driver}']"
        return (
            f"{attributes}.computeSlices >= {self.compute_slices} && "
            f"device.capacity['{driver}'].memory.compareTo(quantity('{_mebibytes(self.memory_gib)}Mi')) >= 0 && "
            f"!{attributes}.profile.contains('+')"
        )

    def share_expression(self, driver: str = DEFAULT_DRIVER_NAME) -> str:
        """A shared GPU instance with at least the pod's memory per compute slice (its proportional part)."""
        per_slice = self.memory_gib * GIB / self.compute_slices
        expression = (
            f"device.capacity['{driver}'].memory.asApproximateFloat() >= "
            f"{per_slice:.1f} * double(device.attributes['{driver}'].computeSlices)"
        )
        if self.asked is Asked.SHARED_7G:
            expression += f" && device.attributes['{driver}'].computeSlices == 7"
        return expression

    def _exclusive(self, driver: str) -> dict[str, Any]:
        return {"deviceClassName": MIG_CLASS, "selectors": [{"cel": {"expression": self.exclusive_expression(driver)}}]}

    def _share(self, driver: str) -> dict[str, Any]:
        return {
            "deviceClassName": SHARED_CLASS,
            "selectors": [{"cel": {"expression": self.share_expression(driver)}}],
            "capacity": {"requests": {"computeSlices": str(self.compute_slices)}},
        }

    def spec(self, driver: str = DEFAULT_DRIVER_NAME) -> dict[str, Any]:
        """The claim's spec, as a user would write it."""
        if self.asked is Asked.EXCLUSIVE:
            request: dict[str, Any] = {"name": "mig", "exactly": self._exclusive(driver)}
        elif self.asked in (Asked.SHARED, Asked.SHARED_7G):
            request = {"name": "mig", "exactly": self._share(driver)}
        else:
            request = {
                "name": "mig",
                "firstAvailable": [
                    {"name": "share", **self._share(driver)},
                    {"name": "exclusive", **self._exclusive(driver)},
                ],
            }
        return {"devices": {"requests": [request]}}

    def expression(self, driver: str = DEFAULT_DRIVER_NAME) -> str:
        """The selector the repacking oracle reads: exclusive kinds only (it cannot model shares)."""
        if self.asked is not Asked.EXCLUSIVE:
            raise ValueError(f"{self.name}: the repacking oracle models exclusive devices only, not shares")
        return self.exclusive_expression(driver)


def _mebibytes(gib: float) -> int:
    return math.ceil(gib * 1024)


def pod_kinds(needs: Mapping[str, tuple[int, float]], asked: Asked) -> dict[str, PodKind]:
    """The same pods (name -> (compute slices, GiB)) asked for one way."""
    return {name: PodKind(name, slices, gib, asked) for name, (slices, gib) in needs.items()}


# Inference pods of one or two compute slices needing 5-18 GiB.  "memory": a third of the pods need more
# memory per compute slice than a 1g.10gb has (9.75 GiB on an H100), which sharing a 3g or 7g GPU
# instance gives them at one compute slice each; "small": every pod fits the smallest GPU instance of its
# compute size, where sharing has nothing to win but the freedom of mixing sizes in one instance.
POD_NEEDS: dict[str, dict[str, tuple[int, float]]] = {
    "memory": {
        "1c-6g": (1, 6), "1c-9g": (1, 9), "1c-12g": (1, 12), "1c-18g": (1, 18), "2c-12g": (2, 12), "2c-18g": (2, 18)
    },
    "small": {"1c-5g": (1, 5), "1c-8g": (1, 8), "2c-10g": (2, 10), "2c-16g": (2, 16)},
}  # fmt: skip
POD_WEIGHTS: dict[str, dict[str, float]] = {
    "memory": {"1c-6g": 0.25, "1c-9g": 0.15, "1c-12g": 0.25, "1c-18g": 0.1, "2c-12g": 0.15, "2c-18g": 0.1},
    "small": {"1c-5g": 0.35, "1c-8g": 0.35, "2c-10g": 0.15, "2c-16g": 0.15},
}


@dataclass(frozen=True, slots=True)
class Mix:
    """Kinds by weight, and how they arrive."""

    name: str
    weights: Mapping[str, float]
    burst: float = 1.0  # mean arrivals per burst (geometric); 1 = plain Poisson
    description: str = ""

    def kinds(self) -> list[str]:
        return [name for name, weight in self.weights.items() if weight > 0]


_INFERENCE = {"1g": 0.55, "1g-2s": 0.15, "2g": 0.15, "3g": 0.08, "4g": 0.04, "7g": 0.03}

MIXES: dict[str, Mix] = {
    mix.name: mix
    for mix in (
        Mix(
            "inference",
            _INFERENCE,
            description="inference-heavy: mostly small instances, a few large",
        ),
        Mix(
            "training",
            {"1g": 0.1, "1g-2s": 0.05, "2g": 0.1, "3g": 0.3, "4g": 0.2, "7g": 0.25},
            description="training-heavy: mostly 3g/4g/7g",
        ),
        Mix(
            "uniform",
            {"1g": 1, "1g-2s": 1, "2g": 1, "3g": 1, "4g": 1, "7g": 1},
            description="every kind equally often",
        ),
        Mix(
            "bursty",
            _INFERENCE,
            burst=6.0,
            description="the inference mix arriving in bursts of 6 on average",
        ),
    )
}


@dataclass(frozen=True, slots=True)
class ClusterShape:
    """Nodes, each a list of GPU models (catalog keys), all MIG-enabled and empty at the start."""

    name: str
    nodes: tuple[tuple[str, ...], ...]
    # Whether the nodes publish shared GPU-instance devices (the plugin's ``sharedDevices: true``; off by
    # default, docs/device-model.md): without them no claim can be a share.
    shared_devices: bool = False

    @property
    def gpu_models(self) -> list[str]:
        return [model for node in self.nodes for model in node]

    def memory_slices(self) -> int:
        """The cluster's memory slices, from the MIG catalog (an A30 has 4, an H100 or A100 8)."""
        catalog = load_catalog()
        return sum(_memory_slices_of(catalog.model(model)) for model in self.gpu_models)

    def compute_slices(self) -> int:
        """The cluster's compute slices, from the MIG catalog (an H100 has 7, an A30 4)."""
        catalog = load_catalog()
        return sum(catalog.model(model).compute_slices for model in self.gpu_models)

    def mig_memory_gib(self) -> float:
        """The GPU memory MIG can give out, summed over the GPUs: each GPU's largest GPU instance's."""
        catalog = load_catalog()
        return sum(
            max(p.memory_size_mb for p in catalog.model(model).gpu_instance_profiles) / 1024
            for model in self.gpu_models
        )


def _memory_slices_of(model: GpuModel) -> int:
    return max(p.end for profile in model.gpu_instance_profiles for p in profile.placements)


CLUSTERS: dict[str, ClusterShape] = {
    shape.name: shape
    for shape in (
        ClusterShape("1x8-H100", (("H100-SXM5-80GB",) * 8,)),
        ClusterShape("4x8-A100-40GB", (("A100-SXM4-40GB",) * 8,) * 4),
        ClusterShape("mixed-H100-A30", (("H100-SXM5-80GB",) * 8, ("A30",) * 8)),
    )
}


@dataclass(frozen=True, slots=True)
class Arrival:
    time: float
    lifetime: float
    kind: str
    node_order: tuple[int, ...]  # the order in which nodes are tried (a uniform choice among those that fit)


@dataclass(frozen=True, slots=True)
class Trace:
    arrivals: tuple[Arrival, ...]
    warmup: int = 0  # arrivals before the measurement starts (the cluster filling up)
    departures: bool = True  # False: fill until the first reject, nothing leaves

    @property
    def measured_from(self) -> float:
        return self.arrivals[self.warmup].time if self.warmup < len(self.arrivals) else float("inf")


def _pick(weights: Mapping[str, float], rng: random.Random) -> str:
    names = [name for name, weight in weights.items() if weight > 0]
    return rng.choices(names, weights=[weights[name] for name in names])[0]


def poisson_trace(
    mix: Mix,
    cluster: ClusterShape,
    seed: int,
    arrivals: int,
    load: float = 1.0,
    warmup_fraction: float = 0.25,
    kinds: Mapping[str, ClaimShape] = KINDS,
) -> Trace:
    """Arrivals at rate λ (bursts at λ / burst), lifetimes exponential with mean 1, kinds by weight.

    ``load`` is the offered load: λ * mean lifetime * mean memory slices per claim / the cluster's
    memory slices (an A30 counts its 4 slices, and a kind its slices on an 8-slice GPU): at 1.0 the
    cluster would be exactly full on average if every instance could be placed anywhere.
    """
    rng = random.Random(seed)
    total_slices = cluster.memory_slices()
    weights = {name: mix.weights[name] for name in mix.kinds()}
    mean_slices = sum(weights[n] * kinds[n].memory_slices for n in weights) / sum(weights.values())
    rate = load * total_slices / mean_slices
    burst_rate = rate / mix.burst
    now = 0.0
    out: list[Arrival] = []
    nodes = list(range(len(cluster.nodes)))
    while len(out) < arrivals:
        now += rng.expovariate(burst_rate)
        size = 1 if mix.burst <= 1 else _geometric(rng, mix.burst)
        for _ in range(min(size, arrivals - len(out))):
            order = nodes[:]
            rng.shuffle(order)
            out.append(Arrival(now, rng.expovariate(1.0), _pick(weights, rng), tuple(order)))
    return Trace(tuple(out), warmup=int(arrivals * warmup_fraction))


def rate_trace(rates: Mapping[str, float], nodes: int, seed: int, arrivals: int, lifetime: float = 1.0) -> Trace:
    """Each kind arriving as its own Poisson stream at ``rates[kind]`` per unit of time (together: one
    stream at the sum, kinds by share), lifetimes exponential with mean ``lifetime``; a quarter warm-up."""
    rng = random.Random(seed)
    total = sum(rates.values())
    order = list(range(nodes))
    now = 0.0
    out: list[Arrival] = []
    while len(out) < arrivals:
        now += rng.expovariate(total)
        shuffled = order[:]
        rng.shuffle(shuffled)
        out.append(Arrival(now, rng.expovariate(1.0 / lifetime), _pick(rates, rng), tuple(shuffled)))
    return Trace(tuple(out), warmup=arrivals // 4)


def fill_trace(mix: Mix, cluster: ClusterShape, seed: int, arrivals: int) -> Trace:
    """Claims one after the other and none leaves: placed until the first is rejected."""
    rng = random.Random(seed)
    nodes = list(range(len(cluster.nodes)))
    out = []
    for index in range(arrivals):
        order = nodes[:]
        rng.shuffle(order)
        out.append(Arrival(float(index), float("inf"), _pick(mix.weights, rng), tuple(order)))
    return Trace(tuple(out), departures=False)


def _geometric(rng: random.Random, mean: float) -> int:
    """At least 1, mean ``mean``."""
    p = 1.0 / mean
    count = 1
    while rng.random() > p:
        count += 1
    return count


@dataclass(frozen=True, slots=True)
class Workload:
    """A named benchmark workload: a mix on a cluster, Poisson or fill-until-first-reject."""

    name: str
    mix: Mix
    cluster: ClusterShape
    fill: bool = False
    lag: int = 0  # allocations before a re-publish becomes visible
    extra: Mapping[str, Any] = field(default_factory=dict)
    kinds: Mapping[str, ClaimShape] = field(default_factory=lambda: KINDS)

    def trace(self, seed: int, arrivals: int, load: float) -> Trace:
        if self.fill:
            return fill_trace(self.mix, self.cluster, seed, arrivals)
        return poisson_trace(self.mix, self.cluster, seed, arrivals, load, kinds=self.kinds)

    @property
    def pods(self) -> bool:
        """Whether the kinds are pods with compute and memory needs (the sharing comparison)."""
        return all(isinstance(kind, PodKind) for kind in self.kinds.values())

    @property
    def oracle_models_it(self) -> bool:
        """Whether the repacking oracle can model every kind: exclusive devices only, never shares."""
        return all(
            isinstance(kind, ClaimKind) or (isinstance(kind, PodKind) and kind.asked is Asked.EXCLUSIVE)
            for kind in self.kinds.values()
        )


def standard_workloads(lag: int = 0) -> list[Workload]:
    """Every mix on every cluster (re-publishes visible after ``lag`` allocations), the bursty mix with a lag
    of 8, and fill-until-first-reject of the uniform mix on each cluster."""
    workloads = [
        Workload(f"{mix}@{cluster}", MIXES[mix], CLUSTERS[cluster], lag=lag) for cluster in CLUSTERS for mix in MIXES
    ]
    # Bursts scheduled before the plugin's re-publish is seen: what the lag costs an occupancy-aware order.
    workloads.append(Workload("bursty-lag8@1x8-H100", MIXES["bursty"], CLUSTERS["1x8-H100"], lag=max(lag, 8)))
    workloads += [
        Workload(f"fill-{mix}@{cluster}", MIXES[mix], CLUSTERS[cluster], fill=True, lag=lag)
        for cluster in CLUSTERS
        for mix in ("uniform",)
    ]
    return workloads


SHARING_CLUSTER = "1x8-H100"


def sharing_workloads() -> list[Workload]:
    """The same inference pods asked for exclusively and as shares, filled on one node of 8 H100 until the
    first pod that does not fit: pods per H100 at full SM isolation (every pod its own compute instance).
    The "memory" pods as a share if one fits, else exclusive (a sixth of them fit no share's memory); the
    "small" pods as shares of any GPU instance and as shares of the whole GPU's."""
    ways = {
        "memory": (Asked.EXCLUSIVE, Asked.SHARED_OR_EXCLUSIVE),
        "small": (Asked.EXCLUSIVE, Asked.SHARED, Asked.SHARED_7G),
    }
    out = []
    for needs, asked_ways in ways.items():
        mix = Mix(f"pods-{needs}", POD_WEIGHTS[needs], description=_POD_MIX_TEXT[needs])
        for asked in asked_ways:
            out.append(
                Workload(
                    f"fill-pods-{needs}-{asked.value}@{SHARING_CLUSTER}",
                    mix,
                    replace(CLUSTERS[SHARING_CLUSTER], shared_devices=True),
                    fill=True,
                    kinds=pod_kinds(POD_NEEDS[needs], asked),
                )
            )
    return out


_POD_MIX_TEXT = {
    "memory": "inference pods of 1-2 compute slices, 6-18 GiB; 35 % need more memory per slice than a 1g.10gb",
    "small": "inference pods of 1-2 compute slices, 5-16 GiB; each fits the smallest GPU instance of its size",
}


def all_workloads(lag: int = 0) -> list[Workload]:
    """The standard workloads and the sharing comparison: every name ``--workload`` accepts."""
    return [*standard_workloads(lag), *sharing_workloads()]


def workload_named(name: str, workloads: Sequence[Workload]) -> Workload:
    for workload in workloads:
        if workload.name == name:
            return workload
    known = ", ".join(w.name for w in workloads)
    raise ValueError(f"unknown workload {name!r}; known: {known}")
