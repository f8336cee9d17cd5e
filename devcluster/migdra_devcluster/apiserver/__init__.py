"""A small, strict Kubernetes API server that the official client and ``kubectl`` use unchanged.

It is not kube-apiserver: see ``docs/local-control-plane.md`` for what it implements and what it does
not.  Start it with :class:`LocalAPIServer` (in-process) or ``migdra sim apiserver`` (a process).
"""

from __future__ import annotations

from migdra_devcluster.apiserver.server import LocalAPIServer

__all__ = ["LocalAPIServer"]
