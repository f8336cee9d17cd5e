"""Keep the node's ResourceSlices in the API server equal to the computed pool.

:class:`SlicePublisher` owns the write side of the capability contract: it lists what the API holds
for (driver, node), renders the pool, and creates / updates / deletes slices until the API holds
exactly that -- and makes **no write at all** when nothing changed.  On any change it bumps
``pool.generation`` in every slice of the pool, as consumers use only the highest generation.  A
conflict (someone wrote in between) re-runs the whole list-render-write at once.

:class:`PublishLoop` republishes when the inventory changes: a periodic NVML rescan plus explicit
``trigger()`` calls -- a :class:`~dra_driver.kube.loop.ControlLoop` without informers (it knows what is
allocated only through ``allocated``).  What a failed round means comes from
:func:`dra_driver.kube.failures.classify_failure`:

- the API server unreachable, throttling or failing (an outage): retried after a capped, jittered
  backoff (:class:`~dra_driver.kube.failures.BackoffPolicy`) **for as long as it takes** -- an outage must
  never stop the process, which also prepares and unprepares claims from its checkpoint;
- the GPU instances changed while NVML listed them (a GI destroyed mid-read): read again at once
  (:func:`read_settled_inventory`), and if they keep changing, at the next round -- one line, no
  traceback;
- the API server refusing the request (403, 422, ...), an NVML failure or a bug: the same backoff,
  and after ``fatal_after`` such rounds in a row ``on_fatal`` stops the process with one line.

The loop never destroys anything on a failed read: a round either publishes a whole pool or nothing.

An unchanged rescan is cheap, because a node plugin rescans for as long as it lives and almost every
rescan changes nothing: :class:`InventoryReader` asks NVML again only for what can change (each GPU's
MIG mode and GPU instances; the profiles come from :meth:`Nvml.gpu_instance_profiles`' per-mode cache),
and :class:`SlicePublisher` talks to the API through the process's one JSON client
(:class:`~dra_driver.kube.client.Client`; no client models: building them for an 8-GPU pool cost
~100 ms of CPU per LIST, and importing the client's API classes seconds of start-up) and, when the
pool and every slice's ``resourceVersion`` are what it last wrote or checked, does not even render the
slices: one LIST, no write.

The slices' grouping and order come from the placement policy, which may look at the pool's occupancy
(the devices allocated claims hold): ``allocated``, a callable the publisher asks once per round
(:class:`kubeletplugin.occupancy.ClaimOccupancy` in the plugin; :mod:`kubeletplugin.publishing` wires
the two, this module knows no informer).  An occupancy that changes the order is a change like any
other: a new generation, new content first, deletions last, so a consumer sees the old pool
complete, then the new pool incomplete (skipped), then the new pool complete -- never one device in
two slices of one generation.  An occupancy change that leaves the slices as they are makes no write.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from dra_driver.devicemodel.layout import render_slices
from dra_driver.devicemodel.policy import PlacementPolicy
from dra_driver.devicemodel.pool import NodePool
from dra_driver.errors import MigdraError
from dra_driver.host.pci import normalise_pci_bus_id, pcie_root
from dra_driver.kube.client import NODES, SLICES, Client
from dra_driver.kube.failures import (
    DEFAULT_CONFLICT_RETRIES,
    ApiFailure,
    ApiRequestError,
    Backoff,
    BackoffPolicy,
    call_with_retries,
    classify_failure,
    describe_failure,
    retry_conflicts,
)
from dra_driver.kube.loop import ControlLoop
from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.errors import NvmlError, NvmlInvalidArgument, NvmlNotFound
from dra_driver.nvml.inventory import read_inventory
from dra_driver.nvml.types import GpuInfo, GpuInventory, NodeInventory
from dra_driver.quantity import Quantity, QuantityError

log = logging.getLogger(__name__)

# NVML operations that read the GPU's instances: a GI or CI destroyed between the listing and the read
# of its info makes them fail with INVALID_ARGUMENT (a stale handle) or NOT_FOUND.
_INSTANCE_READS = ("nvmlDeviceGetGpuInstances", "nvmlGpuInstance", "nvmlComputeInstance")
INVENTORY_REREADS = 3


class InventoryChangedError(MigdraError):
    """The GPU instances changed under every read of a round (instances created and destroyed meanwhile).

    Retryable: nothing is wrong, the round is skipped and the next one reads again.
    """

    retryable = True


def is_instance_read_race(exc: BaseException) -> bool:
    """An NVML failure that a GPU or compute instance destroyed during the read explains."""
    return isinstance(exc, (NvmlInvalidArgument, NvmlNotFound)) and exc.operation.startswith(_INSTANCE_READS)


def read_settled_inventory(
    nvml: Nvml, read: Callable[[Nvml], NodeInventory] = read_inventory, rereads: int = INVENTORY_REREADS
) -> NodeInventory:
    """The node's inventory, read again (at once, up to ``rereads`` times) while instances change under it.

    Why: the publisher reads without the GPU locks (a prepare must not wait for a rescan, nor a rescan
    for a slow creation), so an unprepare in this or the other plugin process may destroy a GI while
    NVML lists the GPU's instances; NVML then fails the read of that GI.  That is not an error, only a
    read that came too early: raise :class:`InventoryChangedError` if it keeps happening.
    """
    for number in range(1, rereads + 2):
        try:
            return read(nvml)
        except NvmlError as exc:
            if not is_instance_read_race(exc):
                raise
            if number > rereads:
                raise InventoryChangedError(f"the GPU instances changed during each of {number} reads: {exc}") from exc
            log.debug("GPU instances changed while they were read (%s); reading again", exc)
    raise AssertionError("unreachable")


class InventoryReader:
    """The node's inventory for the publisher's rescans, asking NVML again only for what can change.

    Why: the publisher rescans every ``rescan_interval`` for as long as the plugin lives, and almost
    every rescan finds nothing new; a full read lists every GPU's identity again (~10 NVML calls per
    GPU, ~0.5 ms each on real hardware) and walks sysfs for its PCIe root.  What cannot change is kept:

    - the GPUs, their identities and PCIe roots, and the driver's versions are fixed for an NVML session
      (a GPU appears or disappears only with a driver reload, which ends the plugin's session), so they
      are listed at the first read and kept -- until a GPU's MIG mode changes: that may reset or re-bind
      the GPU and change its minor number, so then every GPU is listed again;
    - each GPU's MIG mode can change at any moment (an administrator) and its GPU instances with every
      prepare and unprepare: both are asked for on every read.  The profiles and placements come from
      :meth:`Nvml.gpu_instance_profiles`, which keeps them per GPU for as long as its MIG mode stays.

    A failed read forgets the listing, so the read after it lists the GPUs again.  One reader per NVML
    session; not thread-safe (the publish loop's thread alone reads).  Reads NVML, changes nothing.
    """

    def __init__(self, sysfs: Path = Path("/sys")) -> None:
        self._sysfs = sysfs
        self._nvml: Nvml | None = None
        self._gpus: tuple[GpuInfo, ...] = ()
        self._versions = ("", "")

    def read(self, nvml: Nvml) -> NodeInventory:
        """The inventory as :func:`~dra_driver.nvml.inventory.read_inventory` reads it (equal values)."""
        try:
            return self._read(nvml)
        except BaseException:
            self._nvml = None  # list again next time: whatever failed may have been the GPU set
            raise

    def _read(self, nvml: Nvml) -> NodeInventory:
        if self._nvml is not nvml or self._mig_mode_changed(nvml):
            self._gpus = tuple(
                dataclasses.replace(gpu, pcie_root=pcie_root(normalise_pci_bus_id(gpu.pci_bus_id), self._sysfs))
                for gpu in nvml.list_gpus()
            )
            self._versions = (nvml.driver_version(), nvml.cuda_driver_version())
            self._nvml = nvml
        gpus = []
        for gpu in self._gpus:
            profiles = tuple(nvml.gpu_instance_profiles(gpu.uuid)) if gpu.mig_capable else ()
            instances = tuple(nvml.gpu_instances(gpu.uuid)) if gpu.mig_enabled else ()
            gpus.append(GpuInventory(gpu=gpu, profiles=profiles, gpu_instances=instances))
        return NodeInventory(driver_version=self._versions[0], cuda_driver_version=self._versions[1], gpus=tuple(gpus))

    def _mig_mode_changed(self, nvml: Nvml) -> bool:
        """Whether a GPU's MIG mode is no longer the listed one: then every GPU is listed again, since
        changing the mode may reset or re-bind a GPU and change its minor number (docs/nvml-mig.md, "MIG mode,
        resets and privileges").
        A GPU without MIG support never gains it."""
        return any(nvml.mig_mode(gpu.uuid) != gpu.mig_mode for gpu in self._gpus if gpu.mig_capable)


@dataclass(frozen=True, slots=True)
class PublishResult:
    """What one publish did: the API writes it made and the generation the pool is at now."""

    created: int = 0
    updated: int = 0
    deleted: int = 0
    generation: int = 0
    # Only the occupancy changed since the API last held exactly the pool (same pool, same slices): a
    # re-publish for claims that came or went, whether it wrote (the order changed) or not.
    occupancy_only: bool = False

    @property
    def writes(self) -> int:
        return self.created + self.updated + self.deleted


@dataclass(frozen=True, slots=True)
class _Settled:
    """What the API held the last time it held exactly the pool, rendered for ``allocated``: every
    slice's (name, resourceVersion)."""

    pool: NodePool
    owner: dict[str, Any] | None
    versions: frozenset[tuple[str, str]]
    allocated: frozenset[str]


class SlicePublisher:
    """Publishes one node's pool of one driver, as JSON through ``client``.

    Why JSON: the client's models cost ~100 ms of CPU to build from one LIST of an 8-GPU pool and
    back, on every rescan, and importing the API classes (``CoreV1Api`` alone imports every core model)
    seconds of the plugin's start-up; the publisher needs neither, only the JSON it compares and writes.

    ``allocated``: the names of the pool's devices that allocated claims hold, asked once per publish
    (None: nothing is allocated, as far as the policy is told); it must not block.
    """

    def __init__(
        self,
        client: Client,
        node_name: str,
        driver_name: str,
        policy: PlacementPolicy | None = None,
        *,
        allocated: Callable[[], frozenset[str]] | None = None,
        conflict_retries: int = DEFAULT_CONFLICT_RETRIES,
    ) -> None:
        self._client = client
        self.node_name = node_name
        self.driver_name = driver_name
        self._policy = policy
        self._allocated = allocated
        self._conflict_retries = conflict_retries
        self._node_owner: dict[str, Any] | None = None
        self._settled: _Settled | None = None

    @property
    def server(self) -> str:
        """The API server's URL, for messages."""
        return self._client.server

    def publish(self, pool: NodePool) -> PublishResult:
        """Make the API hold exactly ``pool``'s slices.

        A conflict re-reads and writes again at once (bounded); any other failure is raised for the
        caller's backoff -- :class:`PublishLoop` recomputes the pool before the next attempt, so a
        retry never writes an inventory that has gone stale during an outage.
        """
        if pool.driver_name != self.driver_name:
            raise ValueError(f"pool of driver {pool.driver_name!r} given to the publisher of {self.driver_name!r}")
        return retry_conflicts(
            lambda: self._publish_once(pool), what="publishing ResourceSlices", limit=self._conflict_retries
        )

    def delete_all(self, backoff: BackoffPolicy | None = None, attempts: int = 3) -> int:
        """Remove every slice of this node's pool (``--cleanup-on-exit``), trying at most ``attempts``
        times: the process is exiting, and kubelet removes a gone plugin's slices anyway.

        Raises :class:`~dra_driver.kube.failures.ApiRequestError` (one line) when it cannot.
        """

        def once() -> int:
            self._settled = None
            deleted = 0
            for item in self._existing():
                self._delete(item["metadata"]["name"])
                deleted += 1
            return deleted

        return call_with_retries(
            once,
            what="deleting ResourceSlices",
            backoff=(backoff or BackoffPolicy()).start(),
            attempts=attempts,
            server=self.server,
        )

    # -- one attempt -----------------------------------------------------------------------------

    def _publish_once(self, pool: NodePool) -> PublishResult:
        allocated = self._allocated() if self._allocated is not None else frozenset()
        existing = {item["metadata"]["name"]: item for item in self._existing()}
        owner = self._owner()
        current_generation = max((int(i["spec"]["pool"]["generation"]) for i in existing.values()), default=0)
        versions = _versions(existing.values())
        settled = self._settled
        # The same pool, owner and occupancy, and every slice as it was when the API last held exactly
        # them (a resourceVersion changes with every write): nothing to render, compare or write.
        same = settled is not None and settled.versions == versions and settled.owner == owner and settled.pool == pool
        if same and settled is not None and settled.allocated == allocated:
            return PublishResult(generation=current_generation)
        desired = render_slices(pool, self.node_name, current_generation, owner, self._policy, allocated)
        if self._unchanged(desired, existing):  # e.g. an occupancy that leaves the order as it is
            self._settled = _Settled(pool, owner, versions, allocated)
            return PublishResult(generation=current_generation, occupancy_only=same)
        self._settled = None  # until every write below has landed
        generation = current_generation + 1
        desired = render_slices(pool, self.node_name, generation, owner, self._policy, allocated)
        written: list[dict[str, Any]] = []
        created = updated = 0
        for body in desired:  # new content first, so consumers see the new generation complete soonest
            name = body["metadata"]["name"]
            if name in existing:
                body["metadata"]["resourceVersion"] = existing[name]["metadata"]["resourceVersion"]
                written.append(self._replace(name, body))
                updated += 1
            else:  # 409 AlreadyExists if someone created it since the list: a conflict, listed again
                written.append(self._client.create(SLICES, body))
                created += 1
        wanted = {body["metadata"]["name"] for body in desired}
        deleted = 0
        for name in sorted(set(existing) - wanted):
            self._delete(name)
            deleted += 1
        self._settled = _Settled(pool, owner, _versions(written), allocated)
        log.info(
            "published pool %s generation %d%s: %d created, %d updated, %d deleted",
            self.node_name,
            generation,
            " (placement order for the claims allocated here)" if same else "",
            created,
            updated,
            deleted,
        )
        return PublishResult(created, updated, deleted, generation, occupancy_only=same)

    @staticmethod
    def _unchanged(desired: list[dict[str, Any]], existing: Mapping[str, dict[str, Any]]) -> bool:
        """True when the API already holds exactly ``desired`` (rendered at the existing generation)."""
        if {d["metadata"]["name"] for d in desired} != set(existing):
            return False
        generations = {int(item["spec"]["pool"]["generation"]) for item in existing.values()}
        if len(generations) != 1:
            return False
        for body in desired:
            current = existing[body["metadata"]["name"]]
            if _by_value(current.get("spec")) != _by_value(body["spec"]):
                return False
            if current["metadata"].get("ownerReferences", []) != body["metadata"].get("ownerReferences", []):
                return False
        return True

    def _existing(self) -> list[dict[str, Any]]:
        """This pool's slices as the API holds them: one LIST, JSON dicts."""
        items, _ = self._client.list(
            SLICES, field_selector=f"spec.nodeName={self.node_name},spec.driver={self.driver_name}"
        )
        return [i for i in items if (i.get("spec") or {}).get("pool", {}).get("name") == self.node_name]

    def _owner(self) -> dict[str, Any] | None:
        """An ownerReference to this node's Node object, so the slices go when the node goes."""
        if self._node_owner is None:
            node = self._client.get(NODES, None, self.node_name)
            if node is None:
                log.warning("Node %s not found: publishing its ResourceSlices without an owner", self.node_name)
                return None
            self._node_owner = {
                "apiVersion": "v1",
                "kind": "Node",
                "name": self.node_name,
                "uid": node["metadata"]["uid"],
                "controller": True,
            }
        return self._node_owner

    def _replace(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return self._client.update(SLICES, body)
        except ApiException as exc:
            if exc.status != 404:
                raise
            # Deleted since the list (by kubelet, an admin, the node's garbage collection): what we
            # read is out of date, exactly as with a 409 -- list again.
            raise ApiRequestError(
                f"ResourceSlice {name} was deleted while it was being updated", failure=ApiFailure.CONFLICT
            ) from exc

    def _delete(self, name: str) -> None:
        self._client.delete(SLICES, None, name)  # already gone (False) is what we wanted


def _versions(items: Iterable[Mapping[str, Any]]) -> frozenset[tuple[str, str]]:
    """(name, resourceVersion) of every slice: what changes whenever anyone writes one."""
    return frozenset((item["metadata"]["name"], str(item["metadata"].get("resourceVersion", ""))) for item in items)


class RoundFailure(enum.Enum):
    """What a failed publish round was, for the loop's decision, its log line and ``on_failure``."""

    API_UNAVAILABLE = "api-unavailable"  # transient or conflicting: an outage, throttling; never fatal
    INVENTORY_CHANGED = "inventory-changed"  # instances changed under every read: read again, never fatal
    REFUSED = "refused"  # the API refused the request (403, 422, ...): fatal after ``fatal_after``
    NVML = "nvml"  # reading the hardware failed: fatal after ``fatal_after``
    BUG = "bug"  # anything else: logged with its traceback, fatal after ``fatal_after``

    @property
    def counts_toward_fatal(self) -> bool:
        return self in (RoundFailure.REFUSED, RoundFailure.NVML, RoundFailure.BUG)


def classify_round_failure(exc: BaseException) -> RoundFailure:
    """The kind of a failed round; API failures by :func:`dra_driver.kube.failures.classify_failure`."""
    failure = classify_failure(exc)
    if failure is ApiFailure.PERMANENT:
        return RoundFailure.REFUSED
    if failure is not None:
        return RoundFailure.API_UNAVAILABLE
    if isinstance(exc, InventoryChangedError):
        return RoundFailure.INVENTORY_CHANGED
    if isinstance(exc, MigdraError):
        return RoundFailure.NVML
    return RoundFailure.BUG


class PublishLoop(ControlLoop):
    """Republish periodically (an NVML rescan) and whenever :meth:`trigger` is called.

    ``compute_pool`` reads the hardware and builds the pool; it runs on the loop's thread, and
    ``on_round`` sees each pool and publish result (logs and metrics).  A failed round is logged in
    one line and tried again -- pool recomputed -- after a capped, jittered backoff (``backoff``),
    triggers or not; see the module docstring for which failures may become fatal.  ``on_fatal`` is
    called (and the loop stops) after ``fatal_after`` rounds in a row that failed for a reason an
    outage does not explain, so the process can exit loudly.  ``on_failure(kind, exc, in_a_row)``
    sees every failed round.  A :class:`~dra_driver.kube.loop.ControlLoop` with no informer: each
    pass is one round, due at once after a trigger, ``interval`` after a good round, the backoff's
    delay after a failed one.
    """

    def __init__(
        self,
        publisher: SlicePublisher,
        compute_pool: Callable[[], NodePool],
        interval: float,
        on_fatal: Callable[[BaseException], None] | None = None,
        fatal_after: int = 10,
        on_round: Callable[[NodePool, PublishResult], None] | None = None,
        backoff: BackoffPolicy | None = None,
        on_failure: Callable[[RoundFailure, BaseException, int], None] | None = None,
    ) -> None:
        self._publisher = publisher
        self._compute_pool = compute_pool
        self._on_fatal = on_fatal
        self._fatal_after = fatal_after
        self._on_round = on_round
        self._backoff: Backoff = (backoff or BackoffPolicy()).start()
        self._on_failure = on_failure
        self._not_before = 0.0  # a failed round's backoff: a trigger does not cut it short
        self._in_a_row = 0  # failed rounds of any kind since the last success
        self._counted = 0  # of them, those that count toward ``fatal_after``
        self._reported = 0  # of them, those an operator was warned about (not a read that came too early)
        self.rounds = 0
        self.last_result: PublishResult | None = None
        super().__init__("slice-publisher", resync=interval)

    def publish_now(self) -> PublishResult:
        """One synchronous round on the caller's thread (start-up, tests)."""
        pool = self._compute_pool()
        self.last_result = self._publisher.publish(pool)
        self.rounds += 1
        if self._on_round is not None:
            self._on_round(pool, self.last_result)
        return self.last_result

    def next_wake(self) -> float:
        if self._not_before:  # a failed round's retry is due then -- or now, if its backoff has passed
            return max(0.0, self._not_before - time.monotonic())
        return self.resync

    def sync(self) -> None:
        if time.monotonic() < self._not_before:
            return  # the next round reads everything anew anyway: the backoff stands
        try:
            self.publish_now()
        except Exception as exc:
            self._in_a_row += 1
            kind = classify_round_failure(exc)
            self._counted += kind.counts_toward_fatal
            self._reported += kind is not RoundFailure.INVENTORY_CHANGED
            delay = self._backoff.next_delay(exc)
            self._log_failure(kind, exc, self._in_a_row, self._counted, delay)
            if self._on_failure is not None:
                self._on_failure(kind, exc, self._in_a_row)
            if kind.counts_toward_fatal and self._counted >= self._fatal_after and self._on_fatal is not None:
                self._on_fatal(exc)
                self.finish()
                return
            self._not_before = time.monotonic() + delay
            return
        if self._reported:
            log.warning("publishing ResourceSlices works again after %d failed round(s)", self._in_a_row)
        self._in_a_row = self._counted = self._reported = 0
        self._not_before = 0.0
        self._backoff.reset()

    def _log_failure(self, kind: RoundFailure, exc: BaseException, in_a_row: int, counted: int, delay: float) -> None:
        server = self._publisher.server
        if kind is RoundFailure.INVENTORY_CHANGED:
            log.info("%s; reading them again in %.1f s", exc, delay)
        elif kind is RoundFailure.API_UNAVAILABLE:
            log.warning(
                "publishing ResourceSlices failed (%d in a row): %s; retrying in %.1f s",
                in_a_row,
                describe_failure(exc, server),
                delay,
            )
        elif kind is RoundFailure.BUG:  # the traceback is what a maintainer needs
            log.exception(
                "publishing ResourceSlices failed (%d in a row, %d of %d before the plugin stops)",
                in_a_row,
                counted,
                self._fatal_after,
            )
        else:
            log.error(
                "publishing ResourceSlices failed (%d in a row, %d of %d before the plugin stops): %s; "
                "retrying in %.1f s",
                in_a_row,
                counted,
                self._fatal_after,
                describe_failure(exc, server),
                delay,
            )


def _by_value(node: Any) -> Any:
    """``node`` with every quantity (a ``value`` of capacities and counters) as its number.

    Why: kube-apiserver stores a Quantity in its canonical spelling (``25165824000`` comes back as
    ``25165824k``), so the spec it returns differs in text from the one rendered, though not in value;
    compared as text, every unchanged pool would be written again as a new generation.
    """
    if isinstance(node, dict):
        return {
            key: _quantity_or_text(value) if key == "value" and isinstance(value, str) else _by_value(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_by_value(item) for item in node]
    return node


def _quantity_or_text(text: str) -> Quantity | str:
    try:
        return Quantity.parse(text)
    except QuantityError:
        return text
