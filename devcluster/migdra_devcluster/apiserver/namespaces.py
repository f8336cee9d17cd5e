"""What kube-apiserver's namespace strategy does to every Namespace it writes: the
``kubernetes.io/metadata.name`` label, set to the namespace's name on create and on every update.

kube sets it so that a label selector can pick namespaces by name (NetworkPolicy ``namespaceSelector``,
ValidatingAdmissionPolicy ``namespaceSelector``); a client cannot remove or change it.
``registry.py`` hooks :func:`default_namespace` onto the ``namespaces`` entry.
"""

from __future__ import annotations

from typing import Any

NAME_LABEL = "kubernetes.io/metadata.name"
"""kube's ``v1.LabelMetadataName``."""


def default_namespace(namespace: dict[str, Any]) -> None:
    """Set the name label, in place (the name is already known: ``generateName`` is resolved first)."""
    metadata = namespace.setdefault("metadata", {})
    labels = metadata.get("labels")
    if not isinstance(labels, dict):
        labels = metadata["labels"] = {}
    labels[NAME_LABEL] = metadata.get("name", "")
