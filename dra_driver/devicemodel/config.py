"""What an administrator can change about the published devices, as a pydantic model.

Built once from settings and passed to the pure model; bad values fail at start-up with the field
named (pydantic's errors carry the path).  What can be checked without the hardware is: profile
filters name GPU models of the MIG catalog (aliases are normalised to catalog keys) and each pattern
matches at least one of their profiles; excluded GPUs are written as a GPU UUID or a PCI bus id.
Whether an excluded GPU exists on this node is known only after NVML is read
(:meth:`DeviceModelConfig.unmatched_exclusions`).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dra_driver.devicemodel.vocabulary import DEFAULT_DRIVER_NAME
from dra_driver.mig.catalog import load_catalog

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_GPU_UUID = re.compile(r"^gpu-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$", re.IGNORECASE)
_PCI_BUS_ID = re.compile(
    r"^(?:(?P<domain>[0-9a-f]{1,8}):)?(?P<bus>[0-9a-f]{1,2}):(?P<device>[0-9a-f]{1,2})(?:\.(?P<function>[0-7]))?$",
    re.IGNORECASE,
)
ANY_MODEL = "*"


def gpu_reference_problem(value: str) -> str | None:
    """Why ``value`` cannot name a GPU to exclude, or None if it is a GPU UUID or a PCI bus id."""
    text = value.strip()
    if _GPU_UUID.match(text) or _PCI_BUS_ID.match(text):
        return None
    if text.upper().startswith("MIG-"):
        return f"{value!r} is a MIG device UUID; exclude whole GPUs, by GPU UUID (GPU-...) or PCI bus id (0000:1b:00.0)"
    return f"{value!r} is neither a GPU UUID (GPU-...) nor a PCI bus id (0000:1b:00.0)"


class ProfileFilter(BaseModel):
    """Which MIG profiles of a GPU model to publish.  Patterns are shell globs on the profile name
    (``1g.10gb``, ``*+me``, ``*+me*``).  ``allow`` empty = all; ``deny`` wins over ``allow``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()

    def admits(self, profile_name: str) -> bool:
        if any(fnmatch.fnmatchcase(profile_name, pattern) for pattern in self.deny):
            return False
        return not self.allow or any(fnmatch.fnmatchcase(profile_name, pattern) for pattern in self.allow)


class DeviceModelConfig(BaseModel):
    """Inputs of the device model besides the hardware inventory."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    driver_name: str = Field(
        default=DEFAULT_DRIVER_NAME,
        description="DRA driver name; also the attribute domain. DNS subdomain, at most 63 characters",
    )
    profiles: dict[str, ProfileFilter] = Field(
        default_factory=dict,
        description="profile filters by GPU model (catalog key, e.g. 'H100-SXM5-80GB') or '*' for every model; "
        "a model's own entry replaces the '*' entry",
    )
    exclude_gpus: tuple[str, ...] = Field(
        default=(),
        description="GPUs to leave out entirely, by UUID ('GPU-...') or PCI bus id ('0000:1b:00.0')",
    )
    shared_devices: bool = Field(
        default=False,
        description="publish a shared GPU-instance device (allowMultipleAllocations, one compute instance per "
        "claim) beside each exclusive MIG device whose profile can hold several compute instances; false: "
        "exclusive devices only",
    )

    @field_validator("driver_name")
    @classmethod
    def _driver_name(cls, value: str) -> str:
        if len(value) > 63 or not _DNS_SUBDOMAIN.match(value):
            raise ValueError(f"{value!r} must be a lower-case DNS subdomain of at most 63 characters")
        return value

    @field_validator("profiles")
    @classmethod
    def _catalog_models_and_patterns(cls, value: dict[str, ProfileFilter]) -> dict[str, ProfileFilter]:
        """Keys become catalog keys; a filter for no known model, or a pattern that matches none of the
        model's profiles, would silently filter nothing."""
        catalog = load_catalog()
        normalised: dict[str, ProfileFilter] = {}
        given_as: dict[str, str] = {}
        for name, profile_filter in value.items():
            if name == ANY_MODEL:
                key, names = ANY_MODEL, {p.name for g in catalog.gpus.values() for p in g.gpu_instance_profiles}
            else:
                try:
                    model = catalog.model(name)
                except KeyError as exc:
                    raise ValueError(str(exc.args[0])) from None
                key, names = model.key, {p.name for p in model.gpu_instance_profiles}
            if key in given_as:
                raise ValueError(f"{given_as[key]!r} and {name!r} both name {key}")
            given_as[key] = name
            for kind, patterns in (("allow", profile_filter.allow), ("deny", profile_filter.deny)):
                for pattern in patterns:
                    if not any(fnmatch.fnmatchcase(n, pattern) for n in names):
                        known = ", ".join(sorted(names))
                        of = "any GPU model" if key == ANY_MODEL else f"{key} (its profiles: {known})"
                        raise ValueError(
                            f"{kind} pattern {pattern!r} of {name!r} matches no profile of {of}; "
                            "patterns are case-sensitive shell globs on profile names"
                        )
            normalised[key] = profile_filter
        return normalised

    @field_validator("exclude_gpus")
    @classmethod
    def _gpu_references(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            problem = gpu_reference_problem(item)
            if problem is not None:
                raise ValueError(problem)
        return value

    def profile_filter(self, model_key: str | None) -> ProfileFilter:
        if model_key is not None and model_key in self.profiles:
            return self.profiles[model_key]
        return self.profiles.get("*", ProfileFilter())

    def excludes(self, gpu_uuid: str, pci_bus_id: str) -> bool:
        return any(_names_gpu(item, gpu_uuid, pci_bus_id) for item in self.exclude_gpus)

    def unmatched_exclusions(self, gpus: Iterable[tuple[str, str]]) -> tuple[str, ...]:
        """The ``exclude_gpus`` entries that name none of ``gpus`` ((UUID, PCI bus id) pairs)."""
        present = list(gpus)
        return tuple(
            item for item in self.exclude_gpus if not any(_names_gpu(item, uuid, bus) for uuid, bus in present)
        )


def _names_gpu(item: str, gpu_uuid: str, pci_bus_id: str) -> bool:
    wanted = item.strip()
    if wanted.lower() == gpu_uuid.lower():
        return True
    address = _pci_address(wanted)
    return address is not None and address == _pci_address(pci_bus_id)


def _pci_address(text: str) -> tuple[int, int, int, int] | None:
    """(domain, bus, device, function) of ``0000:1b:00.0``, NVML's ``00000000:1B:00.0`` or ``1b:00.0``."""
    match = _PCI_BUS_ID.match(text.strip())
    if match is None:
        return None
    return (
        int(match["domain"] or "0", 16),
        int(match["bus"], 16),
        int(match["device"], 16),
        int(match["function"] or "0", 16),
    )
