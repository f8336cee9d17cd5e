"""What kube-apiserver's pod registry does that no other kind here needs: defaults and graceful deletion.

Clients (kubectl, controllers, migdra's own components) are written against kube-apiserver, which
fills in a pod's defaults when it decodes one and deletes bound pods *gracefully*: the pod gets a
``deletionTimestamp`` and stays until the kubelet has stopped its containers and deletes it with a zero
grace period.  A server that stored pods as sent and deleted them at once would hide bugs that show up
only against a real cluster (a scheduler that reads ``requests`` the client left in ``limits``, a
controller that forgets pods are ``Terminating`` for a while).  This module holds the two pod-specific
rules as plain functions; ``registry.py`` hooks them onto the ``pods`` entry and ``operations.py`` calls
them, so the generic verbs stay kind-agnostic.

Only the defaults listed in :data:`SPEC_DEFAULTS` and the requests-from-limits copy are applied; the
rest of ``SetDefaults_Pod`` (image pull policy, termination message path, protocols, pod-level resources,
...) is not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS = 30
"""kube's ``v1.DefaultTerminationGracePeriodSeconds``."""

SPEC_DEFAULTS: Mapping[str, Any] = {
    "restartPolicy": "Always",
    "terminationGracePeriodSeconds": DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS,
    "schedulerName": "default-scheduler",
    "dnsPolicy": "ClusterFirst",
    "enableServiceLinks": True,
}
"""The ``spec`` fields ``SetDefaults_PodSpec`` fills in when they are unset (absent or ``null``)."""

_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def default_pod(pod: dict[str, Any]) -> None:
    """Fill in a decoded pod's defaults in place, as kube's ``SetDefaults_Pod``/``SetDefaults_PodSpec``.

    kube defaults every pod it decodes (create, update and patch alike), so a client that reads a pod
    back always sees the same spec it would see from a cluster.  ``null`` counts as unset, as it does
    for Go's pointer fields.  Each container's and init container's ``resources.limits`` entries that
    ``resources.requests`` lacks are copied there: the scheduler and DRA's extended-resource mapping
    read requests, and users often write only limits (``nvidia.com/mig-1g.10gb: 1``).  Ephemeral
    containers are left alone, as kube does (they have no resources).
    """
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        spec = pod["spec"] = {}
    for key, value in SPEC_DEFAULTS.items():
        if spec.get(key) is None:
            spec[key] = value
    for list_name in ("containers", "initContainers"):
        for container in spec.get(list_name) or []:
            if isinstance(container, dict):
                _default_requests_from_limits(container)


def _default_requests_from_limits(container: dict[str, Any]) -> None:
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return
    limits = resources.get("limits")
    if not isinstance(limits, dict) or not limits:
        return
    requests = resources.get("requests")
    if not isinstance(requests, dict):
        requests = resources["requests"] = {}
    for name, quantity in limits.items():
        requests.setdefault(name, quantity)


def graceful_delete_period(pod: Mapping[str, Any], requested: int | None) -> int:
    """The grace period a delete of ``pod`` gets: kube's pod strategy ``CheckGracefulDelete``.

    ``requested`` is the DeleteOptions' ``gracePeriodSeconds`` (``None`` when not given); without one the
    pod's ``spec.terminationGracePeriodSeconds`` counts.  A pod that is not bound to a node, or whose
    phase is ``Succeeded`` or ``Failed``, has no running containers for a kubelet to stop, so nobody
    would ever finish its deletion: it gets 0 and is deleted at once.  A negative period means 1 s, as
    in kube.
    """
    spec = pod.get("spec") or {}
    if requested is not None:
        period = requested
    else:
        configured = spec.get("terminationGracePeriodSeconds")
        period = DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS if configured is None else int(configured)
    if not spec.get("nodeName"):
        period = 0
    if (pod.get("status") or {}).get("phase") in _TERMINAL_PHASES:
        period = 0
    return 1 if period < 0 else period
