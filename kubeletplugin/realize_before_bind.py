"""Realize before bind: create the MIG instances of claims allocated to this node before their pods are
bound, and say so through the devices' binding conditions (docs/prepare.md, "Realize before bind").

With the setting on, every published device carries ``bindingConditions: [<driver>/realized]`` and
``bindingFailureConditions: [<driver>/realization-failed]`` (:mod:`dra_driver.devicemodel.vocabulary`),
so kube-scheduler allocates, then waits in PreBind.  The :class:`Realizer` reads the node process's
ResourceClaim informer (list, then watch; 410 Gone lists again: :class:`~dra_driver.kube.informer.Informer`,
shared with the placement occupancy and the claim status reporter) and for every claim whose allocation
holds such devices of this driver in this node's pool and whose conditions are
not set yet:

1. runs the prepare service's own prepare path (:meth:`PrepareService.realize_ahead`: GI + CI at
   exactly the placement, CDI spec, checkpoint -- the record marked *realized ahead*);
2. sets, in the claim's ``status.devices[]`` entry of each of those devices, ``<driver>/realized`` =
   True -- or, when prepare failed, ``<driver>/realization-failed`` = True with the per-claim error,
   which sends the pod to another placement instead of leaving it stuck in ContainerCreating.  A
   server-side apply of the ``status`` subresource as the node's realizer field manager
   (:func:`dra_driver.claimstatus.realizer_field_manager`): its condition on each waiting device and
   nothing else, so no other writer's field is ever sent.

kubelet's NodePrepareResources then finds the record and creates nothing (and from then on owns the
unprepare).  A claim realized ahead that loses its allocation before kubelet prepared it -- the
binding failed or timed out, the pod went away -- is released: its instances destroyed (only what the
checkpoint says migdra created), its record dropped.  The decision is made on a complete list of the
claims (never before the first one) and confirmed by a fresh read of the claim under its lock; a
failed read releases nothing (fail closed).  The mark is in the checkpoint, so a restarted plugin
checks its records realized ahead against the claims it lists.

The ``compute_`` functions are pure (which claims need realizing, which records releasing), over
:class:`~kubeletplugin.prepare.claims.ResourceClaimView`, the node plugin's one model of a claim; the
:class:`Realizer` does the API reads and writes around them.  One thread (a
:class:`~dra_driver.kube.loop.ControlLoop`); the claims of one pass are realized in parallel on the
prepare service's worker pool.  This module imports no typed model of the Kubernetes client.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from dra_driver.claimstatus import (
    DeviceEntry,
    build_apply_body,
    realizer_field_manager,
    rfc3339,
)
from dra_driver.devicemodel.vocabulary import realize_before_bind_conditions
from dra_driver.kube.client import CLAIMS, Client
from dra_driver.kube.failures import describe_failure
from dra_driver.kube.informer import Informer
from dra_driver.kube.loop import ControlLoop
from dra_driver.kubelet.calls import ClaimRef, PrepareResult
from dra_driver.logs import log_context
from dra_driver.resourceclaim import ResourceClaimView, parse_claims
from kubeletplugin.metrics import RealizeMetrics
from kubeletplugin.prepare.claims import claim_ref
from kubeletplugin.prepare.records import ClaimRecord

log = logging.getLogger(__name__)

RESYNC_SECONDS = 10.0
"""A pass at least this often without a change: a failed condition write or release is retried."""
REASON_REALIZED = "MigInstanceRealized"
REASON_REALIZATION_FAILED = "RealizationFailed"
_MAX_MESSAGE = 1024


class AheadService(Protocol):
    """What the realizer needs of :class:`~kubeletplugin.prepare.service.PrepareService`."""

    def realize_ahead(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]: ...

    def realized_ahead(self) -> tuple[ClaimRecord, ...]: ...

    def release_realized_ahead(self, ref: ClaimRef, confirm: Callable[[ClaimRecord], bool]) -> bool: ...


# -- pure ------------------------------------------------------------------------------------------


def compute_claim_devices(claim: ResourceClaimView, driver_name: str, pool_name: str) -> frozenset[str]:
    """Names of the devices of this driver in this pool that one claim's allocation names, its
    ``adminAccess`` results included (a realized record covers them too); pure.  Not
    :func:`kubeletplugin.occupancy.compute_allocated_devices`, which is over many claims and leaves
    admin access out (it holds no hardware)."""
    return frozenset(result.device for result in claim.results_of(driver_name, pool_name))


DeviceKey = tuple[str, str | None]
"""(device name, shareID or None): what a ``status.devices`` entry is keyed by in one driver and pool."""


def compute_binding_devices(claim: ResourceClaimView, driver_name: str, pool_name: str) -> tuple[DeviceKey, ...]:
    """The claim's allocated devices of this driver in this pool that wait for ``<driver>/realized``
    (the allocation copied the binding conditions from the slice), in allocation order, each with
    its ``shareID`` (a share's entry carries it); pure."""
    realized = realize_before_bind_conditions(driver_name).conditions[0]
    keys: dict[DeviceKey, None] = {}
    for result in claim.results_of(driver_name, pool_name):
        if realized in result.binding_conditions:
            share = result.share_id if isinstance(result.share_id, str) and result.share_id else None
            keys[(result.device, share)] = None
    return tuple(keys)


def compute_unsettled_devices(claim: ResourceClaimView, driver_name: str, pool_name: str) -> tuple[DeviceKey, ...]:
    """Of :func:`compute_binding_devices`, those whose entry has neither condition True yet; pure."""
    binding = realize_before_bind_conditions(driver_name)
    unsettled = []
    for device, share_id in compute_binding_devices(claim, driver_name, pool_name):
        entry = claim.status_entry(driver_name, pool_name, device, share_id)
        settled = entry is not None and any(
            (condition := entry.condition(condition_type)) is not None and condition.status == "True"
            for condition_type in binding.conditions + binding.failure_conditions
        )
        if not settled:
            unsettled.append((device, share_id))
    return tuple(unsettled)


def compute_claims_to_realize(claims: Iterable[ResourceClaimView], driver_name: str, pool_name: str) -> list[ClaimRef]:
    """Claims allocated here whose devices wait for ``<driver>/realized`` and carry neither of the two
    conditions yet, in a stable order; pure."""
    wanted = [claim_ref(c) for c in claims if compute_unsettled_devices(c, driver_name, pool_name)]
    return sorted(wanted, key=lambda ref: (ref.namespace, ref.name, ref.uid))


def compute_still_allocated(
    record: ClaimRecord, claim: ResourceClaimView | None, driver_name: str, pool_name: str
) -> bool:
    """Whether ``claim`` (as read; None: gone) still holds exactly the devices ``record`` realized; pure.

    Not so when the claim is gone, was re-created (another UID), or its allocation of this driver in
    this pool names other devices or none (deallocated: the binding failed or timed out, its pod went).
    """
    if claim is None or claim.metadata.uid != record.claim_uid:
        return False
    recorded = frozenset(device.intent.device_name for device in record.devices)
    return compute_claim_devices(claim, driver_name, pool_name) == recorded


def compute_records_to_release(
    records: Iterable[ClaimRecord], claims: Iterable[ResourceClaimView], driver_name: str, pool_name: str
) -> list[ClaimRecord]:
    """Records realized ahead whose claim, in a *complete* listing, no longer holds their devices; pure."""
    by_uid = {claim.metadata.uid: claim for claim in claims}
    return [
        record
        for record in records
        if record.realized_ahead
        and not compute_still_allocated(record, by_uid.get(record.claim_uid), driver_name, pool_name)
    ]


def build_binding_condition(
    driver_name: str, ok: bool, message: str, generation: int | None, now: str
) -> dict[str, Any]:
    """``<driver>/realized`` = True, or ``<driver>/realization-failed`` = True with ``message``; pure."""
    binding = realize_before_bind_conditions(driver_name)
    condition: dict[str, Any] = {
        "type": binding.conditions[0] if ok else binding.failure_conditions[0],
        "status": "True",
        "reason": REASON_REALIZED if ok else REASON_REALIZATION_FAILED,
        "message": message[:_MAX_MESSAGE],
        "lastTransitionTime": now,
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return condition


# -- around it: the API and the prepare service -----------------------------------------------------


class Realizer(ControlLoop):
    """Realizes this node's claims before their pods are bound; see the module docstring.

    :meth:`start` runs it (after the prepare service started), :meth:`stop` joins it (before the
    service closes); ``claims`` is started and stopped by whoever made it.
    """

    def __init__(
        self,
        service: AheadService,
        client: Client,
        claims: Informer,
        driver_name: str,
        node_name: str,
        *,
        metrics: RealizeMetrics | None = None,
        resync: float = RESYNC_SECONDS,
    ) -> None:
        self._service = service
        self._client = client
        self.driver_name = driver_name
        self.pool_name = node_name  # one pool per node, named after it
        self._field_manager = realizer_field_manager(driver_name, node_name)
        self._metrics = metrics
        self.claims = claims
        self.passes = 0  # completed passes (tests wait on it)
        super().__init__("migdra-realizer", resync=resync, shared=(claims,))

    def sync(self) -> None:
        if not self.claims.wait_synced(0):
            return  # no complete list yet: nothing is decided on a partial view
        claims = parse_claims(self.claims.items())
        # Read after the listing: a record realized ahead is written only by this thread, after the
        # claim was in an earlier listing, so a record missing its claim here means the claim went.
        releasing = compute_records_to_release(self._service.realized_ahead(), claims, self.driver_name, self.pool_name)
        kept: set[str] = set()
        for record in releasing:
            with log_context(claim_uid=record.claim_uid, claim=record.label):
                released = self._release(record)
            if not released:
                kept.add(record.claim_uid)
        refs = [
            ref for ref in compute_claims_to_realize(claims, self.driver_name, self.pool_name) if ref.uid not in kept
        ]
        if refs:
            results = self._service.realize_ahead(refs)
            for ref in refs:
                with log_context(claim_uid=ref.uid, claim=f"{ref.namespace}/{ref.name}"):
                    self._settle(ref, results[ref.uid])
        self.passes += 1

    def _release(self, record: ClaimRecord) -> bool:
        """Release a record realized ahead whose claim lost its devices; False when it stays (for now)."""
        ref = ClaimRef(record.namespace, record.name, record.claim_uid)

        def confirm(current: ClaimRecord) -> bool:  # under the claim's lock; a failed read raises: nothing released
            raw = self._client.get(CLAIMS, ref.namespace, ref.name)
            claim = ResourceClaimView.model_validate(raw) if raw is not None else None
            return not compute_still_allocated(current, claim, self.driver_name, self.pool_name)

        try:
            released = self._service.release_realized_ahead(ref, confirm)
        except Exception as e:
            log.warning(
                "claim %s (UID %s) was realized ahead and lost its allocation; releasing it failed, trying again "
                "later: %s",
                record.label,
                record.claim_uid,
                describe_failure(e),
            )
            if self._metrics is not None:
                self._metrics.observe_release(ok=False)
            return False
        if released and self._metrics is not None:
            self._metrics.observe_release(ok=True)
        return released

    def _settle(self, ref: ClaimRef, result: PrepareResult) -> None:
        """Set the binding condition the realization earned on each of the claim's waiting devices."""
        ok = not result.error
        if self._metrics is not None:
            self._metrics.observe_realization(ok)
        if ok:
            names = ", ".join(d.device_name for d in result.devices)
            message = f"realized on node {self.pool_name} before binding: {names}"
            log.info("claim %s/%s (UID %s): %s", ref.namespace, ref.name, ref.uid, message)
        else:
            message = result.error
            log.warning(
                "claim %s/%s (UID %s): realization failed, the scheduler places it anew: %s",
                ref.namespace,
                ref.name,
                ref.uid,
                message,
            )
        realized = frozenset(d.device_name for d in result.devices) if ok else None
        try:
            self._write_condition(ref, realized, message)
        except Exception as e:  # the next pass tries again (a realized claim is found realized at once)
            log.warning(
                "claim %s/%s (UID %s): writing its binding condition failed: %s",
                ref.namespace,
                ref.name,
                ref.uid,
                describe_failure(e),
            )

    def _write_condition(self, ref: ClaimRef, realized: frozenset[str] | None, message: str) -> None:
        """One read, then a server-side apply of the realizer's binding condition on every device of the
        claim that waits for one (its whole part of the claim: it holds nothing else).

        ``realized``: the devices the realization created (None: it failed).  ``realized`` is written
        only while the allocation holds exactly those devices -- never for an allocation made since.
        """
        raw = self._client.get(CLAIMS, ref.namespace, ref.name)
        if raw is None:
            return
        claim = ResourceClaimView.model_validate(raw)
        if claim.metadata.uid != ref.uid:
            return
        ok = realized is not None
        if realized is not None and compute_claim_devices(claim, self.driver_name, self.pool_name) != realized:
            return
        # Only devices the allocation still waits on: a condition on a deallocated claim would outlive it.
        if not compute_unsettled_devices(claim, self.driver_name, self.pool_name):
            return
        generation = claim.metadata.generation
        condition = build_binding_condition(self.driver_name, ok, message, generation, rfc3339(dt.datetime.now(dt.UTC)))
        entries = [
            DeviceEntry(self.pool_name, device, (condition,), share_id=share_id)
            for device, share_id in compute_binding_devices(claim, self.driver_name, self.pool_name)
        ]
        body = build_apply_body(ref.namespace, ref.name, ref.uid, self.driver_name, entries)
        self.claims.assume(self._client.apply_status(CLAIMS, body, field_manager=self._field_manager))
