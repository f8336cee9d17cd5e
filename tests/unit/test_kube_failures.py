"""What a failed Kubernetes API request means, decided in one table for every writer; the backoff and
conflict handling built on it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from dra_driver.kube.failures import (
    ApiFailure,
    ApiRequestError,
    Backoff,
    BackoffPolicy,
    call_with_retries,
    classify_failure,
    describe_failure,
    retry_after_seconds,
    retry_conflicts,
)

TRANSIENT, CONFLICT, PERMANENT = ApiFailure.TRANSIENT, ApiFailure.CONFLICT, ApiFailure.PERMANENT


def answered(status: int, headers: dict[str, str] | None = None) -> ApiException:
    exc = ApiException(status=status, reason="Reason")
    exc.headers = headers
    return exc


def refused() -> urllib3.exceptions.MaxRetryError:
    """What the official client raises when nothing listens: urllib3 gave up on its own retries."""
    pool = urllib3.HTTPConnectionPool("127.0.0.1", 1)
    reason = urllib3.exceptions.NewConnectionError(pool, "Failed to establish a new connection: [Errno 111] refused")
    return urllib3.exceptions.MaxRetryError(pool, "/apis", reason)


CLASSIFICATION: dict[str, tuple[BaseException, ApiFailure | None]] = {
    # no answer at all: the API server is restarting, unreachable or slow
    "connection refused (urllib3 gave up)": (refused(), TRANSIENT),
    "read timeout": (urllib3.exceptions.ReadTimeoutError(None, "/apis", "read timed out"), TRANSIENT),
    "connection reset": (ConnectionResetError(104, "Connection reset by peer"), TRANSIENT),
    "socket timeout": (TimeoutError("timed out"), TRANSIENT),
    "protocol error": (urllib3.exceptions.ProtocolError("Connection aborted."), TRANSIENT),
    "TLS failure (the client's status 0)": (
        ApiException(status=0, reason="SSLError\ncertificate verify failed"),
        TRANSIENT,
    ),
    # the server asks for another try, or failed itself
    "408 request timeout": (answered(408), TRANSIENT),
    "429 too many requests": (answered(429), TRANSIENT),
    "500 internal error": (answered(500), TRANSIENT),
    "502 bad gateway": (answered(502), TRANSIENT),
    "503 unavailable": (answered(503), TRANSIENT),
    "504 gateway timeout": (answered(504), TRANSIENT),
    "507 any other 5xx": (answered(507), TRANSIENT),
    # what we read is out of date: read again, recompute, write again
    "409 conflict or already exists": (answered(409), CONFLICT),
    "410 gone (resourceVersion too old)": (answered(410), CONFLICT),
    # the request itself is refused: the same request fails until someone acts
    "400 bad request": (answered(400), PERMANENT),
    "401 unauthorized": (answered(401), PERMANENT),
    "403 forbidden": (answered(403), PERMANENT),
    "404 not found": (answered(404), PERMANENT),
    "405 method not allowed": (answered(405), PERMANENT),
    "413 too large": (answered(413), PERMANENT),
    "415 unsupported media type": (answered(415), PERMANENT),
    "422 invalid": (answered(422), PERMANENT),
    "501 not implemented": (answered(501), PERMANENT),
    "a request the client could not build (status 0)": (ApiException(status=0, reason="Cannot prepare"), PERMANENT),
    # already classified by whoever raised it
    "ApiRequestError, conflict": (ApiRequestError("slice deleted", failure=CONFLICT), CONFLICT),
    "ApiRequestError, retryable": (ApiRequestError("x", retryable=True), TRANSIENT),
    "ApiRequestError, permanent": (ApiRequestError("x"), PERMANENT),
    # not a request at all: the caller decides
    "a bug": (KeyError("spec"), None),
    "a bad answer": (ValueError("not JSON"), None),
}


@pytest.mark.parametrize(("exc", "kind"), CLASSIFICATION.values(), ids=list(CLASSIFICATION))
def test_classification_table(exc: BaseException, kind: ApiFailure | None) -> None:
    assert classify_failure(exc) is kind


def test_a_request_error_is_retryable_unless_permanent() -> None:
    assert ApiRequestError("x", failure=CONFLICT).retryable
    assert ApiRequestError("x", failure=TRANSIENT).retryable
    assert not ApiRequestError("x", failure=PERMANENT).retryable


@pytest.mark.parametrize(
    ("exc", "line"),
    [
        (refused(), "cannot reach the API server http://k: [Errno 111] refused"),
        (
            ApiException(status=0, reason="SSLError\nbad cert"),
            "cannot reach the API server http://k: SSLError bad cert",
        ),
        (answered(503), "the API server http://k answered 503 Reason"),
    ],
    ids=["refused", "tls", "answered"],
)
def test_failures_are_described_in_one_line(exc: BaseException, line: str) -> None:
    assert describe_failure(exc, "http://k") == line


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [({"Retry-After": "7"}, 7.0), ({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, None), ({}, None), (None, None)],
    ids=["seconds", "http date", "none", "no headers"],
)
def test_retry_after(headers: dict[str, str] | None, seconds: float | None) -> None:
    assert retry_after_seconds(answered(429, headers)) == seconds


def sequence(*values: float) -> Callable[[], float]:
    it = iter(values)
    return lambda: next(it)


def test_backoff_doubles_up_to_the_cap_with_jitter_between_half_and_all() -> None:
    policy = BackoffPolicy(initial=1.0, maximum=8.0)
    lowest = policy.start(rng=lambda: 0.0)
    highest = policy.start(rng=lambda: 1.0)
    assert [lowest.next_delay() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert [highest.next_delay() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_backoff_starts_again_after_a_success() -> None:
    backoff = BackoffPolicy(initial=1.0, maximum=8.0).start(rng=lambda: 1.0)
    backoff.next_delay()
    backoff.next_delay()
    backoff.reset()
    assert backoff.next_delay() == 1.0


def test_backoff_honours_retry_after_but_never_beyond_the_cap() -> None:
    backoff = BackoffPolicy(initial=1.0, maximum=8.0).start(rng=lambda: 1.0)
    assert backoff.next_delay(answered(429, {"Retry-After": "5"})) == 5.0
    assert backoff.next_delay(answered(429, {"Retry-After": "600"})) == 8.0


@pytest.mark.parametrize(("initial", "maximum"), [(0, 1), (2, 1), (-1, 1)])
def test_a_backoff_policy_that_cannot_work_is_refused(initial: float, maximum: float) -> None:
    with pytest.raises(ValueError, match="backoff"):
        BackoffPolicy(initial=initial, maximum=maximum)


class Attempts:
    """An attempt that fails with the given exceptions, then returns ``done``."""

    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "done"


def test_conflicts_are_read_again_at_once_up_to_a_limit() -> None:
    attempt = Attempts(answered(409), answered(409))
    assert retry_conflicts(attempt, what="x", limit=3) == "done"
    assert attempt.calls == 3
    stubborn = Attempts(*(answered(409) for _ in range(5)))
    with pytest.raises(ApiException):
        retry_conflicts(stubborn, what="x", limit=3)
    assert stubborn.calls == 3


def test_conflict_handling_leaves_every_other_failure_to_the_caller() -> None:
    attempt = Attempts(answered(503))
    with pytest.raises(ApiException):
        retry_conflicts(attempt, what="x")
    assert attempt.calls == 1


def fast() -> Backoff:
    return BackoffPolicy(initial=0.001, maximum=0.001).start()


def test_call_with_retries_waits_out_transient_failures() -> None:
    attempt = Attempts(refused(), answered(503), answered(409))
    assert call_with_retries(attempt, what="x", backoff=fast(), attempts=5) == "done"
    assert attempt.calls == 4


def test_call_with_retries_stops_at_once_on_a_permanent_failure_with_one_line() -> None:
    attempt = Attempts(answered(403))
    with pytest.raises(ApiRequestError) as info:
        call_with_retries(attempt, what="deleting ResourceSlices", backoff=fast(), attempts=5, server="http://k")
    assert attempt.calls == 1
    assert str(info.value) == "deleting ResourceSlices: the API server http://k answered 403 Reason"
    assert info.value.failure is PERMANENT


def test_call_with_retries_gives_up_after_its_attempts() -> None:
    attempt = Attempts(*(refused() for _ in range(5)))
    with pytest.raises(ApiRequestError) as info:
        call_with_retries(attempt, what="x", backoff=fast(), attempts=2)
    assert attempt.calls == 2
    assert info.value.retryable


def test_call_with_retries_raises_a_bug_as_it_is() -> None:
    def attempt() -> Any:
        raise KeyError("spec")

    with pytest.raises(KeyError):
        call_with_retries(attempt, what="x", backoff=fast(), attempts=5)
