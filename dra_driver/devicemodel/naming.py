"""Device and counter-set names: stable DNS labels derived from what does not change.

Scheme (the same as NVIDIA's DRA driver, so tooling and habits carry over):

- whole GPU: ``gpu-<minor>``
- MIG placement: ``gpu-<minor>-mig-<profile>-<gi profile id>-<placement start>``, where ``<profile>`` is
  the profile name lower-cased with dots removed and any other character outside ``[a-z0-9-]``
  turned into ``-``: ``1g.10gb`` -> ``1g10gb``, ``1g.10gb+me`` -> ``1g10gb-me``.
  Example: ``gpu-0-mig-1g20gb-15-6`` is H100 GPU minor 0, profile 1g.20gb (ID 15), memory slices 6-7.
- shared GPU instance (one GPU instance, several claims, each its own compute instance; docs/sharing.md):
  ``gpu-<minor>-shared-<profile>-<gi profile id>-<placement start>``, the same placement as the
  exclusive device ``gpu-<minor>-mig-…`` with the same suffix.  Example: ``gpu-0-shared-4g40gb-5-0``.
- counter set of a GPU: ``gpu-<minor>-counter-set``

The node name is the pool name and the prefix of every slice name, so it must be a name Kubernetes
accepts for a node (a DNS-1123 subdomain); :func:`node_name_problem` says why one is not.

The GPU *minor* number (``/dev/nvidia<minor>``) is used, not the NVML index, which can change with
``CUDA_VISIBLE_DEVICES``-like enumeration order; minors are fixed by the driver.
"""

from __future__ import annotations

import re

from dra_driver.devicemodel.vocabulary import DEFAULT_DRIVER_NAME
from dra_driver.mig.catalog import GpuModel
from dra_driver.nvml.types import GpuInstanceProfileInfo

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME = re.compile(r"^gpu-(\d+)-mig-(.+)-(\d+)-(\d+)$")
_SHARED_NAME = re.compile(r"^gpu-(\d+)-shared-(.+)-(\d+)-(\d+)$")
DNS_SUBDOMAIN_RULE = (
    "lower-case letters, digits, '-' and '.', each dot-separated part starting and ending with a letter or digit"
)
DNS_LABEL_RULE = "lower-case letters, digits and '-', starting and ending with a letter or digit"
MAX_NODE_NAME = 253
MAX_DRIVER_NAME = 63  # the driver name is a DNS subdomain used as a label-sized attribute domain


def dns_subdomain_problem(name: str, max_length: int) -> str | None:
    """Why ``name`` is not a DNS-1123 subdomain of at most ``max_length`` characters, or None if it is."""
    if not name:
        return "must not be empty"
    if len(name) > max_length:
        return f"is {len(name)} characters long; at most {max_length} are allowed"
    if not _DNS_SUBDOMAIN.match(name):
        lowered = f" (did you mean {name.lower()!r}?)" if _DNS_SUBDOMAIN.match(name.lower()) else ""
        return f"is not a DNS-1123 subdomain: {DNS_SUBDOMAIN_RULE}{lowered}"
    return None


def dns_label_problem(name: str) -> str | None:
    """Why ``name`` is not a DNS-1123 label (a namespace name), or None if it is."""
    if not name:
        return "must not be empty"
    if len(name) > 63:
        return f"is {len(name)} characters long; at most 63 are allowed"
    if not _DNS_LABEL.match(name):
        lowered = f" (did you mean {name.lower()!r}?)" if _DNS_LABEL.match(name.lower()) else ""
        return f"is not a DNS-1123 label: {DNS_LABEL_RULE}{lowered}"
    return None


def driver_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a DRA driver name, or None."""
    return dns_subdomain_problem(name, MAX_DRIVER_NAME)


def check_driver_name(name: str) -> str:
    """``name`` if it can be a DRA driver name, else ValueError saying why (a settings validator)."""
    problem = driver_name_problem(name)
    if problem is not None:
        raise ValueError(f"not a DRA driver name: it {problem} (e.g. {DEFAULT_DRIVER_NAME!r})")
    return name


def node_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a Kubernetes node name (and so this node's pool name), or None."""
    return dns_subdomain_problem(name, MAX_NODE_NAME)


def profile_name(profile: GpuInstanceProfileInfo, model: GpuModel | None) -> str:
    """The profile name devices carry: the catalog's (``1g.20gb``), else NVML's without its ``MIG `` prefix.

    NVML's struct name field is not confirmed on hardware, so the catalog name wins when the model is
    known; device names, the ``profile`` attribute and the prepare path all use this one rule.
    """
    if model is not None:
        known = next((p for p in model.gpu_instance_profiles if p.profile_id == profile.profile_id), None)
        if known is not None:
            return known.name
    return profile.name.removeprefix("MIG ").strip() or f"profile-{profile.profile_id}"


def profile_token(profile_name: str) -> str:
    token = re.sub(r"[^a-z0-9-]", "-", profile_name.lower().replace(".", ""))
    return token.strip("-")


def gpu_device_name(minor: int) -> str:
    return f"gpu-{minor}"


def mig_device_name(minor: int, profile_name: str, profile_id: int, placement_start: int) -> str:
    name = f"gpu-{minor}-mig-{profile_token(profile_name)}-{profile_id}-{placement_start}"
    if len(name) > 63 or not _DNS_LABEL.match(name):
        raise ValueError(f"device name {name!r} is not a DNS label")
    return name


def shared_device_name(minor: int, profile_name: str, profile_id: int, placement_start: int) -> str:
    """The shared GPU-instance device of the placement :func:`mig_device_name` names exclusively."""
    name = f"gpu-{minor}-shared-{profile_token(profile_name)}-{profile_id}-{placement_start}"
    if len(name) > 63 or not _DNS_LABEL.match(name):
        raise ValueError(f"device name {name!r} is not a DNS label")
    return name


def counter_set_name(minor: int) -> str:
    return f"gpu-{minor}-counter-set"


def parse_mig_device_name(name: str) -> tuple[int, int, int] | None:
    """``gpu-0-mig-1g20gb-15-6`` -> (minor 0, profile id 15, start 6); None if not a MIG device name."""
    match = _NAME.match(name)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(3)), int(match.group(4))


def parse_shared_device_name(name: str) -> tuple[int, int, int] | None:
    """``gpu-0-shared-4g40gb-5-0`` -> (minor 0, profile id 5, start 0); None if not a shared device name."""
    match = _SHARED_NAME.match(name)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(3)), int(match.group(4))


def parse_gpu_device_name(name: str) -> int | None:
    """``gpu-3`` -> minor 3; None if not a whole-GPU device name."""
    match = re.fullmatch(r"gpu-(\d+)", name)
    return int(match.group(1)) if match else None
