"""Builders for the API objects of component tests of the local control plane.

Every builder returns a plain JSON dict as a client would send it; nothing here talks to the API
server except :class:`Api`, a thin convenience over :class:`Client` for the reads the tests repeat.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from dra_driver.devicemodel import example_slices
from dra_driver.kube.client import (
    CLAIM_TEMPLATES,
    CLAIMS,
    DEVICE_CLASSES,
    EVENTS,
    NODES,
    PODS,
    SLICES,
    Client,
)
from dra_driver.resourceclaim import ResourceClaimView

DRIVER = "gpu.migdra.io"
NAMESPACE = "default"
H100 = "H100-SXM5-80GB"
MIG_CLASS = "mig.migdra.io"
DEVICECLASS_DIR = Path(__file__).resolve().parents[1] / "deviceclasses"


# -- cluster-scoped objects ---------------------------------------------------------------------


def node(
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    unschedulable: bool = False,
    allocatable: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {"allocatable": dict(allocatable or {"cpu": "64", "memory": "512Gi", "pods": "110"})},
    }


def node_slices(
    node_name: str, gpus: Sequence[str] = (H100,), *, mig_enabled: bool = True, binding: bool = False
) -> list[dict[str, Any]]:
    """What migdra publishes for ``node_name``; ``binding``: every device carries binding conditions."""
    slices = example_slices(list(gpus), mig_enabled, DRIVER, node_name)
    if binding:
        for resource_slice in slices:
            for device in resource_slice["spec"].get("devices") or []:
                device["bindsToNode"] = True
                device["bindingConditions"] = [f"{DRIVER}/realized"]
                device["bindingFailureConditions"] = [f"{DRIVER}/realization-failed"]
    return slices


def migdra_device_classes() -> list[dict[str, Any]]:
    """The DeviceClasses shipped in ``deviceclasses/*.yaml`` (gpu.migdra.io, mig.migdra.io, mig-shared.migdra.io)."""
    return [yaml.safe_load(path.read_text()) for path in sorted(DEVICECLASS_DIR.glob("*.yaml"))]


def profile_class(name: str, profile: str, extended_resource_name: str | None = None) -> dict[str, Any]:
    """A DeviceClass for one MIG profile (exclusive devices, as the shipped examples), optionally serving an
    extended resource."""
    expression = (
        f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'mig' && "
        f"!('shared' in device.attributes['{DRIVER}']) && device.attributes['{DRIVER}'].profile == '{profile}'"
    )
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": expression}}]}
    if extended_resource_name:
        spec["extendedResourceName"] = extended_resource_name
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


# -- claims and templates -----------------------------------------------------------------------


def mig_request(name: str = "gpu", profile: str = "1g.10gb", count: int = 1) -> dict[str, Any]:
    """One ExactCount request for ``count`` MIG devices of ``profile`` from the mig.migdra.io class."""
    return {
        "name": name,
        "exactly": {
            "deviceClassName": MIG_CLASS,
            "allocationMode": "ExactCount",
            "count": count,
            "selectors": [{"cel": {"expression": f"device.attributes['{DRIVER}'].profile == '{profile}'"}}],
        },
    }


def claim_spec(*requests: Mapping[str, Any]) -> dict[str, Any]:
    return {"devices": {"requests": [copy.deepcopy(dict(r)) for r in requests or [mig_request()]]}}


def claim(name: str, *requests: Mapping[str, Any], namespace: str = NAMESPACE) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": claim_spec(*requests),
    }


def template(
    name: str,
    *requests: Mapping[str, Any],
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    namespace: str = NAMESPACE,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"spec": claim_spec(*requests)}
    meta: dict[str, Any] = {}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    if meta:
        spec["metadata"] = meta
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


# -- pods ---------------------------------------------------------------------------------------


def pod(
    name: str,
    *,
    claims: Mapping[str, str] | None = None,
    templates: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    affinity_terms: Sequence[Mapping[str, Any]] | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
    limits: Mapping[str, Any] | None = None,
    namespace: str = NAMESPACE,
) -> dict[str, Any]:
    """A pod whose one container uses every entry: ``claims`` entry -> claim name, ``templates`` entry ->
    template name; ``affinity_terms``: required node affinity's nodeSelectorTerms."""
    entries = [{"name": e, "resourceClaimName": c} for e, c in (claims or {}).items()]
    entries += [{"name": e, "resourceClaimTemplateName": t} for e, t in (templates or {}).items()]
    container: dict[str, Any] = {"name": "app", "image": "busybox"}
    resources: dict[str, Any] = {}
    if entries:
        resources["claims"] = [{"name": e["name"]} for e in entries]
    if limits:
        resources["limits"] = dict(limits)
    if resources:
        container["resources"] = resources
    spec: dict[str, Any] = {"containers": [container]}
    if entries:
        spec["resourceClaims"] = entries
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if affinity_terms is not None:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [copy.deepcopy(dict(t)) for t in affinity_terms]
                }
            }
        }
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


# -- reading the API ----------------------------------------------------------------------------


class Api:
    """The reads and writes component tests repeat, over one :class:`Client`."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def create_all(self, kind_objects: Iterable[tuple[Any, dict[str, Any]]]) -> None:
        for kind, obj in kind_objects:
            self.client.create(kind, obj)

    def add_node(self, body: dict[str, Any], *, gpus: Sequence[str] = (H100,), **slice_options: Any) -> None:
        """The Node and, unless ``gpus`` is empty, the slices migdra would publish for it."""
        self.client.create(NODES, body)
        if gpus:
            for resource_slice in node_slices(body["metadata"]["name"], gpus, **slice_options):
                self.client.create(SLICES, resource_slice)

    def add_classes(self, classes: Iterable[dict[str, Any]] | None = None) -> None:
        for device_class in migdra_device_classes() if classes is None else classes:
            self.client.create(DEVICE_CLASSES, device_class)

    def pod(self, name: str) -> dict[str, Any] | None:
        return self.client.get(PODS, NAMESPACE, name)

    def claim(self, name: str) -> dict[str, Any] | None:
        return self.client.get(CLAIMS, NAMESPACE, name)

    def claims(self) -> list[dict[str, Any]]:
        return self.client.list(CLAIMS, NAMESPACE)[0]

    def create_template(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.client.create(CLAIM_TEMPLATES, body)

    def node_of(self, pod_name: str) -> str | None:
        current = self.pod(pod_name)
        return None if current is None else (current.get("spec") or {}).get("nodeName")

    def events(self, pod_name: str, reason: str | None = None) -> list[dict[str, Any]]:
        """Events about the pod named ``pod_name`` (optionally of one reason)."""
        return [
            e
            for e in self.client.list(EVENTS, NAMESPACE)[0]
            if e["involvedObject"].get("name") == pod_name and (reason is None or e.get("reason") == reason)
        ]

    def pod_condition(self, pod_name: str, condition_type: str) -> dict[str, Any] | None:
        current = self.pod(pod_name) or {}
        conditions = (current.get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c.get("type") == condition_type), None)


def allocated_devices(claim_obj: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(driver, pool, device) of every result of the claim's allocation."""
    results = (((claim_obj.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    return [(r["driver"], r["pool"], r["device"]) for r in results]


def reserved_names(claim_obj: Mapping[str, Any]) -> list[str]:
    return sorted(r["name"] for r in (claim_obj.get("status") or {}).get("reservedFor") or [])


def latest_pool(slices: Iterable[Mapping[str, Any]], pool: str, driver: str = DRIVER) -> list[Mapping[str, Any]] | None:
    """The slices of ``driver``'s pool ``pool`` at its latest generation; None while there are none or that
    generation is not complete (a publish under way: its slices are written one at a time)."""
    mine = [s for s in slices if s["spec"]["driver"] == driver and s["spec"]["pool"]["name"] == pool]
    if not mine:
        return None
    generation = max(int(s["spec"]["pool"]["generation"]) for s in mine)
    current = [s for s in mine if int(s["spec"]["pool"]["generation"]) == generation]
    if len(current) != int(current[0]["spec"]["pool"]["resourceSliceCount"]):
        return None
    return current


def allocated_claim(
    name: str,
    *devices: str,
    pool: str = "node-1",
    admin: bool = False,
    uid: str | None = None,
    share: str | None = None,
) -> dict[str, Any]:
    """A claim allocated ``devices`` of ``pool`` (``admin``: admin access; ``share``: a share of a
    shared device with that shareID), as kube-scheduler writes it."""
    results = [
        {
            "request": f"r{i}",
            "driver": DRIVER,
            "pool": pool,
            "device": device,
            **({"adminAccess": True} if admin else {}),
            **({"shareID": share, "consumedCapacity": {"computeSlices": "1"}} if share else {}),
        }
        for i, device in enumerate(devices)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}", "generation": 1},
        "spec": {"devices": {"requests": []}},
        "status": {"allocation": {"devices": {"results": results}}},
    }


def claim_view(claim_obj: Mapping[str, Any]) -> ResourceClaimView:
    """A claim's JSON read as the product reads it where it enters a process (an informer, a GET); a
    fixture migdra could not read fails the test here, never skipped."""
    return ResourceClaimView.model_validate(claim_obj)


def claim_views(claim_objs: Iterable[Mapping[str, Any]]) -> list[ResourceClaimView]:
    return [claim_view(c) for c in claim_objs]
