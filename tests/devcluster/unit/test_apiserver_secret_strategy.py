"""The Secret rules kube-apiserver applies to every Secret it decodes: ``stringData`` into ``data``, ``type``."""

from __future__ import annotations

from typing import Any

import pytest

from migdra_devcluster.apiserver.secrets import default_secret


@pytest.mark.parametrize(
    ("secret", "expected"),
    [
        pytest.param({}, {"type": "Opaque"}, id="type-defaulted"),
        pytest.param({"type": "kubernetes.io/tls"}, {"type": "kubernetes.io/tls"}, id="type-kept"),
        pytest.param(
            {"stringData": {"user": "admin"}},
            {"data": {"user": "YWRtaW4="}, "type": "Opaque"},
            id="string-data-becomes-base64-data",
        ),
        pytest.param(
            {"data": {"user": "b2xk", "keep": "eA=="}, "stringData": {"user": "admin"}},
            {"data": {"user": "YWRtaW4=", "keep": "eA=="}, "type": "Opaque"},
            id="string-data-overwrites-data",
        ),
        pytest.param({"stringData": {}}, {"type": "Opaque"}, id="empty-string-data-dropped"),
    ],
)
def test_default_secret(secret: dict[str, Any], expected: dict[str, Any]) -> None:
    default_secret(secret)
    assert secret == expected
