"""``Client.list`` follows a paged list to its end: the CLI's reads page by 500, and a cluster with more
objects than one page must come back whole, with the snapshot's resourceVersion."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dra_driver.kube.client import CLAIMS, Client


class _Answer:
    def __init__(self, document: dict[str, Any]) -> None:
        self.status = 200
        self._payload = json.dumps(document).encode()

    def read(self) -> bytes:
        return self._payload


class _PagingApiClient:
    """Serves ``total`` claims in pages of the asked ``limit``, with ``continue`` tokens as kube does."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.configuration = type("Configuration", (), {"host": "https://api.test"})()
        self.queries: list[dict[str, Any]] = []

    def param_serialize(self, **request: Any) -> tuple[Any, ...]:
        return (request["resource_path"], dict(request["query_params"]))

    def call_api(self, path: str, query: dict[str, Any], **_: Any) -> _Answer:
        self.queries.append(query)
        start = int(query.get("continue", 0))
        end = min(self.total, start + int(query.get("limit", self.total)))
        metadata: dict[str, Any] = {"resourceVersion": "42"}
        if end < self.total:
            metadata["continue"] = str(end)
        items = [{"metadata": {"name": f"claim-{i}"}} for i in range(start, end)]
        return _Answer({"kind": "ResourceClaimList", "metadata": metadata, "items": items})


@pytest.mark.parametrize(
    ("total", "page_size", "requests"),
    [(1201, 500, 3), (500, 500, 1), (0, 500, 1), (7, None, 1)],
    ids=["three-pages", "one-full-page", "empty", "unpaged"],
)
def test_list_follows_continue_tokens_to_the_end(total: int, page_size: int | None, requests: int) -> None:
    api_client = _PagingApiClient(total)
    client = Client(api_client=api_client)  # type: ignore[arg-type]
    items, resource_version = client.list(CLAIMS, page_size=page_size)
    assert [item["metadata"]["name"] for item in items] == [f"claim-{i}" for i in range(total)]
    assert resource_version == "42"
    assert len(api_client.queries) == requests
    if page_size is not None:
        assert all(query["limit"] == page_size for query in api_client.queries)
    else:
        assert all("limit" not in query for query in api_client.queries)


class _NotAListApiClient(_PagingApiClient):
    """A server that answers JSON, but not a Kubernetes list (no metadata): a proxy's page, say."""

    def call_api(self, path: str, query: dict[str, Any], **_: Any) -> _Answer:
        return _Answer({"items": []})


def test_an_answer_that_is_no_list_is_one_line_naming_the_path() -> None:
    client = Client(api_client=_NotAListApiClient(0))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^/apis/resource\.k8s\.io/v1/resourceclaims: the server did not answer"):
        client.list(CLAIMS, page_size=500)
