"""One kube-apiserver for many tests: what a test wrote is deleted after it, so the next starts on the server
as it was when it came up.

Why share: kube-apiserver takes seconds of CPU to start (its bootstrap of roles, priority levels, the
``default`` namespace); a fresh one for each of the hundreds of tests that talk to an API server would
cost the suite minutes.  Why reset by discovery, not by a list of kinds: a test that writes a kind nobody
listed would leak it into the next test.  Every resource the server serves that can be listed and deleted
is read; every object not in the baseline taken after start-up is deleted -- finalizers stripped first
(there is no controller here to honour them), pods without grace (there is no kubelet to confirm them),
namespaces finalized by hand (there is no namespace controller).  The reset then checks that nothing
remains, so a leak fails the test that left it, not a later one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.waiting import wait_for

Key = tuple[str, str, str]
"""(resource path, namespace, name) of one object."""

APISERVER_IDENTITY_LABEL = "apiserver.kubernetes.io/identity"
"""kube-apiserver's own leases (kube-system): written by the server itself, renewed for ever."""


@dataclass(frozen=True)
class Resource:
    """One listable, deletable resource: its collection path for all namespaces, and whether it is namespaced."""

    group_version_path: str  # /api/v1 or /apis/<group>/<version>
    name: str
    namespaced: bool

    def list_path(self) -> str:
        return f"{self.group_version_path}/{self.name}"

    def object_path(self, namespace: str, name: str) -> str:
        if self.namespaced:
            return f"{self.group_version_path}/namespaces/{namespace}/{self.name}/{name}"
        return f"{self.group_version_path}/{self.name}/{name}"


def _call(
    api: client.ApiClient, method: str, path: str, body: Any = None, content_type: str = "application/json"
) -> Any:
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type
    request = api.param_serialize(
        method=method, resource_path=path, header_params=headers, body=body, auth_settings=["BearerToken"]
    )
    response = api.call_api(*request, _request_timeout=30)
    payload = response.read()  # type: ignore[no-untyped-call]
    if not 200 <= response.status <= 299:
        raise ApiException.from_response(http_resp=response, body=None, data=None)
    return json.loads(payload or b"null")


def _get(api: client.ApiClient, path: str) -> dict[str, Any]:
    body: dict[str, Any] = _call(api, "GET", path)
    return body


def _send(api: client.ApiClient, path: str, method: str, body: Any, content_type: str = "application/json") -> None:
    _call(api, method, path, body, content_type)


def discover(api: client.ApiClient) -> list[Resource]:
    """Every resource of every served group's preferred version that can be listed and deleted."""
    versions = ["/api/v1"]
    for group in _get(api, "/apis")["groups"]:
        versions.append(f"/apis/{group['preferredVersion']['groupVersion']}")
    found: list[Resource] = []
    for version in versions:
        for resource in _get(api, version)["resources"]:
            verbs = set(resource.get("verbs", ()))
            if "/" in resource["name"] or not {"list", "delete"} <= verbs:
                continue  # a subresource, or nothing a test could leave behind
            found.append(Resource(version, resource["name"], bool(resource["namespaced"])))
    return found


def _objects(api: client.ApiClient, resource: Resource) -> Iterator[tuple[Key, dict[str, Any]]]:
    for item in _get(api, resource.list_path()).get("items", []):
        metadata = item["metadata"]
        yield (resource.list_path(), metadata.get("namespace", ""), metadata["name"]), metadata


def _servers_own(metadata: dict[str, Any]) -> bool:
    return APISERVER_IDENTITY_LABEL in (metadata.get("labels") or {})


class ServerReset:
    """The objects of a server right after start-up (:meth:`take_baseline`); :meth:`reset` deletes the rest."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.resources = discover(api)
        self.baseline: set[Key] = set()

    def take_baseline(self) -> None:
        self.baseline = set(self.current())

    def current(self) -> dict[Key, dict[str, Any]]:
        found: dict[Key, dict[str, Any]] = {}
        for resource in self.resources:
            found.update(_objects(self.api, resource))
        return found

    def leftovers(self) -> dict[Key, dict[str, Any]]:
        """What exists now that did not after start-up, but for the server's own leases."""
        return {k: m for k, m in self.current().items() if k not in self.baseline and not _servers_own(m)}

    def reset(self) -> None:
        """Delete every object written since the baseline; namespaces last, finalized by hand."""
        by_path = {r.list_path(): r for r in self.resources}
        namespaces: list[str] = []
        for (path, namespace, name), metadata in self.leftovers().items():
            resource = by_path[path]
            if path == "/api/v1/namespaces":
                namespaces.append(name)
                continue
            self._delete(resource, namespace, name, metadata)
        for name in namespaces:
            self._delete_namespace(name)
        wait_for("the test's objects deleted", lambda: not self.leftovers() or None, timeout=60.0)

    def _delete(self, resource: Resource, namespace: str, name: str, metadata: dict[str, Any]) -> None:
        path = resource.object_path(namespace, name)
        try:
            if metadata.get("finalizers"):
                patch = {"metadata": {"finalizers": None}}
                _send(self.api, path, "PATCH", patch, "application/merge-patch+json")
            _send(self.api, path, "DELETE", {"gracePeriodSeconds": 0, "propagationPolicy": "Background"})
        except ApiException as exc:
            if exc.status != 404:  # gone meanwhile (deleted with its owner): what was wanted
                raise

    def _delete_namespace(self, name: str) -> None:
        path = f"/api/v1/namespaces/{name}"
        try:
            _send(self.api, path, "DELETE", {"gracePeriodSeconds": 0})
            namespace = _get(self.api, path)
            namespace["spec"]["finalizers"] = []
            _send(self.api, f"{path}/finalize", "PUT", namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
