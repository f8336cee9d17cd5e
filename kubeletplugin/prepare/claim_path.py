"""The path of one claim: its prepare top to bottom, its unprepare, the release of a claim realized
ahead -- everything between the claim's lock and its devices' kinds.

    hold the claim's lock
    checkpoint says PrepareCompleted?  → NVML still shows its instances?  return its devices (no
                                         API call, nothing created: kubelet retries); else roll back
                                         what is still migdra's (identity-checked) and prepare again
    checkpoint says PrepareStarted?    → roll that attempt back first
    read the claim (UID checked) → this driver's results in this node's pool
    → the plan: opaque configs, device names resolved against NVML, placements free (plan.py)
    → checkpoint PrepareStarted (the intents)
    → per device, under its GPU's lock, its kind's create (kinds/): each step recorded before the NVML
      call it announces, then its result
    → CDI spec and device metadata → checkpoint PrepareCompleted → status.devices + Event (background)
    a failure: what this call created undone, what cannot be stays recorded (release.py)

Unprepare releases what the record names (release.py: last device first, each kind's release, every
step recorded), drops the record, deletes the claim's files and clears its status.  The service
(:mod:`~kubeletplugin.prepare.service`) runs these for each claim of a call and maps their exceptions to
the claim's error (:mod:`~kubeletplugin.prepare.calls`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from dra_driver.kube.client import Client
from dra_driver.kubelet.calls import ClaimRef, PreparedDevice, PrepareResult, UnprepareResult
from dra_driver.logs import log_context
from kubeletplugin.prepare.cdi import compute_cdi_device_id, read_cdi_spec_device_names
from kubeletplugin.prepare.claim_files import ClaimFiles
from kubeletplugin.prepare.claims import claim_namespaced_name, compute_claim_allocation, read_claim
from kubeletplugin.prepare.devices import NodeGpus
from kubeletplugin.prepare.errors import RealizeError
from kubeletplugin.prepare.kinds import DeviceStep, InstanceLeftError, PrepareContext, kind_of
from kubeletplugin.prepare.locks import KeyedLocks
from kubeletplugin.prepare.plan import check_placements_free, plan_claim
from kubeletplugin.prepare.records import ClaimRecord, ClaimState, DeviceRecord
from kubeletplugin.prepare.release import release_record, undo_prepare
from kubeletplugin.prepare.reporter import ClaimReporter
from kubeletplugin.prepare.verification import read_verification_problems
from kubeletplugin.settings import CrashPoint

log = logging.getLogger(__name__)


class ClaimPath:
    """Prepares and unprepares one claim at a time (module docstring); thread-safe through the claim's
    lock.  ``running()`` counts a call the service must wait for when it closes."""

    def __init__(
        self,
        *,
        context: PrepareContext,
        client: Client,
        gpus: NodeGpus,
        files: ClaimFiles,
        reporter: ClaimReporter,
        claim_locks: KeyedLocks,
        driver_name: str,
        pool_name: str,
        running: Callable[[], AbstractContextManager[None]],
    ) -> None:
        self._context = context
        self._client = client
        self._gpus = gpus
        self._files = files
        self._reporter = reporter
        self._claim_locks = claim_locks
        self.driver_name = driver_name
        self.pool_name = pool_name
        self._running = running

    def prepare(self, ref: ClaimRef, *, ahead: bool = False) -> PrepareResult:
        """``ahead``: the realizer's call (record realized ahead); otherwise kubelet's, which claims a
        record realized ahead (from then on kubelet owns its unprepare)."""
        context = self._context
        store = context.store
        with self._claim_locks.hold(ref.uid):
            record = store.get(ref.uid)
            if record is not None and record.state is ClaimState.PREPARE_COMPLETED:
                if self._still_realized(ref, record):
                    self._files.ensure(record)
                    if record.realized_ahead and not ahead:
                        record = record.claimed_by_kubelet()
                        store.put(record)  # before kubelet gets the devices: no teardown after this
                        log.info("claim %s (UID %s): kubelet claimed what was realized ahead", record.label, ref.uid)
                    return self._result_of(record)
                record = None  # rolled back: prepare again, from the claim
            if record is not None:
                log.warning("claim %s (UID %s): rolling back an unfinished prepare first", record.label, ref.uid)
                self._release(record)

            claim = read_claim(self._client, ref)
            allocation = compute_claim_allocation(claim, ref, self.driver_name, self.pool_name)
            plan = plan_claim(self._gpus, allocation, self.driver_name)
            if not plan.intents:
                log.info(
                    "claim %s (UID %s) has no device of %s (allocated by %s only): nothing to prepare",
                    claim_namespaced_name(ref),
                    ref.uid,
                    self.driver_name,
                    ", ".join(allocation.other_drivers) or "no driver",
                )
                return PrepareResult()
            check_placements_free(context, ref.uid, plan.intents)

            started = ClaimRecord(
                claim_uid=ref.uid,
                namespace=ref.namespace,
                name=ref.name,
                pod_claim_name=claim.metadata.pod_claim_name,
                state=ClaimState.PREPARE_STARTED,
                devices=tuple(DeviceRecord(intent=intent) for intent in plan.intents),
                realized_ahead=ahead,
            )
            store.begin(started)
            context.crash(CrashPoint.AFTER_CHECKPOINT_STARTED)
            devices: list[DeviceRecord] = []  # as far as this call got: undone if it fails
            try:
                for index, device in enumerate(started.devices):
                    kind = kind_of(device.intent)
                    target = plan.targets[device.intent.device_name]
                    gpu = device.intent.gpu_uuid  # the GPU's lock for a kind that creates instances on it
                    with (
                        log_context(gpu_uuid=gpu),
                        context.gpu_locks.hold(gpu) if kind.creates_instances else nullcontext(),
                    ):
                        devices.append(kind.create(DeviceStep(context, ref.uid, index), device, target))
                completed = started.completed(
                    tuple(
                        d.with_cdi_device_ids((compute_cdi_device_id(self.driver_name, ref.uid, d.intent.device_name),))
                        for d in devices
                    )
                )
                self._files.write(completed)
                context.crash(CrashPoint.AFTER_CDI)
                store.put(completed)
                context.crash(CrashPoint.AFTER_CHECKPOINT_COMPLETED)
            except InstanceLeftError as e:
                undo_prepare(context, started, [*devices, e.device], self._files.delete)
                raise
            except BaseException:
                undo_prepare(context, started, devices, self._files.delete)
                raise
            self._reporter.report_prepared(ref, completed, allocation.generation)
            log.info("prepared claim %s (UID %s): %s", completed.label, ref.uid, ", ".join(completed.device_names))
            return self._result_of(completed)

    def _still_realized(self, ref: ClaimRef, record: ClaimRecord) -> bool:
        """Whether NVML still shows the instances of a completed ``record``; if not, roll it back.

        An operator may have destroyed migdra's instance and created another in its place since
        (NVML may even give it the same GI ID).  Returning the recorded devices would hand the pod a
        MIG UUID that no longer exists, so the record is released -- identity-checked: only an
        instance that still is migdra's is destroyed -- and the claim is prepared again, which fails
        cleanly while someone else's instance holds the placement.
        """
        problems = read_verification_problems(self._context.nvml, self._context.gpu_locks, record)
        if problems is None:
            raise RealizeError("its GPUs could not be read to check its prepared instances; kubelet retries")
        if not problems:
            return True
        log.error(
            "claim %s (UID %s): its prepared instances do not match NVML any more (%s); rolling back what is still "
            "migdra's and preparing it again",
            record.label,
            record.claim_uid,
            "; ".join(problems),
        )
        self._release(record)
        self._files.delete(record.claim_uid)
        self._reporter.report_cleared(ref, record)
        return False

    def unprepare(self, ref: ClaimRef) -> UnprepareResult:
        store = self._context.store
        with self._claim_locks.hold(ref.uid):
            record = store.get(ref.uid)
            if record is None:
                # A spec without a record is what an unprepare leaves that released the instances and
                # dropped the record, then could not delete the spec (a read-only CDI directory): this
                # retry finishes it, so it reports as that unprepare would have -- the claim's status
                # cleared (it still says Ready with the destroyed MIG UUID) and MigDevicesUnprepared.
                devices = read_cdi_spec_device_names(self._files.cdi_dir, self.driver_name, ref.uid)
                if self._files.delete(ref.uid, (ref.namespace, ref.name)):
                    self._reporter.report_unprepared(ref, devices)
                    log.info(
                        "unprepared claim %s (UID %s): removed the CDI spec an earlier unprepare left (%s)",
                        claim_namespaced_name(ref),
                        ref.uid,
                        ", ".join(devices) or "no devices",
                    )
                return UnprepareResult()
            self._release(record)  # the record is dropped before the files go
            self._files.delete(ref.uid, (ref.namespace, ref.name))
            self._reporter.report_unprepared(ref, record.device_names)
            log.info("unprepared claim %s (UID %s)", record.label, ref.uid)
            return UnprepareResult()

    def _release(self, record: ClaimRecord) -> None:
        """Destroy the record's instances and drop it; on failure keep what is left as PrepareStarted and raise."""
        error = release_record(self._context, record)
        if error is not None:
            raise error

    def release_realized_ahead(self, ref: ClaimRef, confirm: Callable[[ClaimRecord], bool]) -> bool:
        """Unprepare a claim realized ahead that kubelet never claimed, if ``confirm(record)`` -- a fresh
        read of the API, made under the claim's lock -- still says no pod will get it; True when released.

        Under the claim's lock, so it never races kubelet's prepare of the claim: whichever comes
        second sees what the first did (a claimed record is not released; a released one is prepared
        anew from the claim).  ``confirm`` raising (a failed read) releases nothing.  A release that
        fails keeps what is left as ``PrepareStarted``, still realized ahead, and raises.
        """
        store = self._context.store
        with (
            log_context(claim_uid=ref.uid, claim=claim_namespaced_name(ref)),
            self._running(),
            self._claim_locks.hold(ref.uid),
        ):
            record = store.get(ref.uid)
            if record is None or not record.realized_ahead or not confirm(record):
                return False
            self._release(record)
            self._files.delete(ref.uid)
            self._reporter.report_unprepared(ref, record.device_names)
            log.info("released claim %s (UID %s): realized ahead, and no pod will get it", record.label, ref.uid)
            return True

    def _result_of(self, record: ClaimRecord) -> PrepareResult:
        return PrepareResult(
            devices=tuple(
                PreparedDevice(
                    pool_name=self.pool_name,
                    device_name=device.intent.device_name,
                    request_names=device.intent.request_names,
                    cdi_device_ids=device.cdi_device_ids,
                    share_id=device.intent.share_id,
                )
                for device in record.devices
            )
        )
