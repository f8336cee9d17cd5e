"""The API errors this server answers with, each rendered as a Kubernetes ``Status`` body.

Handlers raise these; the HTTP layer turns them into a response in one place (``http.py``).  They
describe what the *client* did wrong (or what it must do), so none is retryable from the server's side
except ``Conflict`` and ``Gone`` (re-read, then try again) and ``TooManyRequests``.

    MigdraError
     ├── ConfigurationError
     │    └── ListenError         the server cannot listen on its host and port (taken, unknown host)
     └── ApiError                 any non-2xx answer; .code, .reason, .details
          ├── BadRequest          400 malformed body, bad selector, bad patch, unknown field (Strict)
          ├── Unauthorized        401 no or unknown bearer token while authentication is on
          ├── Forbidden           403 e.g. creating in a namespace that is being deleted
          ├── NotFound            404 object, namespace or path does not exist
          ├── MethodNotAllowed    405 verb not served by the resource or subresource
          ├── NotAcceptable       406 only representations we do not produce (protobuf, CBOR)
          ├── AlreadyExists       409 create of an existing name
          ├── Conflict            409 stale resourceVersion or failed precondition (retryable)
          ├── Gone                410 watch/continue from a compacted resourceVersion (retryable: relist)
          ├── UnsupportedMediaType 415 a patch or body type we do not implement (server-side apply)
          └── Invalid             422 field validation failed; .details.causes lists each field
"""

from __future__ import annotations

from typing import Any

from dra_driver.errors import ConfigurationError, MigdraError


class ListenError(ConfigurationError):
    """The server cannot listen where its settings say: the port is taken, the host unknown or not local."""


class ApiError(MigdraError):
    """An error answer: HTTP ``code``, Kubernetes ``reason`` and the ``details`` of the object concerned."""

    code: int = 500
    reason: str = "InternalError"

    def __init__(
        self,
        message: str,
        *,
        name: str | None = None,
        group: str | None = None,
        kind: str | None = None,
        causes: list[dict[str, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.name = name
        self.group = group
        self.kind = kind
        self.causes = causes or []

    def to_status(self) -> dict[str, Any]:
        """The ``Status`` body kube-apiserver would send for this error."""
        details: dict[str, Any] = {}
        if self.name is not None:
            details["name"] = self.name
        if self.group:
            details["group"] = self.group
        if self.kind is not None:
            details["kind"] = self.kind
        if self.causes:
            details["causes"] = self.causes
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if details:
            status["details"] = details
        return status


class BadRequest(ApiError):
    """The request cannot be understood: malformed JSON, a bad selector or patch, an unknown field."""

    code = 400
    reason = "BadRequest"


class Unauthorized(ApiError):
    """Authentication is on and the request carried no known bearer token."""

    code = 401
    reason = "Unauthorized"


class Forbidden(ApiError):
    """The request is understood but refused, e.g. new content in a terminating namespace."""

    code = 403
    reason = "Forbidden"


class NotFound(ApiError):
    """The object, its namespace, or the path does not exist."""

    code = 404
    reason = "NotFound"


class MethodNotAllowed(ApiError):
    """The resource or subresource does not serve this verb."""

    code = 405
    reason = "MethodNotAllowed"


class NotAcceptable(ApiError):
    """The client accepts only representations this server does not produce."""

    code = 406
    reason = "NotAcceptable"


class AlreadyExists(ApiError):
    """A create named an object that exists."""

    code = 409
    reason = "AlreadyExists"


class Conflict(ApiError):
    """A stale ``resourceVersion`` or a failed precondition: re-read and retry."""

    code = 409
    reason = "Conflict"
    retryable = True


class Gone(ApiError):
    """A watch or continue token refers to history that was compacted: list again."""

    code = 410
    reason = "Expired"
    retryable = True


class UnsupportedMediaType(ApiError):
    """A request body or patch type this server does not implement."""

    code = 415
    reason = "UnsupportedMediaType"


class Invalid(ApiError):
    """The object failed validation; ``causes`` names each offending field."""

    code = 422
    reason = "Invalid"
