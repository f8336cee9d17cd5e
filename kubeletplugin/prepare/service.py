"""``PrepareService``: NodePrepareResources / NodeUnprepareResources, one straight path per claim.

The :class:`~dra_driver.kubelet.calls.DraService` the gRPC layer calls.  A claim's prepare reads top to
bottom in :meth:`PrepareService._prepare_claim` (docs/prepare.md):

    hold the claim's lock
    checkpoint says PrepareCompleted?  → NVML still shows its instances?  return its devices (no
                                         API call, nothing created: kubelet retries); else roll back
                                         what is still migdra's (identity-checked) and prepare again
    checkpoint says PrepareStarted?    → roll that attempt back first
    read the claim (UID checked) → this driver's results in this node's pool → opaque configs
    → device names → (GPU, GI profile, placement) checked against NVML → placements free?
    → checkpoint PrepareStarted (intent)
    → per MIG device, under its GPU's lock (:meth:`PrepareService._create_instance`): placement still
      free? → checkpoint: GI requested (+ the GIs standing) → GI at exactly that placement
      → checkpoint: GI ID → full CI → its SMs checked
    → CDI spec and device metadata → checkpoint PrepareCompleted → status.devices + Event (background)

Unprepare (:meth:`PrepareService._unprepare_claim`) releases what the record names, reading top to
bottom in :meth:`PrepareService._release_record` as creation does (start-up recovery rolls back
through it too):

    hold the claim's lock; no record?  → remove a CDI spec an earlier unprepare left, report it
    → checkpoint PrepareStarted (being released)
    → per device, last first, under its GPU's lock: identity proven → checkpoint: the GI alone
      → its CIs, then the GI destroyed (a share: its own CI destroyed → checkpoint: the GI alone
      → the GI destroyed only if no other record names it)
    → checkpoint: record dropped (a failure: what is left kept as PrepareStarted, the claim's error)
    → CDI spec and device metadata deleted → status.devices cleared + Event (background)

Around both, one wrapper
(:meth:`PrepareService._handle`) does what every claim needs: the log context (claim UID and name),
the per-claim metric, and the one mapping of an exception to the claim's ``error`` (naming claim,
device and cause) with a Warning Event; one claim never fails another, and an unexpected exception
is a per-claim error too.

Beside it: the NVML steps (:mod:`~kubeletplugin.prepare.mig_instances`), the claim's files
(:mod:`~kubeletplugin.prepare.claim_files`), the checkpoint (:mod:`~kubeletplugin.prepare.checkpoint`),
the claim status writer (:mod:`~kubeletplugin.prepare.reporter`) and what runs once at start-up
(:mod:`~kubeletplugin.prepare.recovery`).

Concurrency: the claims of one call, and concurrent calls, run on a small thread pool.  Several
plugin processes may serve the node at once (the two pods of a rolling update), so every lock is
taken in this process *and* across processes (:mod:`~kubeletplugin.prepare.locks`): a claim is
handled by one thread of one process at a time (claim lock), a GPU is mutated by one at a time (GPU
lock), and the checkpoint is re-read and changed under its own lock for each step
(:class:`~kubeletplugin.prepare.checkpoint.CheckpointStore`).  Claims on different GPUs are created
in parallel.  This module never imports ``grpc``.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from dra_driver.devicemodel.pool import OwnedInstances
from dra_driver.kube.client import Client
from dra_driver.kubelet.calls import ClaimRef, PreparedDevice, PrepareResult, UnprepareResult
from dra_driver.logs import log_context
from dra_driver.mig.catalog import ComputeInstanceProfile, Placement
from dra_driver.mig.compute_placement import choose_compute_placement
from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.errors import NvmlError
from dra_driver.nvml.types import GpuInstanceInfo
from kubeletplugin.metrics import MigInstance, PrepareMetrics
from kubeletplugin.prepare.cdi import (
    DEFAULT_COMMON_EDITS,
    CommonEdits,
    compute_cdi_device_id,
    read_cdi_spec_device_names,
)
from kubeletplugin.prepare.checkpoint import CheckpointStore, CheckpointWriteStats, read_node_boot_id
from kubeletplugin.prepare.claim_files import ClaimFiles
from kubeletplugin.prepare.claims import (
    AllocatedDevice,
    claim_namespaced_name,
    compute_claim_allocation,
    compute_claim_ref_problem,
    read_claim,
)
from kubeletplugin.prepare.config import compute_device_config, parse_driver_configs
from kubeletplugin.prepare.devices import DeviceTarget, NodeGpus, compute_device_target
from kubeletplugin.prepare.driver_files import DriverEdits
from kubeletplugin.prepare.errors import (
    CheckpointError,
    ComputeInstanceLeftError,
    DeviceConfigError,
    DeviceConflictError,
    DeviceResolutionError,
    LockTimeoutError,
    NodeFileError,
    PrepareError,
    RealizeError,
    ReleaseError,
    is_file_system_error,
)
from kubeletplugin.prepare.locks import LOCKS_DIR, KeyedLocks
from kubeletplugin.prepare.metadata import DeviceAttributeReader
from kubeletplugin.prepare.mig_instances import (
    RealizedInstance,
    check_delivered_sms,
    compute_placement_conflict,
    create_compute_instance,
    create_gpu_instance,
    create_share_compute_instance,
    describe_share_refusal,
    destroy_created_instance,
    destroy_instance,
    destroy_share_compute_instance,
    destroy_shared_gpu_instance_if_last,
    find_instance_to_release,
    find_shared_gpu_instance,
    read_instances_with_placement_free,
    read_verification_problems,
)
from kubeletplugin.prepare.records import (
    ClaimRecord,
    ClaimState,
    DeviceIntent,
    DeviceRecord,
    compute_conflicting_device,
)
from kubeletplugin.prepare.recovery import RecoveryReport, recover_node
from kubeletplugin.prepare.reporter import EVENT_PREPARE_FAILED, EVENT_UNPREPARE_FAILED, ClaimReporter
from kubeletplugin.settings import CrashPoint, PrepareSettings

log = logging.getLogger(__name__)

_Result = TypeVar("_Result", PrepareResult, UnprepareResult)


class PrepareService:
    """Prepares and unprepares claims of one driver on one node.  Thread-safe; see the module docstring.

    Construct with explicit dependencies, then :meth:`start` (loads the checkpoint -- raising
    :class:`~kubeletplugin.prepare.errors.CheckpointError` if it cannot be trusted -- and runs
    start-up recovery, leaving alone what another plugin process is working on) before serving
    kubelet; :meth:`close` at shutdown.  ``state_lock_timeout`` bounds every wait for a lock (the
    claim's, a GPU's, the checkpoint's).
    """

    def __init__(
        self,
        *,
        nvml: Nvml,
        client: Client,
        node_name: str,
        driver_name: str,
        cdi_dir: Path,
        state_dir: Path,
        proc_root: Path = Path("/proc"),
        read_boot_id: Callable[[], str] = read_node_boot_id,
        workers: int = 64,
        crash_at: CrashPoint | None = None,
        state_lock_timeout: float = 30.0,
        reporter: ClaimReporter | None = None,
        metrics: PrepareMetrics | None = None,
        device_metadata: bool = True,
        plugin_data_dir: Path | None = None,
        common_edits: CommonEdits = DEFAULT_COMMON_EDITS,
        on_shares_changed: Callable[[], None] | None = None,
    ) -> None:
        self._metrics = metrics
        # Called (by the checkpoint) when a record holding shares changed: the shared devices' admitted
        # sizes follow the CI placements recorded (publishing).
        self._on_shares_changed = on_shares_changed
        # CI placements where NVML and the catalog differ, logged once each (GPU, GI profile, CI profile, NVML's).
        self._placement_differences: set[tuple[str, int | None, str, tuple[Placement, ...]]] = set()
        self.nvml = nvml
        self._gpus = NodeGpus(nvml)  # listed once; the GPU a device names is read fresh
        self.node_name = node_name
        self.pool_name = node_name  # one pool per node, named after it
        self.driver_name = driver_name
        self.cdi_dir = cdi_dir
        self.state_dir = state_dir
        self._files = ClaimFiles(
            cdi_dir=cdi_dir,
            proc_root=proc_root,
            driver_name=driver_name,
            pool_name=node_name,
            # KEP-5304 device metadata (metadata.py): written under this directory, swept even when off.
            metadata_root=plugin_data_dir or state_dir,
            device_metadata=device_metadata,
            common_edits=common_edits,  # driver files, device nodes: the same in every claim's spec
            attributes=DeviceAttributeReader(nvml, self._gpus, driver_name),
            state_dir=state_dir,
        )
        self._client = client
        self._read_boot_id = read_boot_id
        self._workers = workers
        self._crash_at = crash_at
        self._lock_timeout = state_lock_timeout
        self._reporter = reporter or ClaimReporter(client, driver_name, node_name)
        locks = state_dir / LOCKS_DIR
        self._claim_locks = KeyedLocks(
            locks, prefix="claim-", kind="claim", timeout=state_lock_timeout, remove_files=True
        )
        self._gpu_locks = KeyedLocks(locks, prefix="gpu-", kind="GPU", timeout=state_lock_timeout)
        self._store: CheckpointStore | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._calls = 0  # prepare/unprepare calls running (close waits for them)
        self._calls_changed = threading.Condition()

    @classmethod
    def from_settings(
        cls,
        settings: PrepareSettings,
        *,
        nvml: Nvml,
        client: Client,
        node_name: str,
        driver_name: str,
        read_boot_id: Callable[[], str] = read_node_boot_id,
        reporter: ClaimReporter | None = None,
        metrics: PrepareMetrics | None = None,
        driver_edits: DriverEdits | None = None,
        on_shares_changed: Callable[[], None] | None = None,
    ) -> PrepareService:
        """The service the node process runs, from its settings (``MIGDRA_CDI_DIR``, ``MIGDRA_STATE_DIR``, ...)
        and the driver files found at start-up (``driver_edits``; None: the specs carry none);
        ``on_shares_changed``: called whenever a record holding shares was written or removed (a share's
        compute instance requested, created, destroyed; a record dropped)."""
        return cls(
            nvml=nvml,
            client=client,
            node_name=node_name,
            driver_name=driver_name,
            cdi_dir=settings.cdi_dir,
            state_dir=settings.state_dir,
            proc_root=settings.proc_root,
            read_boot_id=read_boot_id,
            workers=settings.prepare_workers,
            crash_at=settings.test_crash_at,
            state_lock_timeout=settings.state_lock_timeout,
            reporter=reporter,
            metrics=metrics,
            device_metadata=settings.device_metadata,
            plugin_data_dir=settings.plugin_data_dir,
            common_edits=CommonEdits(
                device_nodes=settings.cdi_device_nodes,
                dev_root=str(settings.dev_root),
                mounts=driver_edits.mounts if driver_edits is not None else (),
                hooks=driver_edits.hooks if driver_edits is not None else (),
            ),
            on_shares_changed=on_shares_changed,
        )

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> RecoveryReport:
        """Load the checkpoint, recover, clean up; then calls may be served.

        Another plugin process may be serving the node already (a rolling update): what it is working
        on right now -- claims whose lock it holds -- is left to it (``RecoveryReport.in_flight``).
        """
        store = CheckpointStore(
            self.state_dir,
            self._read_boot_id(),
            lock_timeout=self._lock_timeout,
            observe_write=self._metrics.observe_checkpoint_write if self._metrics is not None else None,
            on_share_change=self._on_shares_changed,
        )
        loaded = store.load()  # CheckpointError: the process must stop, not guess
        self._store = store
        self._reporter.start(store)  # claim status converges to the checkpoint (and is reconciled with it)
        try:
            report = recover_node(
                self.nvml,
                store,
                loaded,
                self._files,
                self._claim_locks,
                self._gpu_locks,
                self._reporter,
                release=self._release_record,
            )
        except LockTimeoutError as e:
            self._abandon_start()
            raise CheckpointError(f"start-up recovery could not finish: {e.message}") from e
        except BaseException:
            self._abandon_start()
            raise
        self._executor = ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="migdra-prepare")
        log.info(
            "prepare service started: %d claim(s) adopted, %d rolled back, %d kept for retry, %d from another boot, "
            "%d being worked on by another plugin process",
            len(report.adopted),
            len(report.rolled_back),
            len(report.kept),
            len(report.discarded),
            len(report.in_flight),
        )
        return report

    def _abandon_start(self) -> None:
        self._reporter.close()
        if self._store is not None:
            self._store.close()
            self._store = None

    def close(self, report_timeout: float = 1.0, drain_timeout: float = 60.0) -> None:
        """Stop serving: wait for running calls (at most ``drain_timeout`` s), give queued status writes a
        moment, let go of the files.  A call still running after that is left to recovery: it is the
        kill -9 case, which the checkpoint is built for."""
        with self._calls_changed:
            if not self._calls_changed.wait_for(lambda: self._calls == 0, drain_timeout):
                log.warning(
                    "closing with %d prepare/unprepare call(s) still running after %.0f s", self._calls, drain_timeout
                )
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
            self._reporter.flush(report_timeout)
        self._reporter.close()
        if self._store is not None:
            self._store.close()
            self._store = None

    def __enter__(self) -> PrepareService:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    # -- DraService: every claim of a call, each through one wrapper ------------------------------

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        return self._each_claim("prepare", claims, self._prepare_claim, PrepareResult)

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, UnprepareResult]:
        return self._each_claim("unprepare", claims, self._unprepare_claim, UnprepareResult)

    def realize_ahead(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        """Prepare ``claims`` before their pods are bound (realize before bind, the realizer's call): the
        prepare path exactly, and the record says *realized ahead* until kubelet's :meth:`prepare`
        returns it (then kubelet owns the unprepare).  A claim already prepared is returned as it is (a
        record kubelet has claimed stays claimed).  Not in the prepare metric: kubelet did not ask."""
        return self._each_claim(
            "realize ahead", claims, functools.partial(self._prepare_claim, ahead=True), PrepareResult
        )

    def _each_claim(
        self,
        operation: str,
        claims: Sequence[ClaimRef],
        handle: Callable[[ClaimRef], _Result],
        result: Callable[..., _Result],
    ) -> dict[str, _Result]:
        """Every claim of a call through :meth:`_handle`: the usual call (one pod, one claim) in the
        caller's thread, several on the worker pool.  Claim status writes wait for the call (reporter.py)."""
        if self._executor is None:
            raise RuntimeError("PrepareService.start() must run before prepare/unprepare calls")
        unique = {ref.uid: ref for ref in claims}
        with self._call(), self._reporter.call_in_flight():
            if len(unique) == 1:  # no hand-off to a worker thread and back
                ((uid, ref),) = unique.items()
                return {uid: self._handle(operation, ref, handle, result)}
            futures: dict[str, Future[_Result]] = {
                uid: self._executor.submit(self._handle, operation, ref, handle, result) for uid, ref in unique.items()
            }
            return {uid: future.result() for uid, future in futures.items()}

    def _handle(
        self, operation: str, ref: ClaimRef, handle: Callable[[ClaimRef], _Result], result: Callable[..., _Result]
    ) -> _Result:
        """One claim: what every claim needs around its path, in one place -- the log context (claim UID
        and name), the per-claim metric (by outcome; per claim, not per call), and the mapping of any
        failure to the claim's error with a Warning Event."""
        started = time.perf_counter()
        verb = "unprepare" if operation == "unprepare" else "prepare"
        with log_context(claim_uid=ref.uid or None, claim=claim_namespaced_name(ref)):
            problem = compute_claim_ref_problem(ref)
            if problem is not None:  # nothing to report the failure on: the claim cannot be named
                log.warning("%s refused: %s", verb, problem)
                outcome = result(error=problem)
            else:
                try:
                    outcome = handle(ref)
                except Exception as e:
                    message = self._claim_error(ref, verb, e)
                    failed = EVENT_UNPREPARE_FAILED if verb == "unprepare" else EVENT_PREPARE_FAILED
                    self._reporter.report_failure(ref, failed, message)
                    outcome = result(error=message)
        if self._metrics is not None and operation != "realize ahead":
            self._metrics.observe_claim(operation, time.perf_counter() - started, not outcome.error)
        return outcome

    def _claim_error(self, ref: ClaimRef, operation: str, error: Exception) -> str:
        """The claim's one-line error for what its ``operation`` ("prepare", "unprepare") raised.

        The one place an exception becomes a per-claim message, for both calls: migdra's own errors
        say claim, device and cause; a file the claim needs that the node refuses (a read-only CDI
        directory, a full disk) becomes a :class:`NodeFileError` naming the file, its role and the
        operating system's reason; only what nobody foresaw is "unexpected" (logged with its
        traceback).  Called from the ``except`` block, so the traceback is the one being handled.
        """
        label = claim_namespaced_name(ref)
        if is_file_system_error(error):
            assert isinstance(error, OSError)
            error = NodeFileError(*self._files.describe_file(error.filename), error)
        if isinstance(error, PrepareError):
            message = error.describe(label)
            log.warning("%s failed: %s", operation, message)
        elif isinstance(error, CheckpointError):
            message = f"claim {label}: {error}"
            log.error("%s failed: %s", operation, message)
        else:
            doing = "preparing" if operation == "prepare" else "unpreparing"
            message = f"claim {label}: unexpected error while {doing}: {error!r}"
            log.exception("%s of claim %s (UID %s) failed unexpectedly", operation, label, ref.uid)
        return message

    # -- prepare: the path of one claim ------------------------------------------------------------

    def _prepare_claim(self, ref: ClaimRef, *, ahead: bool = False) -> PrepareResult:
        """``ahead``: the realizer's call (record realized ahead); otherwise kubelet's, which claims a
        record realized ahead (from then on kubelet owns its unprepare)."""
        store = self._require_store()
        with self._claim_locks.hold(ref.uid):
            record = store.get(ref.uid)
            if record is not None and record.state is ClaimState.PREPARE_COMPLETED:
                if self._still_realized(ref, record):
                    self._files.ensure(record)
                    if record.realized_ahead and not ahead:
                        record = record.model_copy(update={"realized_ahead": False})
                        store.put(record)  # before kubelet gets the devices: no teardown after this
                        log.info("claim %s (UID %s): kubelet claimed what was realized ahead", record.label, ref.uid)
                    return self._result_of(record)
                record = None  # rolled back: prepare again, from the claim
            if record is not None:
                log.warning("claim %s (UID %s): rolling back an unfinished prepare first", record.label, ref.uid)
                self._release(record)

            claim = read_claim(self._client, ref)
            allocation = compute_claim_allocation(claim, ref, self.driver_name, self.pool_name)
            grouped = _group_by_device(allocation.devices)
            shares = _shares_by_device(allocation.devices)
            if not grouped:
                log.info(
                    "claim %s (UID %s) has no device of %s (allocated by %s only): nothing to prepare",
                    claim_namespaced_name(ref),
                    ref.uid,
                    self.driver_name,
                    ", ".join(allocation.other_drivers) or "no driver",
                )
                return PrepareResult()
            try:
                gpus = self._gpus.topology(grouped)
            except NvmlError as e:
                raise RealizeError(f"reading the node's GPUs through NVML failed: {e}") from e
            # Every problem of the claim at once (its configuration, each of its devices), before anything
            # is created: one failed prepare says all that must change.
            problems: list[PrepareError] = []
            try:
                configs = parse_driver_configs(allocation.configs, self.driver_name)
            except DeviceConfigError as e:
                problems.append(e)
                configs = ()
            intents: list[DeviceIntent] = []
            targets: dict[str, DeviceTarget] = {}
            for device_name, (requests, admin_access) in grouped.items():
                try:
                    target = compute_device_target(device_name, gpus, admin_access=admin_access)
                    # Admin access to a shared device gets a shareID too (kube-scheduler gives every result
                    # on a multi-allocatable device one): kept, so its status entry and kubelet's answer
                    # carry it; DeviceIntent.is_share leaves admin access out, so nothing is created for it.
                    share = shares.get(device_name)
                    if share is not None:
                        if not target.shared:
                            raise DeviceResolutionError(
                                f"device {device_name}: a shareID was allocated, but it is not a shared device"
                            )
                        problem = target.share_size_problem(share[1])
                        if problem is not None:
                            raise DeviceResolutionError(problem)
                except DeviceResolutionError as e:
                    problems.append(e)
                    continue
                targets[device_name] = target
                env = compute_device_config(configs, requests)
                intents.append(_intent_of(target, requests, admin_access, env, share))
            if problems:
                raise type(problems[0])("; ".join(problem.message for problem in problems))
            self._check_placements_free(ref, intents)

            started = ClaimRecord(
                claim_uid=ref.uid,
                namespace=ref.namespace,
                name=ref.name,
                pod_claim_name=claim.metadata.pod_claim_name,
                state=ClaimState.PREPARE_STARTED,
                devices=tuple(DeviceRecord(intent=intent) for intent in intents),
                realized_ahead=ahead,
            )
            store.begin(started)
            self._crash(CrashPoint.AFTER_CHECKPOINT_STARTED)
            created: list[RealizedInstance] = []  # what this call created: undone if it fails
            devices: list[DeviceRecord] = []
            try:
                for index, device in enumerate(started.devices):
                    if device.intent.admin_access:
                        devices.append(self._admin_device(device))
                    elif not device.intent.is_mig:
                        devices.append(device)  # a whole GPU: nothing to create
                    elif device.intent.is_share:
                        devices.append(self._create_share(started.claim_uid, index, device, targets))
                    else:
                        instance, realized = self._create_instance(started.claim_uid, index, device, targets)
                        created.append(instance)
                        devices.append(realized)
                completed = started.model_copy(
                    update={
                        "state": ClaimState.PREPARE_COMPLETED,
                        "devices": tuple(
                            d.model_copy(
                                update={
                                    "cdi_device_ids": (
                                        compute_cdi_device_id(self.driver_name, ref.uid, d.intent.device_name),
                                    )
                                }
                            )
                            for d in devices
                        ),
                    }
                )
                self._files.write(completed)
                self._crash(CrashPoint.AFTER_CDI)
                store.put(completed)
                self._crash(CrashPoint.AFTER_CHECKPOINT_COMPLETED)
            except _GpuInstanceLeft as e:
                self._undo(started, created, [*devices, e.device])
                raise
            except BaseException:
                self._undo(started, created, devices)
                raise
            self._reporter.report_prepared(ref, completed, allocation.generation)
            log.info(
                "prepared claim %s (UID %s): %s",
                completed.label,
                ref.uid,
                ", ".join(d.intent.device_name for d in completed.devices),
            )
            return self._result_of(completed)

    def _create_instance(
        self, claim_uid: str, index: int, device: DeviceRecord, targets: dict[str, DeviceTarget]
    ) -> tuple[RealizedInstance, DeviceRecord]:
        """Create device ``index``'s MIG instance under its GPU's lock, recording each step in the
        checkpoint before the next: the request (with the GIs standing), then the GI's ID as soon as
        NVML returns it (before any compute instance exists).  So after a crash the record tells
        recovery exactly which GI may be migdra's, and the slice publisher knows it from the moment it
        exists.  A failure after the GI exists destroys it again (CI first); a GI that cannot be
        destroyed is raised with the device as recorded (:class:`_GpuInstanceLeft`), for the record."""
        intent = device.intent
        target = targets[intent.device_name]
        with log_context(gpu_uuid=intent.gpu_uuid), self._gpu_locks.hold(intent.gpu_uuid):
            standing = read_instances_with_placement_free(self.nvml, target)
            before = tuple(sorted(gi.gpu_instance_id for gi in standing))
            device = self._record_step(
                claim_uid, index, device, {"gpu_instances_before": before}, "the GPU-instance request"
            )
            self._crash(CrashPoint.AFTER_CHECKPOINT_REQUESTED)
            gi = create_gpu_instance(self.nvml, target)
            self._crash(CrashPoint.AFTER_GPU_INSTANCE)
            compute_instance_id: int | None = None
            try:
                device = self._record_step(
                    claim_uid, index, device, {"gpu_instance_id": gi.gpu_instance_id}, f"GI {gi.gpu_instance_id}"
                )
                self._crash(CrashPoint.AFTER_CHECKPOINT_GPU_INSTANCE)
                ci_profile, ci = create_compute_instance(self.nvml, target, gi.gpu_instance_id)
                compute_instance_id = ci.compute_instance_id
                self._crash(CrashPoint.AFTER_COMPUTE_INSTANCE)
                instance = check_delivered_sms(target, gi.gpu_instance_id, ci_profile, ci)
            except RealizeError as e:
                failure = destroy_created_instance(self.nvml, target.gpu_uuid, gi.gpu_instance_id, compute_instance_id)
                if failure is None:
                    raise
                left = device.model_copy(update={"gpu_instance_id": gi.gpu_instance_id})
                raise _GpuInstanceLeft(
                    f"{e.message}; rolling back GI {gi.gpu_instance_id} failed ({failure})", left
                ) from e
        return instance, device.model_copy(
            update={
                "gpu_instance_id": instance.gpu_instance_id,
                "compute_instance_id": instance.compute_instance_id,
                "compute_instance_profile_id": instance.compute_instance_profile_id,
                "mig_uuid": instance.mig_uuid,
            }
        )

    def _compute_instance_placements(
        self, intent: DeviceIntent, gpu_instance_id: int, ci_profile: ComputeInstanceProfile
    ) -> tuple[Placement, ...] | None:
        """Where NVML says a CI of ``ci_profile`` may sit in this GI (the catalog's placements are
        inferred: NVML is the authority on the hardware); a difference from the catalog is logged.  None
        (the catalog's, logged) when NVML cannot say."""
        try:
            legal = self.nvml.compute_instance_possible_placements(
                intent.gpu_uuid, gpu_instance_id, ci_profile.ci_profile_index
            )
        except NvmlError as e:
            log.warning(
                "device %s: NVML did not list the placements of %s (%s); using the catalog's",
                intent.device_name,
                ci_profile.name,
                e,
            )
            return None
        difference = (intent.gpu_uuid, intent.profile_id, ci_profile.name, tuple(legal))
        if tuple(legal) != tuple(ci_profile.placements) and difference not in self._placement_differences:
            self._placement_differences.add(difference)  # once per GPU and profile: not at every share
            log.warning(
                "device %s: NVML places %s at %s, the catalog at %s; NVML's are used",
                intent.device_name,
                ci_profile.name,
                ", ".join(str(p) for p in legal) or "nowhere",
                ", ".join(str(p) for p in ci_profile.placements),
            )
        return tuple(legal)

    def _create_share(
        self, claim_uid: str, index: int, device: DeviceRecord, targets: dict[str, DeviceTarget]
    ) -> DeviceRecord:
        """Realize device ``index``, a share, under its GPU's lock: join the device's shared GI when another
        share's record names it, else create the GI (recorded as :meth:`_create_instance` records it:
        request, then ID), then this share's compute instance at the placement the chooser picks
        (``dra_driver.mig.compute_placement``), recording the request (the CIs standing, the placement)
        before NVML is asked and the CI's identity after.  A failure destroys what this call created: the
        CI, and the GI if this call created it (no other share can have joined it: the lock is held)."""
        intent = device.intent
        target = targets[intent.device_name]
        assert target.catalog_profile is not None
        assert intent.share_size is not None
        store = self._require_store()
        with log_context(gpu_uuid=intent.gpu_uuid), self._gpu_locks.hold(intent.gpu_uuid):
            try:
                standing = self.nvml.gpu_instances(intent.gpu_uuid)
            except NvmlError as e:
                raise RealizeError(
                    f"device {intent.device_name}: reading GPU {intent.gpu_uuid} before creating failed: {e}"
                ) from e
            joined = find_shared_gpu_instance(standing, target, intent, store.records(), claim_uid)
            created_gi: int | None = None
            if joined is None:
                before = tuple(sorted(gi.gpu_instance_id for gi in standing))
                device = self._record_step(
                    claim_uid, index, device, {"gpu_instances_before": before}, "the GPU-instance request"
                )
                self._crash(CrashPoint.AFTER_CHECKPOINT_REQUESTED)
                gi = create_gpu_instance(self.nvml, target)
                self._crash(CrashPoint.AFTER_GPU_INSTANCE)
                created_gi = gi.gpu_instance_id
                update: dict[str, object] = {"gpu_instance_id": gi.gpu_instance_id, "created_gpu_instance": True}
            else:
                gi = joined
                update = {"gpu_instance_id": gi.gpu_instance_id, "created_gpu_instance": False}
                log.info("device %s: joining shared GI %d", intent.device_name, gi.gpu_instance_id)
            ci_id: int | None = None
            try:
                device = self._record_step(claim_uid, index, device, update, f"GI {gi.gpu_instance_id}")
                self._crash(CrashPoint.AFTER_CHECKPOINT_GPU_INSTANCE)
                present = [ci.placement for ci in gi.compute_instances]
                ci_profile = target.catalog_profile.compute_instance_for_share(intent.share_size)
                legal = self._compute_instance_placements(intent, gi.gpu_instance_id, ci_profile)
                chosen = choose_compute_placement(target.catalog_profile, present, intent.share_size, legal)
                if chosen is None:
                    raise DeviceConflictError(describe_share_refusal(target, gi, intent.share_size))
                request = {
                    "compute_instances_before": tuple(sorted(ci.compute_instance_id for ci in gi.compute_instances)),
                    "compute_instance_placement": chosen,
                    "compute_instance_profile_id": ci_profile.ci_profile_index,
                }
                device = self._record_step(claim_uid, index, device, request, "the compute-instance request")
                self._crash(CrashPoint.AFTER_CHECKPOINT_COMPUTE_INSTANCE_REQUESTED)
                ci = create_share_compute_instance(
                    self.nvml, target, gi.gpu_instance_id, ci_profile.ci_profile_index, chosen
                )
                ci_id = ci.compute_instance_id
                self._crash(CrashPoint.AFTER_COMPUTE_INSTANCE)
                identity = {"compute_instance_id": ci.compute_instance_id, "mig_uuid": ci.mig_uuid}
                device = self._record_step(claim_uid, index, device, identity, f"CI {ci.compute_instance_id}")
                self._crash(CrashPoint.AFTER_CHECKPOINT_COMPUTE_INSTANCE)
            except (RealizeError, DeviceConflictError) as e:
                stray = e if isinstance(e, ComputeInstanceLeftError) else None
                if stray is not None:  # NVML put it elsewhere and would not destroy it: one more try
                    ci_id = stray.compute_instance_id
                failure, ci_left = self._undo_share(intent, gi.gpu_instance_id, ci_id, created_gi)
                if failure is None and stray is not None:  # the second try destroyed it after all
                    raise RealizeError(f"{e.message}; the roll-back destroyed it on a second try") from e
                if failure is None:
                    raise
                recorded: dict[str, object] = {"gpu_instance_id": gi.gpu_instance_id}
                if ci_left and stray is not None:  # recorded, so a release destroys it, and then the GI
                    recorded |= {
                        "compute_instance_id": stray.compute_instance_id,
                        "mig_uuid": stray.mig_uuid,
                        "compute_instance_placement": stray.placement,
                    }
                left = device.model_copy(update=recorded)
                raise _GpuInstanceLeft(f"{e.message}; rolling back the share failed ({failure})", left) from e
        return device

    def _undo_share(
        self, intent: DeviceIntent, gi_id: int, ci_id: int | None, created_gi: int | None
    ) -> tuple[str | None, bool]:
        """Destroy what one share's prepare created (its CI; the GI if it created it): the failure text
        (None: all gone) and whether the CI is still there."""
        try:
            if ci_id is not None:
                self.nvml.destroy_compute_instance(intent.gpu_uuid, gi_id, ci_id)
        except NvmlError as e:
            return str(e), True
        if created_gi is None:
            return None, False
        return destroy_created_instance(self.nvml, intent.gpu_uuid, created_gi, None), False

    def _record_step(
        self, claim_uid: str, index: int, device: DeviceRecord, update: dict[str, object], what: str
    ) -> DeviceRecord:
        """Device ``index`` of the claim's record, updated and written; a failure is the claim's
        :class:`RealizeError` (after the GI exists, the caller destroys it)."""
        device = device.model_copy(update=update)
        try:
            self._require_store().update_device(claim_uid, index, device)
        except (OSError, CheckpointError, LockTimeoutError) as e:
            raise RealizeError(
                f"device {device.intent.device_name}: recording {what} in the checkpoint failed: {e}"
            ) from e
        return device

    def _still_realized(self, ref: ClaimRef, record: ClaimRecord) -> bool:
        """Whether NVML still shows the instances of a completed ``record``; if not, roll it back.

        An operator may have destroyed migdra's instance and created another in its place since
        (NVML may even give it the same GI ID).  Returning the recorded devices would hand the pod a
        MIG UUID that no longer exists, so the record is released -- identity-checked: only an
        instance that still is migdra's is destroyed -- and the claim is prepared again, which fails
        cleanly while someone else's instance holds the placement.
        """
        problems = read_verification_problems(self.nvml, self._gpu_locks, record)
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

    def _undo(self, started: ClaimRecord, created: list[RealizedInstance], realized: list[DeviceRecord]) -> None:
        """Destroy what this prepare call created; record what could not be destroyed."""
        store = self._require_store()
        leftovers: list[DeviceRecord] = [
            d for d in realized if d.owns_instance and d.mig_uuid is None and not d.intent.is_share
        ]
        for share in (d for d in realized if d.intent.is_share and d.gpu_instance_id is not None):
            try:  # its CI, and its GI unless another claim's share joined it meanwhile
                with self._gpu_locks.hold(share.intent.gpu_uuid):
                    others = [r for r in store.records() if r.claim_uid != started.claim_uid]
                    released = destroy_share_compute_instance(self.nvml, share, others)
                    if released is not None:  # no record to follow: the claim's record goes as a whole
                        destroy_shared_gpu_instance_if_last(self.nvml, released, others)
            except (ReleaseError, LockTimeoutError) as e:
                log.error("claim %s: rolling back share %s failed: %s", started.label, share.intent.device_name, e)
                leftovers.append(share)
        for instance in reversed(created):
            try:
                with self._gpu_locks.hold(instance.gpu_uuid):
                    failure = destroy_created_instance(
                        self.nvml, instance.gpu_uuid, instance.gpu_instance_id, instance.compute_instance_id
                    )
            except LockTimeoutError as e:
                failure = e.message
            if failure is not None:
                leftovers.extend(
                    d
                    for d in realized
                    if d.gpu_instance_id == instance.gpu_instance_id and d.mig_uuid == instance.mig_uuid
                )
        # The record tells the truth first: a spec that cannot be deleted (a read-only CDI directory)
        # must never leave a record naming a GI that is gone -- an operator's GI may get its ID next.
        if leftovers:
            store.put(started.model_copy(update={"devices": tuple(leftovers)}))
        else:
            store.drop(started.claim_uid)
        try:
            self._files.delete(started.claim_uid)
        except OSError as e:
            log.error(
                "claim %s (UID %s): removing its CDI spec after the failed prepare failed: %s; the spec names no "
                "instance and is removed at the next unprepare or start-up",
                started.label,
                started.claim_uid,
                e,
            )

    def _admin_device(self, device: DeviceRecord) -> DeviceRecord:
        """Admin access: the instance at that placement if migdra created it, else the parent GPU only."""
        intent = device.intent
        if not intent.is_mig:
            return device
        assert intent.profile_id is not None
        assert intent.placement is not None
        owner = self._require_store().find_owner(intent.gpu_uuid, intent.profile_id, intent.placement)
        if owner is None:
            return device
        return device.model_copy(
            update={
                "gpu_instance_id": owner.gpu_instance_id,
                "compute_instance_id": owner.compute_instance_id,
                "compute_instance_profile_id": owner.compute_instance_profile_id,
                "mig_uuid": owner.mig_uuid,
            }
        )

    def _check_placements_free(self, ref: ClaimRef, intents: Sequence[DeviceIntent]) -> None:
        """Refuse before touching anything: overlapping devices in the claim, or an occupied placement.

        Advisory: :meth:`_create_instance` checks again under the GPU's lock before creating.
        The records are read after the instances, so an instance another claim's prepare created
        is attributed to that claim (compute_placement_conflict).
        """
        instances: dict[str, list[GpuInstanceInfo]] = {}
        store = self._require_store()
        for position, intent in enumerate(intents):
            earlier = [DeviceRecord(intent=i) for i in intents[:position]]
            clash = compute_conflicting_device(intent, earlier)
            if clash is not None:
                raise DeviceConflictError(
                    f"devices {clash.intent.device_name} and {intent.device_name} overlap on GPU {intent.gpu_uuid}"
                )
            if intent.admin_access or not intent.is_mig:
                continue
            if intent.gpu_uuid not in instances:
                instances[intent.gpu_uuid] = self._read_gpu_instances(intent)
            conflict = compute_placement_conflict(instances[intent.gpu_uuid], intent, store.records(), ref.uid)
            if conflict is not None:
                raise DeviceConflictError(conflict.describe(intent))

    def _read_gpu_instances(self, intent: DeviceIntent) -> list[GpuInstanceInfo]:
        """The GPU's instances: read without its lock first, so a prepare does not wait behind another
        claim's creation on the GPU just to look; a read that fails is read again under the lock.

        Why: a GI destroyed while NVML lists the GPU's instances (another claim being unprepared, in
        this or the other plugin process) fails the listing with INVALID_ARGUMENT (a stale handle).
        Under the GPU's lock no migdra process destroys anything, so the second read fails only for a
        reason of its own (or an operator destroying an instance at that very moment).
        """
        try:
            return self.nvml.gpu_instances(intent.gpu_uuid)
        except NvmlError as e:
            log.info("reading GPU %s failed (%s); reading it again under its lock", intent.gpu_uuid, e)
        try:
            with self._gpu_locks.hold(intent.gpu_uuid):
                return self.nvml.gpu_instances(intent.gpu_uuid)
        except NvmlError as e:
            raise RealizeError(f"device {intent.device_name}: reading GPU {intent.gpu_uuid} failed: {e}") from e

    # -- unprepare --------------------------------------------------------------------------------

    def _unprepare_claim(self, ref: ClaimRef) -> UnprepareResult:
        store = self._require_store()
        with self._claim_locks.hold(ref.uid):
            record = store.get(ref.uid)
            if record is None:
                # A spec without a record is what an unprepare leaves that released the instances and
                # dropped the record, then could not delete the spec (a read-only CDI directory): this
                # retry finishes it, so it reports as that unprepare would have -- the claim's status
                # cleared (it still says Ready with the destroyed MIG UUID) and MigDevicesUnprepared.
                devices = read_cdi_spec_device_names(self.cdi_dir, self.driver_name, ref.uid)
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
        error = self._release_record(record)
        if error is not None:
            raise error

    def _release_record(self, record: ClaimRecord) -> ReleaseError | None:
        """Destroy every instance ``record`` names, last device first, recording each step; then drop the
        record, or keep what is left of it as PrepareStarted.  The first device's error (None: all released).

        The release path of a claim, as :meth:`_prepare_claim` is its creation: the record is marked
        PrepareStarted (being released) before anything is destroyed, and per device, under its GPU's
        lock, each NVML step of :mod:`~kubeletplugin.prepare.mig_instances` is followed by the write of
        what the device's record must say next:

            exclusive: identity proven (find_instance_to_release) → checkpoint: the GI alone
                       → its CIs, then the GI destroyed (destroy_instance)
            share:     its own CI destroyed (destroy_share_compute_instance) → checkpoint: the GI alone
                       → the GI destroyed if no other record names it (destroy_shared_gpu_instance_if_last)

        So a failure or a kill -9 between two steps never leaves a record naming an instance that no
        longer exists (an exclusive GI whose recorded CI is gone would look foreign, and stay; a share's
        CI placement may be another share's next), nor one that forgets an instance that does.  Start-up
        recovery rolls records back through this too.  A device that NVML refuses to release (in use) or
        whose GPU's lock times out is kept as last recorded; the other devices are still released.  The
        caller holds the claim's lock.
        """
        store = self._require_store()
        if record.state is not ClaimState.PREPARE_STARTED:
            store.put(record.model_copy(update={"state": ClaimState.PREPARE_STARTED}))
        remaining: list[DeviceRecord] = []
        first_error: ReleaseError | None = None
        for index in reversed(range(len(record.devices))):
            device = record.devices[index]
            intent = device.intent
            try:
                with (
                    log_context(claim_uid=record.claim_uid, claim=record.label, gpu_uuid=intent.gpu_uuid),
                    self._gpu_locks.hold(intent.gpu_uuid),
                ):
                    if intent.admin_access or not intent.is_mig:
                        continue  # admin access and whole GPUs created nothing
                    if intent.is_share and device.gpu_instance_id is None and not device.creation_requested:
                        # It stopped before it either asked NVML for a GI or joined one: nothing of it
                        # exists, and a GI at its placement is another share's (or not migdra's).
                        log.info("device %s: the share never had an instance; nothing to release", intent.device_name)
                        continue
                    if intent.is_share and device.gpu_instance_id is not None:
                        others = [r for r in store.records() if r.claim_uid != record.claim_uid]
                        released = destroy_share_compute_instance(self.nvml, device, others)
                        if released is None:
                            continue  # the shared GI is gone: nothing of the share is left
                        device = self._record_release_step(record.claim_uid, index, device, released)
                        destroy_shared_gpu_instance_if_last(self.nvml, device, others)
                    else:  # exclusive, or a share whose GI's ID was never recorded (its GI, if any, is empty)
                        release = find_instance_to_release(self.nvml, device)
                        if release is None:
                            continue  # nothing of migdra's stands there
                        device = self._record_release_step(record.claim_uid, index, device, release.device)
                        destroy_instance(self.nvml, release)
            except (ReleaseError, LockTimeoutError) as e:
                log.error("claim %s (UID %s): %s", record.label, record.claim_uid, e.message)
                remaining.insert(0, device)
                first_error = first_error or (
                    e if isinstance(e, ReleaseError) else ReleaseError(e.message, names_claim=e.names_claim)
                )
        if first_error is None:
            store.drop(record.claim_uid)
        else:
            store.put(record.model_copy(update={"state": ClaimState.PREPARE_STARTED, "devices": tuple(remaining)}))
        return first_error

    def _record_release_step(self, claim_uid: str, index: int, device: DeviceRecord, now: DeviceRecord) -> DeviceRecord:
        """Device ``index`` of the claim's record as it is ``now``, written when it changed.  A failed write
        raises before the device's next NVML step, so nothing is destroyed that the record does not
        account for; the device stays as last recorded, which the next release starts from."""
        if now != device:
            self._require_store().update_device(claim_uid, index, now)
        return now

    # -- realize before bind (kubeletplugin.realize_before_bind) ---------------------------------

    def realized_ahead(self) -> tuple[ClaimRecord, ...]:
        """The records realized ahead that kubelet has not claimed yet (the checkpoint as it is now)."""
        return tuple(record for record in self._require_store().records() if record.realized_ahead)

    def release_realized_ahead(self, ref: ClaimRef, confirm: Callable[[ClaimRecord], bool]) -> bool:
        """Unprepare a claim realized ahead that kubelet never claimed, if ``confirm(record)`` -- a fresh
        read of the API, made under the claim's lock -- still says no pod will get it; True when released.

        Under the claim's lock, so it never races kubelet's prepare of the claim: whichever comes
        second sees what the first did (a claimed record is not released; a released one is prepared
        anew from the claim).  ``confirm`` raising (a failed read) releases nothing.  A release that
        fails keeps what is left as ``PrepareStarted``, still realized ahead, and raises.
        """
        store = self._require_store()
        with (
            log_context(claim_uid=ref.uid, claim=claim_namespaced_name(ref)),
            self._call(),
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

    @contextmanager
    def _call(self) -> Iterator[None]:
        """Count a running call, so that :meth:`close` waits for it (a one-claim call runs in the
        caller's thread, which the worker pool's shutdown does not wait for)."""
        with self._calls_changed:
            self._calls += 1
        try:
            yield
        finally:
            with self._calls_changed:
                self._calls -= 1
                self._calls_changed.notify_all()

    def prepared_instances(self) -> list[MigInstance]:
        """Every MIG instance a claim's record says migdra created, with its identity (the metrics'
        ``migdra_mig_instance_info``); read at scrape time, so it is never stale.  Admin-access devices
        and whole GPUs create nothing and are not listed; an instance being created is listed once its
        MIG UUID is recorded."""
        return [
            MigInstance(
                gpu_uuid=device.intent.gpu_uuid,
                mig_uuid=device.mig_uuid,
                profile=device.intent.profile_name or "",
                gpu_instance_id=device.gpu_instance_id,
                compute_instance_id=device.compute_instance_id,
                placement_start=device.intent.placement.start,
                placement_size=device.intent.placement.size,
                namespace=record.namespace,
                claim=record.name,
                claim_uid=record.claim_uid,
                share_id=(device.intent.share_id or "") if device.intent.is_share else "",
                compute_slices=device.intent.share_size if device.intent.is_share else None,
            )
            for record in self._require_store().records()
            for device in record.devices
            if device.owns_instance
            and device.mig_uuid is not None
            and device.gpu_instance_id is not None
            and device.compute_instance_id is not None
            and device.intent.placement is not None
        ]

    def owned(self) -> OwnedInstances:
        """The GPU instances migdra created and still records, by ID or, while NVML is being asked, by
        placement -- from one read of the records (for the publisher; see docs/prepare.md, "What the
        slice publisher is told").  Includes a GI whose prepare is still running."""
        return self._require_store().owned()

    def live_shares(self) -> int:
        """Devices of the checkpoint that are shares of a shared GPU instance (for the publisher)."""
        return self._require_store().live_shares()

    def share_compute_instances(self) -> dict[tuple[str, int, Placement], tuple[Placement, ...]]:
        """The CI placements shares hold in each shared GI (for the publisher: the sizes still placeable)."""
        return self._require_store().share_compute_instances()

    def checkpoint_write_stats(self) -> CheckpointWriteStats:
        """The checkpoint's disk work done by this process so far (the prepare benchmark reads it)."""
        return self._require_store().write_stats()

    def flush_reports(self, timeout: float = 10.0) -> bool:
        """Wait until queued claim status writes and Events are done (tests, shutdown)."""
        return self._reporter.flush(timeout)

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

    def _crash(self, point: CrashPoint) -> None:
        """TESTS ONLY: at the configured crash point, die as ``kill -9`` does (no handler, no ``finally``)."""
        if self._crash_at is not None and point is self._crash_at:
            log.warning("test crash point %s reached: killing this process with SIGKILL", point.value)
            for handler in logging.getLogger().handlers:
                handler.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    def _require_store(self) -> CheckpointStore:
        if self._store is None:
            raise RuntimeError("PrepareService.start() must run before prepare/unprepare calls")
        return self._store


class _GpuInstanceLeft(RealizeError):
    """A device's prepare failed after its GI existed, and destroying the GI failed too: ``device`` is
    the device as recorded, with that GI's ID, so the record keeps naming it for a retry."""

    def __init__(self, message: str, device: DeviceRecord) -> None:
        super().__init__(message)
        self.device = device


def _group_by_device(devices: Sequence[AllocatedDevice]) -> dict[str, tuple[tuple[str, ...], bool]]:
    """Results per device name (a device listed twice is one instance): its requests, admin-only?"""
    requests: dict[str, list[str]] = {}
    admin: dict[str, bool] = {}
    for device in devices:
        requests.setdefault(device.device_name, [])
        if device.request not in requests[device.device_name]:
            requests[device.device_name].append(device.request)
        admin[device.device_name] = admin.get(device.device_name, True) and device.admin_access
    return {name: (tuple(reqs), admin[name]) for name, reqs in requests.items()}


def _shares_by_device(devices: Sequence[AllocatedDevice]) -> dict[str, tuple[str, int]]:
    """(shareID, compute slices) per device name of the results that are shares.  One share per device
    per claim: two shares of one device in one claim are refused (one CDI device per device name)."""
    shares: dict[str, tuple[str, int]] = {}
    for device in devices:
        if device.share_id is None or device.share_size is None:
            continue
        known = shares.setdefault(device.device_name, (device.share_id, device.share_size))
        if known[0] != device.share_id:
            raise DeviceResolutionError(
                f"status.allocation.devices.results[{device.position}].shareID: device {device.device_name} is "
                f"allocated to this claim twice (shares {known[0]} and {device.share_id}); migdra prepares one "
                "share of a device per claim"
            )
    return shares


def _intent_of(
    target: DeviceTarget,
    requests: tuple[str, ...],
    admin_access: bool,
    env: dict[str, str],
    share: tuple[str, int] | None = None,
) -> DeviceIntent:
    profile = target.profile
    return DeviceIntent(
        device_name=target.device_name,
        request_names=requests,
        admin_access=admin_access,
        gpu_uuid=target.gpu_uuid,
        gpu_minor=target.gpu_minor,
        profile_id=profile.profile_id if profile is not None else None,
        profile_name=target.profile_name,
        placement=target.placement,
        multiprocessor_count=profile.multiprocessor_count if profile is not None else None,
        memory_bytes=profile.memory_size_mb << 20 if profile is not None else None,
        env=env,
        share_id=share[0] if share is not None else None,
        share_size=share[1] if share is not None else None,
    )
