"""Keep the node's ResourceSlices in the API server equal to the computed pool.

:class:`SlicePublisher` owns the write side of the capability contract: it lists what the API holds
for (driver, node), renders the pool, and creates / updates / deletes slices until the API holds
exactly that -- and makes **no write at all** when nothing changed.  On any change it bumps
``pool.generation`` in every slice of the pool, as consumers use only the highest generation.  A
conflict (someone wrote in between) re-runs the whole list-render-write at once.

:class:`PublishLoop` republishes when the inventory changes: a periodic NVML rescan plus explicit
``trigger()`` calls.  What a failed round means comes from :func:`dra_driver.kubeapi.classify_failure`:

- the API server unreachable, throttling or failing (an outage): retried after a capped, jittered
  backoff (:class:`~dra_driver.kubeapi.BackoffPolicy`) **for as long as it takes** -- an outage must
  never stop the process, which also prepares and unprepares claims from its checkpoint;
- the GPU instances changed while NVML listed them (a GI destroyed mid-read): read again at once
  (:func:`read_settled_inventory`), and if they keep changing, at the next round -- one line, no
  traceback;
- the API server refusing the request (403, 422, ...), an NVML failure or a bug: the same backoff,
  and after ``fatal_after`` such rounds in a row ``on_fatal`` stops the process with one line.

The loop never destroys anything on a failed read: a round either publishes a whole pool or nothing.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_driver.devicemodel.layout import render_slices
from dra_driver.devicemodel.policy import PlacementPolicy
from dra_driver.devicemodel.pool import NodePool
from dra_driver.errors import MigdraError
from dra_driver.kubeapi import (
    DEFAULT_CONFLICT_RETRIES,
    ApiFailure,
    ApiRequestError,
    BackoffPolicy,
    call_with_retries,
    classify_failure,
    describe_failure,
    retry_conflicts,
)
from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.errors import NvmlError, NvmlInvalidArgument, NvmlNotFound
from dra_driver.nvml.inventory import read_inventory
from dra_driver.nvml.types import NodeInventory

log = logging.getLogger(__name__)

DEFAULT_REQUEST_TIMEOUT = 10.0
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


@dataclass(frozen=True, slots=True)
class PublishResult:
    """What one publish did: the API writes it made and the generation the pool is at now."""

    created: int = 0
    updated: int = 0
    deleted: int = 0
    generation: int = 0

    @property
    def writes(self) -> int:
        return self.created + self.updated + self.deleted


class SlicePublisher:
    """Publishes one node's pool of one driver."""

    def __init__(
        self,
        api_client: client.ApiClient,
        node_name: str,
        driver_name: str,
        policy: PlacementPolicy | None = None,
        *,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        conflict_retries: int = DEFAULT_CONFLICT_RETRIES,
    ) -> None:
        self._api_client = api_client
        self._resource = client.ResourceV1Api(api_client)
        self._core = client.CoreV1Api(api_client)
        self.node_name = node_name
        self.driver_name = driver_name
        self._policy = policy
        self._timeout = request_timeout
        self._conflict_retries = conflict_retries
        self._node_owner: dict[str, Any] | None = None

    @property
    def server(self) -> str:
        """The API server's URL, for messages."""
        return str(self._api_client.configuration.host)

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

        Raises :class:`~dra_driver.kubeapi.ApiRequestError` (one line) when it cannot.
        """

        def once() -> int:
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
        existing = {item["metadata"]["name"]: item for item in self._existing()}
        owner = self._owner()
        current_generation = max((int(i["spec"]["pool"]["generation"]) for i in existing.values()), default=0)
        desired = render_slices(pool, self.node_name, current_generation, owner, self._policy)
        if self._unchanged(desired, existing):
            return PublishResult(generation=current_generation)
        generation = current_generation + 1
        desired = render_slices(pool, self.node_name, generation, owner, self._policy)
        created = updated = 0
        for body in desired:  # new content first, so consumers see the new generation complete soonest
            name = body["metadata"]["name"]
            if name in existing:
                body["metadata"]["resourceVersion"] = existing[name]["metadata"]["resourceVersion"]
                self._replace(name, body)
                updated += 1
            else:  # 409 AlreadyExists if someone created it since the list: a conflict, listed again
                self._resource.create_resource_slice(_slice_model(body), _request_timeout=self._timeout)
                created += 1
        wanted = {body["metadata"]["name"] for body in desired}
        deleted = 0
        for name in sorted(set(existing) - wanted):
            self._delete(name)
            deleted += 1
        log.info(
            "published pool %s generation %d: %d created, %d updated, %d deleted",
            self.node_name,
            generation,
            created,
            updated,
            deleted,
        )
        return PublishResult(created, updated, deleted, generation)

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
            if current.get("spec") != body["spec"]:
                return False
            if current["metadata"].get("ownerReferences", []) != body["metadata"].get("ownerReferences", []):
                return False
        return True

    def _existing(self) -> list[dict[str, Any]]:
        listed = self._resource.list_resource_slice(
            field_selector=f"spec.nodeName={self.node_name},spec.driver={self.driver_name}",
            _request_timeout=self._timeout,
        )
        items = [_as_dict(self._api_client, item) for item in listed.items]
        return [i for i in items if i["spec"].get("pool", {}).get("name") == self.node_name]

    def _owner(self) -> dict[str, Any] | None:
        """An ownerReference to this node's Node object, so the slices go when the node goes."""
        if self._node_owner is None:
            try:
                node = self._core.read_node(self.node_name, _request_timeout=self._timeout)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                log.warning("Node %s not found: publishing its ResourceSlices without an owner", self.node_name)
                return None
            self._node_owner = {
                "apiVersion": "v1",
                "kind": "Node",
                "name": self.node_name,
                "uid": _as_dict(self._api_client, node)["metadata"]["uid"],
                "controller": True,
            }
        return self._node_owner

    def _replace(self, name: str, body: dict[str, Any]) -> None:
        try:
            self._resource.replace_resource_slice(name, _slice_model(body), _request_timeout=self._timeout)
        except ApiException as exc:
            if exc.status != 404:
                raise
            # Deleted since the list (by kubelet, an admin, the node's garbage collection): what we
            # read is out of date, exactly as with a 409 -- list again.
            raise ApiRequestError(
                f"ResourceSlice {name} was deleted while it was being updated", failure=ApiFailure.CONFLICT
            ) from exc

    def _delete(self, name: str) -> None:
        try:
            self._resource.delete_resource_slice(name, _request_timeout=self._timeout)
        except ApiException as exc:
            if exc.status != 404:  # already gone is what we wanted
                raise


def _slice_model(body: dict[str, Any]) -> client.V1ResourceSlice:
    model = client.V1ResourceSlice.from_dict(body)
    if model is None:
        raise ValueError("empty ResourceSlice body")
    return model


def _as_dict(api_client: client.ApiClient, model: object) -> dict[str, Any]:
    """A client model as the API's JSON (camelCase keys, no nulls), for exact comparison."""
    return cast(dict[str, Any], api_client.sanitize_for_serialization(model))  # type: ignore[no-untyped-call]


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
    """The kind of a failed round; API failures by :func:`dra_driver.kubeapi.classify_failure`."""
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


class PublishLoop:
    """Republish periodically (an NVML rescan) and whenever :meth:`trigger` is called.

    ``compute_pool`` reads the hardware and builds the pool; it runs on the loop's thread, and
    ``on_round`` sees each pool and publish result (logs and metrics).  A failed round is logged in
    one line and tried again -- pool recomputed -- after a capped, jittered backoff (``backoff``),
    triggers or not; see the module docstring for which failures may become fatal.  ``on_fatal`` is
    called (and the loop stops) after ``fatal_after`` rounds in a row that failed for a reason an
    outage does not explain, so the process can exit loudly.  ``on_failure(kind, exc, in_a_row)``
    sees every failed round.
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
        self._interval = interval
        self._on_fatal = on_fatal
        self._fatal_after = fatal_after
        self._on_round = on_round
        self._backoff = backoff or BackoffPolicy()
        self._on_failure = on_failure
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rounds = 0
        self.last_result: PublishResult | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="slice-publisher", daemon=True)
        self._thread.start()

    def trigger(self) -> None:
        """Republish now (e.g. after a MIG mode change or a prepare that created an instance)."""
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def publish_now(self) -> PublishResult:
        """One synchronous round on the caller's thread (start-up, tests)."""
        pool = self._compute_pool()
        self.last_result = self._publisher.publish(pool)
        self.rounds += 1
        if self._on_round is not None:
            self._on_round(pool, self.last_result)
        return self.last_result

    def _run(self) -> None:
        backoff = self._backoff.start()
        in_a_row = 0  # failed rounds of any kind since the last success
        counted = 0  # of them, those that count toward ``fatal_after``
        reported = 0  # of them, those an operator was warned about (not a read that came too early)
        while not self._stop.is_set():
            try:
                self.publish_now()
            except Exception as exc:
                in_a_row += 1
                kind = classify_round_failure(exc)
                counted += kind.counts_toward_fatal
                reported += kind is not RoundFailure.INVENTORY_CHANGED
                delay = backoff.next_delay(exc)
                self._log_failure(kind, exc, in_a_row, counted, delay)
                if self._on_failure is not None:
                    self._on_failure(kind, exc, in_a_row)
                if kind.counts_toward_fatal and counted >= self._fatal_after and self._on_fatal is not None:
                    self._on_fatal(exc)
                    return
                # A trigger does not cut a backoff short (the next round reads everything anew anyway).
                self._stop.wait(delay)
                self._wake.clear()
                continue
            if reported:
                log.warning("publishing ResourceSlices works again after %d failed round(s)", in_a_row)
            in_a_row = counted = reported = 0
            backoff.reset()
            self._wake.wait(self._interval)
            self._wake.clear()

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
