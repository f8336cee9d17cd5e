"""What a failed request to the API server means and what to do about it: one-line descriptions,
the failure table, backoff and retries.

Owns, for every caller that talks to the API server:

- describing a failed request in one line: the status, reason and message of the ``Status`` the
  server answered with, or the server and why it could not be reached.  Logs and error lines use
  these descriptions, never the client's multi-line dump of headers and body;
- **what to do about a failed request** (:func:`classify_failure`, the one table every writer --
  slice publisher, claim status reporter, realizer, reservation controller -- uses), capped exponential backoff
  with jitter (:class:`BackoffPolicy`), and conflict handling by re-running a whole
  read-modify-write (:func:`retry_conflicts`):

  ================================================  ===========  =====================================
  failure                                           kind         what the caller does
  ================================================  ===========  =====================================
  no answer: refused, reset, timed out, TLS         TRANSIENT    the same request after a backoff
  408, 429 (``Retry-After`` honoured), 5xx but 501  TRANSIENT    the same request after a backoff
  409 Conflict / AlreadyExists, 410 Gone            CONFLICT     read again, recompute, write again
  400, 401, 403, 404, 405, 422, 501, other 4xx      PERMANENT    stop: it fails until someone acts
  anything else (a bug, an NVML error)              ``None``     not an API failure: caller decides
  ================================================  ===========  =====================================

  Why 404 is permanent here: a caller for which "gone" is an answer (a claim deleted, a slice
  already deleted) checks for it before asking this table.  Why an API outage is never permanent:
  the node plugin must keep preparing and unpreparing from its checkpoint while the API server is
  away, and pick up where it was when it comes back.

Must never: decide for a caller what a failure means beyond this table (whether a refused publish
stops the process is the publisher's call).

Errors::

    MigdraError
     └── ApiRequestError        a request failed: an error answer, or the server could not be reached;
                                ``.failure`` says which kind (TRANSIENT and CONFLICT are retryable)
"""

from __future__ import annotations

import enum
import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import urllib3
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from dra_driver.errors import MigdraError

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class ApiFailure(enum.Enum):
    """What a failed request means for the caller; see the table in the module docstring."""

    TRANSIENT = "transient"  # no answer, throttled, or the server failed: the same request, after a backoff
    CONFLICT = "conflict"  # someone wrote in between: read again, recompute, write again
    PERMANENT = "permanent"  # the server refused the request itself: it fails again until someone acts


# 409: Conflict (stale resourceVersion) or AlreadyExists (someone created it first); 410: Gone (a list's
# continue token or a watch's resourceVersion is too old).  Both mean "what you read is out of date".
CONFLICT_STATUS = frozenset({409, 410})
# 408 Request Timeout and 429 Too Many Requests are the server asking for another try; every 5xx is the
# server failing, except 501 Not Implemented, which no retry changes.
TRANSIENT_CLIENT_STATUS = frozenset({408, 429})
PERMANENT_SERVER_STATUS = frozenset({501})


class ApiRequestError(MigdraError):
    """A request to the API server failed; the message is one line naming the server or the answer.

    ``failure`` says what the caller does about it (:class:`ApiFailure`); ``retryable`` is true for
    transient failures and conflicts.
    """

    def __init__(self, message: str, *, retryable: bool = False, failure: ApiFailure | None = None) -> None:
        super().__init__(message)
        self.failure = failure or (ApiFailure.TRANSIENT if retryable else ApiFailure.PERMANENT)
        self.retryable = self.failure is not ApiFailure.PERMANENT


def _first_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def describe_failure(exc: BaseException, server: str | None = None) -> str:
    """One line for a failed request: ``the API server X answered 422 Invalid: <the Status message>``, or
    why the server could not be reached."""
    where = f"the API server {server}" if server else "the API server"
    if isinstance(exc, ApiRequestError):
        return str(exc)
    if isinstance(exc, ApiException) and not exc.status:  # the client's own: TLS failed, or no request made
        return f"cannot reach {where}: {_first_line(Exception(exc.reason or 'no answer'))}"
    if isinstance(exc, ApiException):
        return f"{where} answered {describe_api_exception(exc)}"
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        exc = exc.reason
    if isinstance(exc, urllib3.exceptions.NewConnectionError):
        reason = str(exc).rpartition(": ")[2] or str(exc)
        return f"cannot reach {where}: {reason}"
    if isinstance(exc, urllib3.exceptions.ConnectTimeoutError):
        return f"cannot reach {where}: connection timed out"
    if isinstance(exc, urllib3.exceptions.ReadTimeoutError):
        return f"{where} did not answer in time"
    if isinstance(exc, urllib3.exceptions.SSLError):
        return f"cannot reach {where}: TLS: {_first_line(exc)}"
    if isinstance(exc, (urllib3.exceptions.HTTPError, OSError)):
        return f"cannot reach {where}: {_first_line(exc)}"
    return f"{type(exc).__name__}: {_first_line(exc)}"


def describe_api_exception(exc: ApiException) -> str:
    """``<status> <reason>: <message>`` from the ``Status`` body kube sends, without headers or the body."""
    reason, message = exc.reason or "", ""
    try:
        status = json.loads(exc.body) if exc.body else None
    except (TypeError, ValueError):
        status = None
    if isinstance(status, dict):
        reason = str(status.get("reason") or reason)
        message = str(status.get("message") or "")
    text = f"{exc.status} {reason}".strip()
    return f"{text}: {_first_line(Exception(message))}" if message else text


def status_of(exc: BaseException) -> dict[str, Any]:
    """The ``Status`` object a failed request answered with (``{}`` when there is none)."""
    if not isinstance(exc, ApiException) or not exc.body:
        return {}
    try:
        status = json.loads(exc.body)
    except ValueError:
        return {}
    return status if isinstance(status, dict) else {}


def is_transport_failure(exc: BaseException) -> bool:
    """The request never got an answer (refused, reset, timed out, TLS); the server may come back."""
    return isinstance(exc, (urllib3.exceptions.HTTPError, OSError))


def as_request_error(exc: BaseException, what: str, server: str | None = None) -> ApiRequestError:
    """``what`` failed, as an :class:`ApiRequestError` carrying one line and what to do about it."""
    return ApiRequestError(
        f"{what}: {describe_failure(exc, server)}", failure=classify_failure(exc) or ApiFailure.PERMANENT
    )


# -- what to do about a failed request -----------------------------------------------------------------


def classify_failure(exc: BaseException) -> ApiFailure | None:
    """The kind of a failed request (the table in the module docstring); None when ``exc`` is not one.

    None means the exception did not come from a request -- a bug, an NVML error -- and the caller
    decides (the publisher counts it as a failed round, the status reporter retries a few times).
    """
    if isinstance(exc, ApiRequestError):
        return exc.failure
    if isinstance(exc, ApiException):
        status = exc.status
        if not status:
            # The client raises status 0 for a TLS failure (no answer: transient, a server may be
            # mid-restart with a new certificate) and for a request it could not even build (ours).
            return ApiFailure.TRANSIENT if str(exc.reason or "").startswith("SSLError") else ApiFailure.PERMANENT
        if status in CONFLICT_STATUS:
            return ApiFailure.CONFLICT
        if status in TRANSIENT_CLIENT_STATUS or (500 <= status <= 599 and status not in PERMANENT_SERVER_STATUS):
            return ApiFailure.TRANSIENT
        return ApiFailure.PERMANENT
    if is_transport_failure(exc):
        return ApiFailure.TRANSIENT
    return None


def retry_after_seconds(exc: BaseException) -> float | None:
    """The server's ``Retry-After`` (seconds) on a 429 or 503, if it sent one."""
    headers = getattr(exc, "headers", None) if isinstance(exc, ApiException) else None
    value = headers.get("Retry-After") if headers is not None else None
    try:
        seconds = float(value) if value is not None else None
    except (TypeError, ValueError):  # an HTTP date: rare from kube, not worth parsing
        return None
    return seconds if seconds is not None and seconds >= 0 else None


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """Capped exponential backoff with jitter: the n-th wait (from 0) lies between half and all of
    ``min(maximum, initial * 2**n)``.

    Why jitter: after an API server outage every node's plugin would otherwise come back in the same
    second; why never below half: a retry that comes at once after a failure learns nothing.
    """

    initial: float = 0.5
    maximum: float = 30.0

    def __post_init__(self) -> None:
        if not 0 < self.initial <= self.maximum:
            raise ValueError(f"backoff: need 0 < initial ({self.initial}) <= maximum ({self.maximum})")

    def start(self, rng: Callable[[], float] = random.random) -> Backoff:
        """A fresh backoff (its own attempt count) following this policy."""
        return Backoff(self, rng)


class Backoff:
    """The waits of one series of retries; :meth:`reset` after a success.  Not thread-safe: one per loop."""

    def __init__(self, policy: BackoffPolicy, rng: Callable[[], float] = random.random) -> None:
        self.policy = policy
        self._rng = rng
        self.failures = 0

    def next_delay(self, exc: BaseException | None = None) -> float:
        """Seconds to wait before the next attempt; at least the server's ``Retry-After`` (capped)."""
        ceiling = min(self.policy.maximum, self.policy.initial * 2.0 ** min(self.failures, 64))
        self.failures += 1
        delay = ceiling / 2 + self._rng() * ceiling / 2
        asked = retry_after_seconds(exc) if exc is not None else None
        if asked is not None:
            delay = max(delay, min(asked, self.policy.maximum))
        return delay

    def reset(self) -> None:
        self.failures = 0


DEFAULT_CONFLICT_RETRIES = 5


def retry_conflicts(attempt: Callable[[], _T], *, what: str, limit: int = DEFAULT_CONFLICT_RETRIES) -> _T:
    """Run ``attempt`` -- a whole read, modify and write -- again at once while it ends in a conflict.

    Optimistic concurrency: a 409 means someone wrote between our read and our write, so the only
    correct retry reads again and recomputes; waiting would not help.  After ``limit`` conflicts in a
    row the last one is raised, and the caller's backoff takes over (someone keeps writing).
    """
    for number in range(1, limit + 1):
        try:
            return attempt()
        except Exception as exc:
            if classify_failure(exc) is not ApiFailure.CONFLICT or number == limit:
                raise
            log.debug("%s: %s; reading again (conflict %d)", what, describe_failure(exc), number)
    raise AssertionError("unreachable")


def call_with_retries(
    attempt: Callable[[], _T],
    *,
    what: str,
    backoff: Backoff,
    attempts: int | None,
    stop: threading.Event | None = None,
    server: str | None = None,
) -> _T:
    """``attempt`` until it succeeds, for a caller that can wait: conflicts re-run at once
    (:func:`retry_conflicts`), transient failures after the backoff -- at most ``attempts`` times in
    all (None: until ``stop`` is set) -- and a permanent failure at once.

    Raises :class:`ApiRequestError` (one line, naming ``what``) when it gives up; an exception that
    is not an API failure (a bug) is raised as it is.
    """
    number = 0
    while True:
        number += 1
        try:
            return retry_conflicts(attempt, what=what)
        except Exception as exc:
            failure = classify_failure(exc)
            if failure is None:
                raise
            stopping = stop is not None and stop.is_set()
            if failure is ApiFailure.PERMANENT or stopping or (attempts is not None and number >= attempts):
                raise as_request_error(exc, what, server) from exc
            delay = backoff.next_delay(exc)
            log.info("%s: %s; retrying in %.1f s (attempt %d)", what, describe_failure(exc, server), delay, number)
        if stop is not None:
            stop.wait(delay)
        else:
            time.sleep(delay)
