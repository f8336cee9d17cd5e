"""HTTP: request parsing, authentication, routing to operations, and writing responses and watch streams.

Every error leaves here as a Kubernetes ``Status`` body with the matching HTTP code.  Watches are
chunked HTTP/1.1 responses of newline-delimited JSON events, written by the request's own thread from
its :class:`Watcher` queue, so a slow client never blocks a writer.  Connections are kept alive, as
client-go and urllib3 expect.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import select
import socket
import ssl
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from migdra_devcluster.apiserver import discovery, protobuf_body
from migdra_devcluster.apiserver.auth import ANONYMOUS, TokenAuthenticator, UserInfo
from migdra_devcluster.apiserver.authz import RbacAuthorizer, RequestAttributes, request_verb
from migdra_devcluster.apiserver.conversion import from_storage
from migdra_devcluster.apiserver.errors import (
    ApiError,
    BadRequest,
    Gone,
    MethodNotAllowed,
    NotAcceptable,
    NotFound,
    UnsupportedMediaType,
)
from migdra_devcluster.apiserver.openapi import OpenAPIV3
from migdra_devcluster.apiserver.openapi_v2 import OpenAPIV2
from migdra_devcluster.apiserver.operations import DeleteOptions, Operations, WriteOptions
from migdra_devcluster.apiserver.registry import Registry, ResourceType
from migdra_devcluster.apiserver.routes import ResourceRoute, parse_resource_path
from migdra_devcluster.apiserver.selectors import parse_field_selector, parse_label_selector
from migdra_devcluster.apiserver.tables import to_table, wants_table
from migdra_devcluster.apiserver.watch import BOOKMARK, ERROR, Watcher, encode_event

log = logging.getLogger(__name__)
_UNAUTHENTICATED_PATHS = frozenset({"/healthz", "/livez", "/readyz"})
_DEFAULT_WATCH_TIMEOUT = 1800.0
_POLL = 0.5


@dataclass
class ApiContext:
    """What request handlers share: the resource table, the verbs, and serving settings."""

    registry: Registry
    operations: Operations
    authenticator: TokenAuthenticator | None
    authorizer: RbacAuthorizer | None
    bookmark_interval: float
    watch_max_pending: int
    openapi: OpenAPIV3 = field(init=False)
    openapi_v2: OpenAPIV2 = field(init=False)
    stopping: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.openapi = OpenAPIV3(self.registry)
        self.openapi_v2 = OpenAPIV2(self.registry)


class ApiHTTPServer(ThreadingHTTPServer):
    """A threaded HTTP server that tracks its connections so :meth:`close_connections` can end them."""

    daemon_threads = False  # joined by server_close(), after close_connections() ends idle ones
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], context: ApiContext, tls: ssl.SSLContext | None = None) -> None:
        self.context = context
        self.tls = tls
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, ApiRequestHandler)

    def get_request(self) -> tuple[socket.socket, Any]:
        """Accept; with TLS, wrap without handshaking so a slow client cannot stall the accept loop."""
        connection, address = self.socket.accept()
        if self.tls is not None:
            connection = self.tls.wrap_socket(connection, server_side=True, do_handshake_on_connect=False)
        return connection, address

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client dropping its connection is normal; anything else is logged with its traceback."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError, ssl.SSLError)):
            log.debug("connection from %s closed abruptly", client_address)
        else:
            log.exception("unexpected error on the connection from %s", client_address)

    def close_connections(self) -> None:
        """Shut down every open connection so idle keep-alive threads end."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):  # already closed by the client
                connection.shutdown(socket.SHUT_RDWR)


def _single(query: dict[str, list[str]], name: str, default: str = "") -> str:
    values = query.get(name)
    return values[0] if values else default


def _flag(query: dict[str, list[str]], name: str) -> bool:
    return _single(query, name).lower() in ("true", "1")


class ApiRequestHandler(BaseHTTPRequestHandler):
    """One connection's requests."""

    protocol_version = "HTTP/1.1"
    server_version = "migdra-local-apiserver"
    # Headers and body go out in separate writes; with Nagle's algorithm on, each response would wait
    # for the client's delayed ACK (~40 ms).
    disable_nagle_algorithm = True

    def setup(self) -> None:
        """Finish the TLS handshake in this connection's own thread."""
        if isinstance(self.request, ssl.SSLSocket):
            self.request.do_handshake()
        super().setup()

    server: ApiHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Access log at DEBUG through logging instead of stderr."""
        log.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        """GET: discovery, OpenAPI, get, list, watch."""
        self._handle("GET")

    def do_POST(self) -> None:
        """POST: create, pods/binding."""
        self._handle("POST")

    def do_PUT(self) -> None:
        """PUT: update, status update."""
        self._handle("PUT")

    def do_PATCH(self) -> None:
        """PATCH: JSON, merge and strategic-merge patches."""
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        """DELETE: delete, deletecollection."""
        self._handle("DELETE")

    # -- plumbing ----------------------------------------------------------------------------------

    @property
    def context(self) -> ApiContext:
        """The server's shared context."""
        return self.server.context

    def _handle(self, method: str) -> None:
        self.warnings: list[str] = []
        self.user: UserInfo = ANONYMOUS
        self.streaming = False
        url = urlsplit(self.path)
        query = parse_qs(url.query, keep_blank_values=True)
        try:
            raw = self._read_body()
            if url.path not in _UNAUTHENTICATED_PATHS and self.context.authenticator is not None:
                self.user = self.context.authenticator.authenticate(self.headers.get("Authorization"))
            self._route(method, url.path.rstrip("/") or "/", query, raw)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # any bug must still answer with a Status, and be logged loudly
            if self.streaming:  # a watch's headers are out: no Status can follow, only a closed stream
                log.exception("watch stream failed: %s %s", method, self.path)
                self.close_connection = True
            elif isinstance(exc, ApiError):
                self._send_json(exc.code, exc.to_status())
            else:
                log.exception("internal error serving %s %s", method, self.path)
                self._send_json(500, ApiError(f"Internal error occurred: {exc}").to_status())

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError as exc:
            raise BadRequest(f"invalid Content-Length: {exc}") from exc
        return self.rfile.read(length) if length else b""

    def _decode_body(self, raw: bytes, resource: ResourceType | None = None) -> Any:
        """The body as JSON-shaped data.  ``resource``: the kind an object body must be; only such bodies
        may be protobuf (typed clients send objects so), and only for kinds with a field table."""
        if not raw:
            raise BadRequest("the request body is empty")
        content_type = self.headers.get("Content-Type", "application/json")
        media_type = content_type.split(";")[0].strip().lower()
        if media_type == protobuf_body.PROTOBUF and resource is not None and protobuf_body.decodes(resource):
            return protobuf_body.decode_object(raw, resource)
        if "protobuf" in media_type or "cbor" in media_type:
            accepted = ", ".join(protobuf_body.accepted_media_types(resource))
            raise UnsupportedMediaType(
                f"the body of the request was in an unknown format - accepted media types include: {accepted}"
            )
        try:
            if "yaml" in content_type:
                return yaml.safe_load(raw)
            return json.loads(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise BadRequest(f"the request body could not be decoded: {exc}") from exc

    def _send_json(
        self, code: int, obj: Any, content_type: str = "application/json", headers: dict[str, str] | None = None
    ) -> None:
        body = obj if isinstance(obj, bytes) else json.dumps(obj, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache, private")
        for warning in self.warnings:
            self.send_header("Warning", f'299 - "{warning}"'.replace("\n", " "))
        self.end_headers()
        self.wfile.write(body)

    def _check_accept(self) -> None:
        accept = self.headers.get("Accept", "")
        if accept and not any(t in accept for t in ("json", "*/*", "application/*")):
            raise NotAcceptable(f"only application/json is served; the client accepts {accept}")

    # -- routing -----------------------------------------------------------------------------------

    def _route(self, method: str, path: str, query: dict[str, list[str]], raw: bytes) -> None:
        if path in _UNAUTHENTICATED_PATHS:
            self._send_json(200, b"ok", "text/plain; charset=utf-8")
            return
        if method == "GET" and self._serve_discovery(path):
            return
        route = parse_resource_path(self.context.registry, path)
        if route is None:
            raise NotFound("the server could not find the requested resource")
        if route.subresource is not None and route.subresource not in route.resource.subresources:
            raise NotFound("the server could not find the requested resource")
        if self.context.authorizer is not None:
            verb = request_verb(method, route.name, method == "GET" and _flag(query, "watch"))
            self.context.authorizer.check(
                RequestAttributes(self.user, verb, route.resource, route.subresource, route.namespace, route.name)
            )
        self._check_accept()
        if route.name is None:
            self._serve_collection(method, route, query, raw)
        else:
            self._serve_object(method, route, query, raw)

    def _serve_discovery(self, path: str) -> bool:
        registry = self.context.registry
        accept = self.headers.get("Accept", "")
        document: Any = None
        content_type = "application/json"
        if path == "/version":
            document = discovery.SERVER_VERSION
        elif path in ("/api", "/apis"):
            if discovery.wants_aggregated(accept):
                document = discovery.aggregated_discovery(registry, legacy=path == "/api")
                content_type = discovery.AGGREGATED_CONTENT_TYPE
            elif path == "/api":
                host, port = self.server.server_address[:2]
                document = discovery.api_versions(f"{host!s}:{port}")
            else:
                document = discovery.api_group_list(registry)
        elif path == "/api/v1":
            document = discovery.api_resource_list(registry, "", "v1")
        elif path.startswith("/apis/") and path.count("/") == 2:
            document = discovery.api_group(registry, path.split("/")[2])
        elif path.startswith("/apis/") and path.count("/") == 3:
            _, _, group, version = path.split("/")
            document = discovery.api_resource_list(registry, group, version)
        elif path == "/openapi/v2":
            self._serve_openapi_v2(accept)
            return True
        elif path == "/openapi/v3":
            document = self.context.openapi.root()
        elif path.startswith("/openapi/v3/"):
            document = self.context.openapi.document(path.removeprefix("/openapi/v3/"))
        else:
            return False
        if document is None:
            raise NotFound("the server could not find the requested resource")
        self._send_json(200, document, content_type)
        return True

    def _serve_openapi_v2(self, accept: str) -> None:
        """``/openapi/v2`` as kube-openapi's handler answers it: negotiated, with ``ETag`` and ``Vary``,
        and a bare 406 when ``Accept`` names neither JSON nor the gnostic protobuf."""
        content_type = OpenAPIV2.negotiate(accept)
        if content_type is None:
            self._send_json(406, b"", "text/plain; charset=utf-8", {"Vary": "Accept"})
            return
        document = self.context.openapi_v2
        headers = {"Vary": "Accept", "Etag": document.etag()}
        self._send_json(200, document.body(content_type), content_type, headers)

    def _write_options(self, query: dict[str, list[str]]) -> WriteOptions:
        options = WriteOptions(
            field_validation=_single(query, "fieldValidation", "Warn") or "Warn",
            dry_run=_single(query, "dryRun") == "All",
            field_manager=_single(query, "fieldManager") or "",
            force=_single(query, "force") == "true",
        )
        self.warnings = options.warnings
        return options

    def _serve_collection(self, method: str, route: ResourceRoute, query: dict[str, list[str]], raw: bytes) -> None:
        resource, ops = route.resource, self.context.operations
        labels = parse_label_selector(_single(query, "labelSelector"))
        fields = parse_field_selector(_single(query, "fieldSelector"), resource)
        if method == "GET":
            if _flag(query, "watch"):
                self._serve_watch(route, query)
                return
            try:
                limit = int(_single(query, "limit", "0") or 0)
            except ValueError as exc:
                raise BadRequest(f"limit must be an integer: {exc}") from exc
            listing = ops.list_objects(
                resource, route.namespace, labels, fields, limit, _single(query, "continue") or None
            )
            if wants_table(self.headers.get("Accept", "")):
                listing = to_table(resource, listing["items"], listing["metadata"])
            self._send_json(200, listing)
        elif method == "POST":
            if resource.namespaced and route.namespace is None:
                raise MethodNotAllowed("the server does not allow this method on the requested resource")
            body = self._decode_body(raw, resource)
            created = ops.create(resource, route.namespace, body, self._write_options(query))
            self._send_json(201, created)
        elif method == "DELETE":
            options = self._delete_options(query, raw)
            self._send_json(200, ops.delete_collection(resource, route.namespace, labels, fields, options))
        else:
            raise MethodNotAllowed("the server does not allow this method on the requested resource")

    def _serve_object(self, method: str, route: ResourceRoute, query: dict[str, list[str]], raw: bytes) -> None:
        resource, ops = route.resource, self.context.operations
        namespace, name, sub = route.namespace or "", route.name or "", route.subresource
        if sub == "binding":
            if method != "POST":
                raise MethodNotAllowed("the server does not allow this method on the requested resource")
            self._send_json(201, ops.bind(namespace, name, self._decode_body(raw)))
            return
        if method == "GET" and sub is None and _flag(query, "watch"):
            # The old single-object watch form: a collection watch narrowed to this name.
            query = {**query, "fieldSelector": [f"metadata.name={name}"]}
            self._serve_watch(ResourceRoute(resource, route.namespace, None, None), query)
        elif method == "GET":
            obj = ops.get(resource, namespace, name)
            if wants_table(self.headers.get("Accept", "")):
                obj = to_table(resource, [obj], {"resourceVersion": obj["metadata"]["resourceVersion"]})
            self._send_json(200, obj)
        elif method == "PUT":
            options = self._write_options(query)
            body = self._decode_body(raw, resource)
            self._send_json(200, ops.update(resource, namespace, name, body, sub, options))
        elif method == "PATCH":
            options = self._write_options(query)
            patch_type = self.headers.get("Content-Type", "").split(";")[0].strip()
            patch_body = self._decode_body(raw)
            self._send_json(200, ops.patch(resource, namespace, name, patch_type, patch_body, sub, options))
        elif method == "DELETE" and sub is None:
            self._send_json(200, ops.delete(resource, namespace, name, self._delete_options(query, raw)))
        else:
            raise MethodNotAllowed("the server does not allow this method on the requested resource")

    def _delete_options(self, query: dict[str, list[str]], raw: bytes) -> DeleteOptions:
        body: dict[str, Any] = {}
        if raw.strip():
            decoded = self._decode_body(raw)
            if not isinstance(decoded, dict):
                raise BadRequest("DeleteOptions must be an object")
            body = decoded
        policy = body.get("propagationPolicy") or _single(query, "propagationPolicy")
        if not policy and (body.get("orphanDependents") is True or _single(query, "orphanDependents") == "true"):
            policy = "Orphan"
        preconditions = body.get("preconditions") or {}
        grace = body.get("gracePeriodSeconds", _single(query, "gracePeriodSeconds") or None)
        dry_run = body.get("dryRun") or query.get("dryRun") or []
        try:
            grace_seconds = int(grace) if grace is not None else None
        except (TypeError, ValueError) as exc:
            raise BadRequest(f"gracePeriodSeconds must be an integer: {exc}") from exc
        return DeleteOptions(
            propagation_policy=policy or "Background",
            grace_period_seconds=grace_seconds,
            precondition_uid=preconditions.get("uid"),
            precondition_resource_version=preconditions.get("resourceVersion"),
            dry_run="All" in dry_run,
        )

    # -- watch -------------------------------------------------------------------------------------

    def _serve_watch(self, route: ResourceRoute, query: dict[str, list[str]]) -> None:
        context, resource = self.context, route.resource
        store = context.operations.store
        version_text = _single(query, "resourceVersion")
        send_initial = _flag(query, "sendInitialEvents")
        try:
            since = None if version_text in ("", "0") or send_initial else int(version_text)
            timeout = float(_single(query, "timeoutSeconds") or _DEFAULT_WATCH_TIMEOUT)
        except ValueError as exc:
            raise BadRequest(f"invalid watch parameter: {exc}") from exc
        watcher = Watcher(
            resource.storage_key,
            route.namespace,
            parse_label_selector(_single(query, "labelSelector")),
            parse_field_selector(_single(query, "fieldSelector"), resource),
            context.watch_max_pending,
            view=None if resource.storage is None else functools.partial(from_storage, resource),
        )
        bookmarks = _flag(query, "allowWatchBookmarks")
        self.streaming = True
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        try:
            initial = store.start_watch(watcher, since)
        except Gone as exc:
            self._write_chunk(encode_event(ERROR, exc.to_status()))
            self._write_chunk(b"")
            return
        try:
            self._stream(watcher, resource.kind, resource.group_version, timeout, bookmarks, send_initial, initial)
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
        finally:
            store.stop_watch(watcher)

    def _stream(
        self,
        watcher: Watcher,
        kind: str,
        api_version: str,
        timeout: float,
        bookmarks: bool,
        send_initial: bool,
        initial: tuple[int, int],
    ) -> None:
        store = self.context.operations.store
        deadline = time.monotonic() + timeout
        interval = self.context.bookmark_interval
        next_bookmark = time.monotonic() + interval
        initial_left, initial_version = initial
        if send_initial and bookmarks and initial_left == 0:
            self._write_chunk(self._bookmark(kind, api_version, initial_version, initial_end=True))
        while not self.context.stopping.is_set():
            now = time.monotonic()
            if now >= deadline:
                break
            event = watcher.next_event(min(_POLL, deadline - now, max(next_bookmark - now, 0.01)))
            if event is not None:
                frames = []
                while event is not None:
                    frame = watcher.render(event)
                    if frame is not None:
                        frames.append(frame)
                    if initial_left:
                        initial_left -= 1
                        if initial_left == 0 and send_initial and bookmarks:
                            frames.append(self._bookmark(kind, api_version, initial_version, initial_end=True))
                    event = watcher.next_event(0) if len(frames) < 256 else None
                if frames:
                    self._write_chunk(b"".join(frames))
                continue
            if watcher.dropped:
                gone = Gone(
                    f"the watch of {watcher.resource_key} fell too far behind and was closed; list and watch again"
                )
                self._write_chunk(encode_event(ERROR, gone.to_status()))
                break
            if watcher.closed:
                break
            if bookmarks and time.monotonic() >= next_bookmark:
                version = store.bookmark_version(watcher)
                if version is not None:
                    self._write_chunk(self._bookmark(kind, api_version, version, initial_end=False))
                next_bookmark = time.monotonic() + interval
            if self._client_gone():
                return
        self._write_chunk(b"")

    @staticmethod
    def _bookmark(kind: str, api_version: str, version: int, *, initial_end: bool) -> bytes:
        metadata: dict[str, Any] = {"resourceVersion": str(version)}
        if initial_end:
            metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
        return encode_event(BOOKMARK, {"kind": kind, "apiVersion": api_version, "metadata": metadata})

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _client_gone(self) -> bool:
        """A watch client that closed its end shows as a readable socket with nothing to read."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            if isinstance(self.connection, ssl.SSLSocket):
                return True  # a watch client sends nothing: readable means close_notify or EOF
            peeked: bytes = self.connection.recv(1, socket.MSG_PEEK)
            return peeked == b""
        except OSError:
            return True
