"""What kube-apiserver does to every Secret it decodes: ``stringData`` folded into ``data``, ``type`` defaulted.

``stringData`` is a write-only convenience of the v1 API: kube's conversion to the internal type copies
each entry into ``data`` (overwriting a key present in both) and the field is never stored, so a client
reading the Secret back finds only base64 ``data``.  ``SetDefaults_Secret`` fills ``type: Opaque``.
``registry.py`` hooks :func:`default_secret` onto the ``secrets`` entry; no other rule of kube's secret
strategy (key names, sizes, per-type required keys, immutability) is applied here.
"""

from __future__ import annotations

import base64
from typing import Any

DEFAULT_TYPE = "Opaque"
"""kube's ``v1.SecretTypeOpaque``."""


def default_secret(secret: dict[str, Any]) -> None:
    """Fold ``stringData`` into ``data`` (base64, as JSON carries ``[]byte``) and default ``type``, in place."""
    string_data = secret.pop("stringData", None)
    if isinstance(string_data, dict) and string_data:
        data = secret.get("data")
        if not isinstance(data, dict):
            data = secret["data"] = {}
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
    if not secret.get("type"):
        secret["type"] = DEFAULT_TYPE
