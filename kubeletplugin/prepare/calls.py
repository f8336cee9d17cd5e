"""What every claim of a kubelet call needs around its path, in one place: the worker pool, the log
context (claim UID and name), the per-claim metric, and the one mapping of an exception to the claim's
``error`` (naming claim, device and cause) with a Warning Event.

One claim never fails another, and an unexpected exception is a per-claim error too.  The calls running
are counted, so that closing the service waits for them (a one-claim call runs in the caller's thread,
which the worker pool's shutdown does not wait for).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from dra_driver.kubelet.calls import ClaimRef, PrepareResult, UnprepareResult
from dra_driver.logs import log_context
from kubeletplugin.metrics import PrepareMetrics
from kubeletplugin.prepare.claims import claim_namespaced_name, compute_claim_ref_problem
from kubeletplugin.prepare.errors import CheckpointError, NodeFileError, PrepareError, is_file_system_error
from kubeletplugin.prepare.reporter import EVENT_PREPARE_FAILED, EVENT_UNPREPARE_FAILED, ClaimReporter

log = logging.getLogger(__name__)

Result = TypeVar("Result", PrepareResult, UnprepareResult)


class ClaimCalls:
    """Runs the claims of each call (module docstring).  ``describe_file(path)`` names a file of the
    claim's and its role, for an operating system's refusal."""

    def __init__(
        self,
        *,
        workers: int,
        reporter: ClaimReporter,
        metrics: PrepareMetrics | None,
        describe_file: Callable[[object], tuple[str, Path | None]],
    ) -> None:
        self._workers = workers
        self._reporter = reporter
        self._metrics = metrics
        self._describe_file = describe_file
        self._executor: ThreadPoolExecutor | None = None
        self._running = 0
        self._running_changed = threading.Condition()

    def start(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="migdra-prepare")

    def close(self, drain_timeout: float) -> bool:
        """Wait for running calls (at most ``drain_timeout`` s), then stop the pool; False: it was not
        started.  A call still running after that is left to recovery: the kill -9 case."""
        with self._running_changed:
            if not self._running_changed.wait_for(lambda: self._running == 0, drain_timeout):
                log.warning(
                    "closing with %d prepare/unprepare call(s) still running after %.0f s", self._running, drain_timeout
                )
        if self._executor is None:
            return False
        self._executor.shutdown(wait=True)
        self._executor = None
        return True

    @contextmanager
    def running(self) -> Iterator[None]:
        """Count a running call for :meth:`close`."""
        with self._running_changed:
            self._running += 1
        try:
            yield
        finally:
            with self._running_changed:
                self._running -= 1
                self._running_changed.notify_all()

    def each_claim(
        self,
        operation: str,
        claims: Sequence[ClaimRef],
        handle: Callable[[ClaimRef], Result],
        result: Callable[..., Result],
    ) -> dict[str, Result]:
        """Every claim of a call through :meth:`_handle`: the usual call (one pod, one claim) in the
        caller's thread, several on the worker pool.  Claim status writes wait for the call (reporter.py)."""
        if self._executor is None:
            raise RuntimeError("PrepareService.start() must run before prepare/unprepare calls")
        unique = {ref.uid: ref for ref in claims}
        with self.running(), self._reporter.call_in_flight():
            if len(unique) == 1:  # no hand-off to a worker thread and back
                ((uid, ref),) = unique.items()
                return {uid: self._handle(operation, ref, handle, result)}
            futures: dict[str, Future[Result]] = {
                uid: self._executor.submit(self._handle, operation, ref, handle, result) for uid, ref in unique.items()
            }
            return {uid: future.result() for uid, future in futures.items()}

    def _handle(
        self, operation: str, ref: ClaimRef, handle: Callable[[ClaimRef], Result], result: Callable[..., Result]
    ) -> Result:
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
            error = NodeFileError(*self._describe_file(error.filename), error)
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
