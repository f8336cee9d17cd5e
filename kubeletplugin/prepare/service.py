"""``PrepareService``: NodePrepareResources / NodeUnprepareResources for every claim of a call.

The :class:`~dra_driver.kubelet.calls.DraService` the gRPC layer calls.  It keeps what every claim has
in common: its lifecycle (the checkpoint loaded and start-up recovery run before kubelet is served,
calls drained at shutdown), the locks (per claim and per GPU, across the node's plugin processes), the
claims of a call in and per-claim errors out (:mod:`~kubeletplugin.prepare.calls`).  What happens to
one claim reads top to bottom in :mod:`~kubeletplugin.prepare.claim_path`; each of its devices is
handled by its kind, one module each with the same steps (:mod:`~kubeletplugin.prepare.kinds`:
exclusive MIG device, share of a shared GPU instance, whole GPU, admin access).  docs/prepare.md walks
a prepare of each kind through the files.

Concurrency: the claims of one call, and concurrent calls, run on a small thread pool.  Several
plugin processes may serve the node at once (the two pods of a rolling update), so every lock is
taken in this process *and* across processes (:mod:`~kubeletplugin.prepare.locks`): a claim is
handled by one thread of one process at a time (claim lock), a GPU is mutated by one at a time (GPU
lock), and the checkpoint is re-read and changed under its own lock for each step
(:class:`~kubeletplugin.prepare.checkpoint.CheckpointStore`).  Claims on different GPUs are created
in parallel.  This package never imports ``grpc``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

from dra_driver.kube.client import Client
from dra_driver.kubelet.calls import ClaimRef, PrepareResult, UnprepareResult
from dra_driver.nvml.backend import Nvml
from kubeletplugin.metrics import MigInstance, PrepareMetrics
from kubeletplugin.prepare.calls import ClaimCalls
from kubeletplugin.prepare.cdi import (
    DEFAULT_COMMON_EDITS,
    CommonEdits,
)
from kubeletplugin.prepare.checkpoint import CheckpointStore, read_node_boot_id
from kubeletplugin.prepare.claim_files import ClaimFiles
from kubeletplugin.prepare.claim_path import ClaimPath
from kubeletplugin.prepare.devices import NodeGpus
from kubeletplugin.prepare.driver_files import DriverEdits
from kubeletplugin.prepare.errors import CheckpointError, LockTimeoutError
from kubeletplugin.prepare.kinds import PrepareContext
from kubeletplugin.prepare.locks import LOCKS_DIR, KeyedLocks
from kubeletplugin.prepare.metadata import DeviceAttributeReader
from kubeletplugin.prepare.records import ClaimRecord
from kubeletplugin.prepare.recovery import RecoveryReport, recover_node
from kubeletplugin.prepare.release import release_record
from kubeletplugin.prepare.reporter import ClaimReporter
from kubeletplugin.settings import CrashPoint, PrepareSettings

log = logging.getLogger(__name__)


class PrepareService:
    """Prepares and unprepares claims of one driver on one node.  Thread-safe; see the module docstring.

    Construct with explicit dependencies, then :meth:`start` (loads the checkpoint -- raising
    :class:`~kubeletplugin.prepare.errors.CheckpointError` if it cannot be trusted -- and runs
    start-up recovery, leaving alone what another plugin process is working on) before serving
    kubelet; :meth:`close` at shutdown.  ``state_lock_timeout`` bounds every wait for a lock (the
    claim's, a GPU's, the checkpoint's).  ``on_shares_changed`` is called (by the checkpoint) when a
    record holding shares changed: the shared devices' admitted sizes follow the CI placements recorded.
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
        self._crash_at = crash_at
        self._lock_timeout = state_lock_timeout
        self._metrics = metrics
        self._on_shares_changed = on_shares_changed
        self._reporter = reporter or ClaimReporter(client, driver_name, node_name)
        self._calls = ClaimCalls(
            workers=workers, reporter=self._reporter, metrics=metrics, describe_file=self._files.describe_file
        )
        locks = state_dir / LOCKS_DIR
        self._claim_locks = KeyedLocks(
            locks, prefix="claim-", kind="claim", timeout=state_lock_timeout, remove_files=True
        )
        self._gpu_locks = KeyedLocks(locks, prefix="gpu-", kind="GPU", timeout=state_lock_timeout)
        self._context: PrepareContext | None = None
        self._path: ClaimPath | None = None

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
        context = self._context = PrepareContext(self.nvml, store, self._gpu_locks, self._crash_at)
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
                release=functools.partial(release_record, context),
            )
        except LockTimeoutError as e:
            self._abandon_start()
            raise CheckpointError(f"start-up recovery could not finish: {e.message}") from e
        except BaseException:
            self._abandon_start()
            raise
        self._path = ClaimPath(
            context=context,
            client=self._client,
            gpus=self._gpus,
            files=self._files,
            reporter=self._reporter,
            claim_locks=self._claim_locks,
            driver_name=self.driver_name,
            pool_name=self.pool_name,
            running=self._calls.running,
        )
        self._calls.start()
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
        if self._context is not None:
            self._context.store.close()
            self._context = None

    def close(self, report_timeout: float = 1.0, drain_timeout: float = 60.0) -> None:
        """Stop serving: wait for running calls (at most ``drain_timeout`` s), give queued status writes a
        moment, let go of the files.  A call still running after that is left to recovery: it is the
        kill -9 case, which the checkpoint is built for."""
        if self._calls.close(drain_timeout):
            self._reporter.flush(report_timeout)
        self._reporter.close()
        if self._context is not None:
            self._context.store.close()
            self._context = None
        self._path = None

    def __enter__(self) -> PrepareService:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    # -- DraService: every claim of a call, each through one wrapper (calls.py) -----------------------

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        return self._calls.each_claim("prepare", claims, self._claim_path().prepare, PrepareResult)

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, UnprepareResult]:
        return self._calls.each_claim("unprepare", claims, self._claim_path().unprepare, UnprepareResult)

    def realize_ahead(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        """Prepare ``claims`` before their pods are bound (realize before bind, the realizer's call): the
        prepare path exactly, and the record says *realized ahead* until kubelet's :meth:`prepare`
        returns it (then kubelet owns the unprepare).  A claim already prepared is returned as it is (a
        record kubelet has claimed stays claimed).  Not in the prepare metric: kubelet did not ask."""
        prepare_ahead = functools.partial(self._claim_path().prepare, ahead=True)
        return self._calls.each_claim("realize ahead", claims, prepare_ahead, PrepareResult)

    # -- realize before bind (kubeletplugin.realize_before_bind) ---------------------------------

    def realized_ahead(self) -> tuple[ClaimRecord, ...]:
        """The records realized ahead that kubelet has not claimed yet (the checkpoint as it is now)."""
        return tuple(record for record in self._require_context().store.records() if record.realized_ahead)

    def release_realized_ahead(self, ref: ClaimRef, confirm: Callable[[ClaimRecord], bool]) -> bool:
        """Unprepare a claim realized ahead that kubelet never claimed, if ``confirm(record)`` (a fresh
        read of the API, under the claim's lock) still says no pod will get it; True when released
        (:meth:`~kubeletplugin.prepare.claim_path.ClaimPath.release_realized_ahead`)."""
        return self._claim_path().release_realized_ahead(ref, confirm)

    # -- what the checkpoint says (the publisher, the metrics, the benchmarks and tests read it) -----

    @property
    def checkpoint(self) -> CheckpointStore:
        """The node's claim records (:meth:`start` loads them): what migdra created and still owns."""
        return self._require_context().store

    def flush_reports(self, timeout: float = 10.0) -> bool:
        """Wait until queued claim status writes and Events are done (tests, shutdown)."""
        return self._reporter.flush(timeout)

    def _claim_path(self) -> ClaimPath:
        if self._path is None:
            raise RuntimeError("PrepareService.start() must run before prepare/unprepare calls")
        return self._path

    def _require_context(self) -> PrepareContext:
        if self._context is None:
            raise RuntimeError("PrepareService.start() must run before prepare/unprepare calls")
        return self._context


def mig_instances_of(records: Sequence[ClaimRecord]) -> list[MigInstance]:
    """Every MIG instance ``records`` say migdra created, with its identity.  Admin-access devices and
    whole GPUs create nothing and are not listed; an instance being created is listed once its MIG UUID
    is recorded."""
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
        for record in records
        for device in record.devices
        if device.owns_instance
        and device.mig_uuid is not None
        and device.gpu_instance_id is not None
        and device.compute_instance_id is not None
        and device.intent.placement is not None
    ]


def service_from_settings(
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
    and the driver files found at start-up (``driver_edits``; None: the specs carry none)."""
    return PrepareService(
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
