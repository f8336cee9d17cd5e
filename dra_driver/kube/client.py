"""The JSON client of migdra's processes: paths, verbs and the answers they care about.

The one way migdra calls the API server: the node plugin (slices, claims, their status, Events), the
reservation controller and the local cluster's components all use :class:`Client`, over the kinds
below.  Claim status is written by server-side apply (:meth:`Client.apply_status`, docs/claim-status.md).
Why not the official client's typed APIs: some writers read-modify-write whole objects (pod status
in the development cluster), and the typed models drop fields they do not know on the way in and refuse them
on the way out (and the client's ``watch.Watch`` cannot even decode ``resource.k8s.io/v1`` lists: it
looks for a model ``V1ResourceClaim`` that the client calls ``ResourceV1ResourceClaim``); building
them also costs the node plugin CPU on every rescan and seconds of start-up to import.  So objects are
the API server's JSON, and watches are streamed and decoded here.  Requests still go through the
official client's transport (configuration, TLS, tokens: :mod:`dra_driver.kube.config`); failures are
the client's ``ApiException``, classified with :func:`dra_driver.kube.failures.classify_failure`.  The
CLI's one-shot reads (``migdra status``, ``allocate --from-cluster``, ``cel eval --from-cluster``) use
the same client, so a path is built in one place (:meth:`Kind.path`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_driver.kube.config import load_kubeconfig_file, new_api_client

REQUEST_TIMEOUT_SECONDS = 15.0
# Seconds a request may take: a whole request, or (to connect, to read) as the CLI's one-shot reads bound them.
Timeout = float | tuple[float, float]


@dataclass(frozen=True)
class Kind:
    """One served resource as a path: ``/api/v1/pods`` or ``/apis/resource.k8s.io/v1/resourceclaims``."""

    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The collection (``name=None``) or object path; ``namespace=None`` lists across namespaces."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            root += f"/namespaces/{namespace}"
        root += f"/{self.plural}"
        if name is not None:
            root += f"/{name}"
            if subresource is not None:
                root += f"/{subresource}"
        return root


PODS = Kind("", "v1", "pods", namespaced=True, kind="Pod")
NODES = Kind("", "v1", "nodes", namespaced=False, kind="Node")
EVENTS = Kind("", "v1", "events", namespaced=True, kind="Event")
CLAIMS = Kind("resource.k8s.io", "v1", "resourceclaims", namespaced=True, kind="ResourceClaim")
CLAIM_TEMPLATES = Kind("resource.k8s.io", "v1", "resourceclaimtemplates", namespaced=True, kind="ResourceClaimTemplate")
SLICES = Kind("resource.k8s.io", "v1", "resourceslices", namespaced=False, kind="ResourceSlice")
DEVICE_CLASSES = Kind("resource.k8s.io", "v1", "deviceclasses", namespaced=False, kind="DeviceClass")
LEASES = Kind("coordination.k8s.io", "v1", "leases", namespaced=True, kind="Lease")


def _call_json(
    api_client: client.ApiClient,
    method: str,
    path: str,
    *,
    query: dict[str, str | int] | None = None,
    body: dict[str, Any] | list[Any] | None = None,
    timeout: Timeout,
    content_type: str = "application/json",
) -> dict[str, Any]:
    """One request as raw JSON through the client's transport (auth, TLS, timeouts), without its models.

    Why: the client's models drop fields they do not know on the way in and refuse them on the way
    out, so a read-modify-write through them loses what a newer API server added.  A failed answer is
    raised as the client's :class:`ApiException` (so
    :func:`~dra_driver.kube.failures.classify_failure` reads it); an answer that is not JSON raises
    :class:`json.JSONDecodeError`, JSON that is not an object a plain :class:`ValueError`.
    """
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type  # a PATCH names its patch type here
    request = api_client.param_serialize(
        method=method,
        resource_path=path,
        query_params=list((query or {}).items()),
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api_client.call_api(*request, _request_timeout=timeout)
    payload = response.read()  # type: ignore[no-untyped-call]
    if not 200 <= response.status <= 299:
        raise ApiException.from_response(http_resp=response, body=None, data=None)
    document = json.loads(payload or b"null")
    if not isinstance(document, dict):
        raise ValueError(f"{method} {path}: the API server answered with a {type(document).__name__}")
    return document


def status_code(exc: BaseException) -> int | None:
    """The HTTP status of a failed request, or None when the server was not reached."""
    return exc.status if isinstance(exc, ApiException) else None


class Client:
    """Verbs on :class:`Kind` paths over one kubeconfig; safe to share between threads."""

    def __init__(
        self,
        kubeconfig: Path | None = None,
        *,
        timeout: Timeout = REQUEST_TIMEOUT_SECONDS,
        configuration: client.Configuration | None = None,
        api_client: client.ApiClient | None = None,
    ) -> None:
        """From a kubeconfig file, from a configuration already loaded (a pod's service account), or
        over an official API client already made (``api_client``: its transport is shared, and closing
        it stays with whoever made it)."""
        if api_client is not None:
            configuration = api_client.configuration
        elif configuration is None:
            if kubeconfig is None:
                raise ValueError("Client needs a kubeconfig, a configuration or an API client")
            configuration = load_kubeconfig_file(kubeconfig, what=f"kubeconfig {kubeconfig}")
        self.kubeconfig = kubeconfig
        self.timeout = timeout
        self.configuration = configuration
        self._owns_api_client = api_client is None
        self.api_client = api_client if api_client is not None else new_api_client(self.configuration, retries=0)

    @property
    def server(self) -> str:
        """The API server's URL, for messages."""
        return str(self.configuration.host)

    def fork(self) -> Client:
        """A client with its own connection pool (a watch holds a connection for minutes)."""
        return Client(self.kubeconfig, timeout=self.timeout, configuration=self.configuration)

    def close(self) -> None:
        if self._owns_api_client:
            self.api_client.close()  # type: ignore[no-untyped-call]

    def get(self, kind: Kind, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        try:
            return self.read(kind, namespace, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def read(self, kind: Kind, namespace: str | None, name: str) -> dict[str, Any]:
        """The object; a missing one is the server's 404 like any other failure (for a caller that
        reports the server's own words, as the CLI does)."""
        return _call_json(self.api_client, "GET", kind.path(namespace, name), timeout=self.timeout)

    def peek(self, kind: Kind, namespace: str | None = None, *, limit: int = 1) -> tuple[list[dict[str, Any]], str]:
        """The first ``limit`` objects and the list's resourceVersion: one page, to learn whether any are
        left or where to watch from without reading a whole collection."""
        answer = _call_json(self.api_client, "GET", kind.path(namespace), query={"limit": limit}, timeout=self.timeout)
        return list(answer.get("items") or []), str((answer.get("metadata") or {}).get("resourceVersion", ""))

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        *,
        field_selector: str | None = None,
        page_size: int | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        """Every object (of one namespace, or all) and the list's resourceVersion to watch from.

        ``page_size`` asks for pages of that many objects, followed by their ``continue`` tokens (all
        pages are one snapshot); the CLI pages so a cluster's every claim is never one answer.
        """
        query: dict[str, str | int] = {}
        if field_selector:
            query["fieldSelector"] = field_selector
        if page_size is not None:
            query["limit"] = page_size
        items: list[dict[str, Any]] = []
        while True:
            answer = _call_json(self.api_client, "GET", kind.path(namespace), query=query, timeout=self.timeout)
            metadata = answer.get("metadata") if isinstance(answer, dict) else None
            if not isinstance(metadata, dict) or "resourceVersion" not in metadata:
                raise ValueError(f"{kind.path(namespace)}: the server did not answer with a Kubernetes list")
            items += answer.get("items") or []
            token = metadata.get("continue")
            if not token:
                return items, str(metadata["resourceVersion"])
            query["continue"] = str(token)

    def delete_collection(self, kind: Kind, namespace: str | None, *, timeout: float | None = None) -> None:
        """Delete every object of ``kind`` in ``namespace`` with one request (the server may take a
        while for thousands: ``timeout``, else the client's)."""
        _call_json(self.api_client, "DELETE", kind.path(namespace), timeout=timeout or self.timeout)

    def create(self, kind: Kind, body: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """POST ``body`` into its namespace's collection; ``dry_run`` has the server validate it only."""
        namespace = body.get("metadata", {}).get("namespace")
        query: dict[str, str | int] = {"dryRun": "All"} if dry_run else {}
        return _call_json(self.api_client, "POST", kind.path(namespace), query=query, body=body, timeout=self.timeout)

    def create_subresource(
        self, kind: Kind, namespace: str | None, name: str, subresource: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        """POST to an object's subresource (``pods/binding``, ``serviceaccounts/token``): the answer."""
        path = kind.path(namespace, name, subresource)
        return _call_json(self.api_client, "POST", path, body=body, timeout=self.timeout)

    def update(self, kind: Kind, body: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
        """PUT ``body`` (with its resourceVersion: a stale one is a 409 Conflict)."""
        meta = body["metadata"]
        path = kind.path(meta.get("namespace"), meta["name"], subresource)
        return _call_json(self.api_client, "PUT", path, body=body, timeout=self.timeout)

    def merge_patch(
        self, kind: Kind, namespace: str | None, name: str, patch: dict[str, Any], subresource: str | None = None
    ) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386)."""
        return _call_json(
            self.api_client,
            "PATCH",
            kind.path(namespace, name, subresource),
            body=patch,
            timeout=self.timeout,
            content_type="application/merge-patch+json",
        )

    def apply_status(
        self, kind: Kind, body: dict[str, Any], *, field_manager: str, force: bool = False
    ) -> dict[str, Any]:
        """Server-side apply of ``body`` to the object's ``status`` subresource as ``field_manager``.

        ``body`` holds what this manager wants to own and nothing else (the API server merges it with
        what other managers own); ``force`` takes fields another manager holds instead of answering 409.
        JSON is YAML, so the body is sent as ``application/apply-patch+yaml`` without a YAML encoder.
        """
        meta = body["metadata"]
        query: dict[str, str | int] = {"fieldManager": field_manager}
        if force:
            query["force"] = "true"
        return _call_json(
            self.api_client,
            "PATCH",
            kind.path(meta.get("namespace"), meta["name"], "status"),
            query=query,
            body=body,
            timeout=self.timeout,
            content_type="application/apply-patch+yaml",
        )

    def server_version(self) -> str:
        """The API server's ``gitVersion`` (``GET /version``), e.g. ``v1.36.5``."""
        answer = _call_json(self.api_client, "GET", "/version", timeout=self.timeout)
        return str(answer.get("gitVersion", ""))

    def bind(self, namespace: str, pod: str, node: str) -> None:
        """``pods/binding``: the scheduler's one write to a pod (the development cluster's scheduler; no
        part of the product binds)."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self.create_subresource(PODS, namespace, pod, "binding", body)

    def delete(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
    ) -> bool:
        """Delete (only the object with ``uid`` when given); False when it was already gone."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        if uid is not None:
            body["preconditions"] = {"uid": uid}
        try:
            _call_json(self.api_client, "DELETE", kind.path(namespace, name), body=body, timeout=self.timeout)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def watch(
        self, kind: Kind, resource_version: str, *, timeout_seconds: int, field_selector: str | None = None
    ) -> WatchStream:
        """Open a watch after ``resource_version`` (with bookmarks); the server ends it after about
        ``timeout_seconds``.  A refused watch (410 Gone: too old) raises ``ApiException`` here."""
        query: list[tuple[str, str | int]] = [
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", timeout_seconds),
        ]
        if field_selector:
            query.append(("fieldSelector", field_selector))
        request = self.api_client.param_serialize(
            method="GET",
            resource_path=kind.path(None),
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        connect = self.timeout[0] if isinstance(self.timeout, tuple) else self.timeout
        response = self.api_client.call_api(*request, _request_timeout=(connect, timeout_seconds + 15))
        if not 200 <= response.status <= 299:
            body = response.read()  # type: ignore[no-untyped-call]
            response.response.release_conn()
            raise ApiException(status=response.status, reason=f"{response.reason}: {body[:200]!r}")
        return WatchStream(response.response)


class WatchStream:
    """One open watch: iterate for its events (``{"type", "object"}``); :meth:`close` from any thread
    ends the iteration (how a component stops a watch that is waiting for the next event)."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def __iter__(self) -> Iterator[dict[str, Any]]:
        pending = b""
        try:
            for chunk in self._raw.stream(amt=None, decode_content=True):
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            self._raw.release_conn()

    def close(self) -> None:
        self._raw.shutdown()
