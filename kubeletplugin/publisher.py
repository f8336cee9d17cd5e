"""Keep the node's ResourceSlices in the API server equal to the computed pool.

:class:`SlicePublisher` owns the write side of the capability contract: it lists what the API holds
for (driver, node), renders the pool, and creates / updates / deletes slices until the API holds
exactly that -- and makes **no write at all** when nothing changed.  On any change it bumps
``pool.generation`` in every slice of the pool, as consumers use only the highest generation.

:class:`PublishLoop` republishes when the inventory changes: a periodic NVML rescan plus explicit
``trigger()`` calls.  Conflicts (409) and transient API errors are retried with capped exponential
backoff; the loop never destroys anything on a failed read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_driver.devicemodel.layout import render_slices
from dra_driver.devicemodel.policy import PlacementPolicy
from dra_driver.devicemodel.pool import NodePool
from dra_driver.errors import MigdraError
from dra_driver.kubeapi import RETRYABLE_STATUS, describe_failure, is_transport_failure

log = logging.getLogger(__name__)

_T = TypeVar("_T")


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
        max_attempts: int = 6,
        backoff_seconds: float = 0.2,
    ) -> None:
        self._api_client = api_client
        self._resource = client.ResourceV1Api(api_client)
        self._core = client.CoreV1Api(api_client)
        self.node_name = node_name
        self.driver_name = driver_name
        self._policy = policy
        self._max_attempts = max_attempts
        self._backoff = backoff_seconds
        self._node_owner: dict[str, Any] | None = None

    @property
    def server(self) -> str:
        """The API server's URL, for messages."""
        return str(self._api_client.configuration.host)

    def publish(self, pool: NodePool) -> PublishResult:
        """Make the API hold exactly ``pool``'s slices; retried on conflicts and transient errors."""
        if pool.driver_name != self.driver_name:
            raise ValueError(f"pool of driver {pool.driver_name!r} given to the publisher of {self.driver_name!r}")
        return self._with_retries("publish ResourceSlices", lambda: self._publish_once(pool))

    def delete_all(self) -> int:
        """Remove every slice of this node's pool (``--cleanup-on-exit``)."""

        def once() -> int:
            deleted = 0
            for item in self._existing():
                self._delete(item["metadata"]["name"])
                deleted += 1
            return deleted

        return self._with_retries("delete ResourceSlices", once)

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
                self._resource.replace_resource_slice(name, _slice_model(body))
                updated += 1
            else:
                self._resource.create_resource_slice(_slice_model(body))
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
            field_selector=f"spec.nodeName={self.node_name},spec.driver={self.driver_name}"
        )
        items = [_as_dict(self._api_client, item) for item in listed.items]
        return [i for i in items if i["spec"].get("pool", {}).get("name") == self.node_name]

    def _owner(self) -> dict[str, Any] | None:
        """An ownerReference to this node's Node object, so the slices go when the node goes."""
        if self._node_owner is None:
            try:
                node = self._core.read_node(self.node_name)
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

    def _delete(self, name: str) -> None:
        try:
            self._resource.delete_resource_slice(name)
        except ApiException as exc:
            if exc.status != 404:  # already gone is what we wanted
                raise

    def _with_retries(self, what: str, attempt: Callable[[], _T]) -> _T:
        delay = self._backoff
        for number in range(1, self._max_attempts + 1):
            try:
                return attempt()
            except Exception as exc:
                # Conflicts, throttling and server errors, or no answer at all (connection refused or
                # reset, a timeout: the API server may be restarting) are worth another attempt.
                retryable = (
                    exc.status in RETRYABLE_STATUS if isinstance(exc, ApiException) else is_transport_failure(exc)
                )
                if not retryable or number == self._max_attempts:
                    raise
                log.info(
                    "%s: %s, retrying in %.1fs (attempt %d)", what, describe_failure(exc, self.server), delay, number
                )
            time.sleep(delay)
            delay = min(delay * 2, 10.0)
        raise AssertionError("unreachable")


def _slice_model(body: dict[str, Any]) -> client.V1ResourceSlice:
    model = client.V1ResourceSlice.from_dict(body)
    if model is None:
        raise ValueError("empty ResourceSlice body")
    return model


def _as_dict(api_client: client.ApiClient, model: object) -> dict[str, Any]:
    """A client model as the API's JSON (camelCase keys, no nulls), for exact comparison."""
    return cast(dict[str, Any], api_client.sanitize_for_serialization(model))  # type: ignore[no-untyped-call]


class PublishLoop:
    """Republish periodically (an NVML rescan) and whenever :meth:`trigger` is called.

    ``compute_pool`` reads the hardware and builds the pool; it runs on the loop's thread, and
    ``on_round`` sees each pool and publish result (logs and metrics).  A failed
    round is logged and retried at the next tick; ``on_fatal`` is called (and the loop stops) if
    rounds keep failing for ``fatal_after`` consecutive attempts, so the process can exit loudly.
    """

    def __init__(
        self,
        publisher: SlicePublisher,
        compute_pool: Callable[[], NodePool],
        interval: float,
        on_fatal: Callable[[BaseException], None] | None = None,
        fatal_after: int = 10,
        on_round: Callable[[NodePool, PublishResult], None] | None = None,
    ) -> None:
        self._publisher = publisher
        self._compute_pool = compute_pool
        self._interval = interval
        self._on_fatal = on_fatal
        self._fatal_after = fatal_after
        self._on_round = on_round
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
        failures = 0
        while not self._stop.is_set():
            try:
                self.publish_now()
                failures = 0
            except Exception as exc:
                failures += 1
                if isinstance(exc, (ApiException, MigdraError)) or is_transport_failure(exc):
                    server = self._publisher.server
                    log.error(
                        "publishing ResourceSlices failed (%d in a row): %s", failures, describe_failure(exc, server)
                    )
                else:  # a bug: the traceback is what a maintainer needs
                    log.exception("publishing ResourceSlices failed (%d in a row)", failures)
                if failures >= self._fatal_after and self._on_fatal is not None:
                    self._on_fatal(exc)
                    return
            self._wake.wait(self._interval)
            self._wake.clear()
