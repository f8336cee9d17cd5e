"""What an administrator can change about the published devices, as a pydantic model.

Built once from settings and passed to the pure model; bad values fail at start-up with the field
named (pydantic's errors carry the path).
"""

from __future__ import annotations

import fnmatch
import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dra_driver.devicemodel.vocabulary import DEFAULT_DRIVER_NAME

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


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

    @field_validator("driver_name")
    @classmethod
    def _driver_name(cls, value: str) -> str:
        if len(value) > 63 or not _DNS_SUBDOMAIN.match(value):
            raise ValueError(f"{value!r} must be a lower-case DNS subdomain of at most 63 characters")
        return value

    def profile_filter(self, model_key: str | None) -> ProfileFilter:
        if model_key is not None and model_key in self.profiles:
            return self.profiles[model_key]
        return self.profiles.get("*", ProfileFilter())

    def excludes(self, gpu_uuid: str, pci_bus_id: str) -> bool:
        wanted = {item.strip().lower() for item in self.exclude_gpus}
        return gpu_uuid.lower() in wanted or normalise_pci_bus_id(pci_bus_id) in {
            normalise_pci_bus_id(w) for w in wanted
        }


def normalise_pci_bus_id(bus_id: str) -> str:
    """NVML's ``00000000:1B:00.0`` -> Kubernetes' standard ``0000:1b:00.0`` (4-digit domain, lower case)."""
    text = bus_id.strip().lower()
    domain, sep, rest = text.partition(":")
    if not sep or rest.count(":") != 1:
        return text
    return f"{int(domain, 16):04x}:{rest}" if all(c in "0123456789abcdef" for c in domain) else text
