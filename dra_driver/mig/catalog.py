"""The MIG hardware catalog: what each supported GPU model can be partitioned into, in NVML terms.

This module owns the *shape* of the facts; the facts themselves live in one data file,
``data/mig-catalog.yaml`` (generated from the researched reference by ``hack/gen_mig_catalog.py``),
loaded once per process by :func:`load_catalog`.  Nothing else in migdra may carry a table of MIG
numbers: the simulator, the device model and the CLI all read them from here.

Every model is frozen.  Values that were not read off real hardware output are named in each entry's
``uncertain`` map, so callers (and ``migdra gpus``) can say which numbers to trust.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Iterable
from fractions import Fraction
from functools import cache
from importlib import resources
from typing import Annotated, Any, Protocol

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

# The per-instance resources a GPU hands out; GpuModel.resource_budget says how much of each it has.
RESOURCE_FIELDS: tuple[str, ...] = (
    "multiprocessor_count",
    "copy_engine_count",
    "decoder_count",
    "encoder_count",
    "jpeg_count",
    "ofa_count",
    "memory_size_mb",
)


class HasResources(Protocol):
    """A GPU-instance profile as the catalog or NVML describes it (same field names in both)."""

    @property
    def multiprocessor_count(self) -> int: ...
    @property
    def copy_engine_count(self) -> int: ...
    @property
    def decoder_count(self) -> int: ...
    @property
    def encoder_count(self) -> int: ...
    @property
    def jpeg_count(self) -> int: ...
    @property
    def ofa_count(self) -> int: ...
    @property
    def memory_size_mb(self) -> int: ...


def resource_amounts(profile: HasResources) -> dict[str, int]:
    """One instance's share of each :data:`RESOURCE_FIELDS` resource."""
    return {field: int(getattr(profile, field)) for field in RESOURCE_FIELDS}


def resource_budget(profiles: Iterable[HasResources]) -> dict[str, int]:
    """What the whole GPU has of each :data:`RESOURCE_FIELDS` resource: the largest profile's amount.

    The largest profile (``7g``, or ``4g`` on A30 / RTX PRO) owns every engine of the GPU, so the GPU
    instances present at any time can together hold no more than it does.  This is why a second
    ``+me`` instance (the GPU has one OFA) or any media profile beside ``+me.all`` cannot exist.
    INFERRED from the profile tables; NVML reports it only as INSUFFICIENT_RESOURCES.
    """
    amounts = [resource_amounts(p) for p in profiles]
    return {field: max((a[field] for a in amounts), default=0) for field in RESOURCE_FIELDS}


class Architecture(enum.StrEnum):
    """GPU architecture; the value of ``nvmlDeviceGetArchitecture`` is kept beside it in the data."""

    AMPERE = "ampere"
    HOPPER = "hopper"
    BLACKWELL = "blackwell"


def _pair_to_placement(value: Any) -> Any:
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return {"start": value[0], "size": value[1]}
    return value


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Placement(_Frozen):
    """``nvmlGpuInstancePlacement_t`` / ``nvmlComputeInstancePlacement_t``: a half-open slice range."""

    start: int = Field(ge=0, description="first occupied slice")
    size: int = Field(gt=0, description="number of slices occupied")

    @property
    def end(self) -> int:
        return self.start + self.size

    def slices(self) -> range:
        return range(self.start, self.end)

    def overlaps(self, other: Placement) -> bool:
        """The one overlap rule of memory (or compute) slices: the node plugin's conflicts, the controller's
        reservations and the device taints all ask it."""
        return self.start < other.end and other.start < self.end

    def describe(self) -> str:
        """``memory slice 3`` or ``memory slices 4-5`` (an en dash): how a claim's status and Events name it."""
        last = self.end - 1
        return f"memory slice {self.start}" if self.size == 1 else f"memory slices {self.start}\u2013{last}"

    def __str__(self) -> str:
        return f"{self.start}:{self.size}"


PlacementField = Annotated[Placement, BeforeValidator(_pair_to_placement)]


class MemoryAlternative(_Frozen):
    """Another ``memorySizeMB`` seen on a different driver branch."""

    value: int
    sources: tuple[str, ...] = ()
    note: str | None = None


class ComputeInstanceProfile(_Frozen):
    """One ``NVML_COMPUTE_INSTANCE_PROFILE_*`` inside a given GPU-instance profile.

    For compute instances the NVML profile index *is* the profile ID (nvidia-smi -lcip), so there is
    only one number.
    """

    ci_profile_index: int = Field(ge=0)
    name: str
    slice_count: int = Field(gt=0)
    instance_count: int = Field(gt=0)
    multiprocessor_count: int = Field(gt=0)
    placements: tuple[PlacementField, ...]
    sources: tuple[str, ...] = ()
    uncertain: dict[str, str] = Field(default_factory=dict)

    @property
    def profile_id(self) -> int:
        return self.ci_profile_index


class GpuInstanceProfile(_Frozen):
    """One GPU-instance profile (the rows of ``nvidia-smi mig -lgip``) of one GPU model."""

    name: str = Field(description="e.g. '1g.10gb' or '1g.10gb+me'")
    nvml_profile_index: int = Field(ge=0, description="NVML_GPU_INSTANCE_PROFILE_* constant")
    profile_id: int = Field(ge=0, description="info.id: what Create/PossiblePlacements take")
    slice_count: int = Field(gt=0, description="compute (GPU) slices")
    instance_count: int = Field(gt=0)
    multiprocessor_count: int = Field(gt=0)
    copy_engine_count: int = Field(ge=0)
    decoder_count: int = Field(ge=0)
    encoder_count: int = Field(ge=0)
    jpeg_count: int = Field(ge=0)
    ofa_count: int = Field(ge=0)
    is_p2p_supported: int = Field(ge=0, le=1)
    memory_size_mb: int = Field(gt=0, description="MiB, as nvmlGpuInstanceProfileInfo_v2_t reports it")
    placements: tuple[PlacementField, ...]
    default_ci_profile_index: int
    compute_instance_profiles: tuple[ComputeInstanceProfile, ...]
    memory_size_mb_alternatives: tuple[MemoryAlternative, ...] = ()
    sources: tuple[str, ...] = ()
    uncertain: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> GpuInstanceProfile:
        sizes = {p.size for p in self.placements}
        if len(sizes) != 1:
            raise ValueError(f"{self.name}: placements must share one size, got {sorted(sizes)}")
        if self.default_ci_profile_index not in {c.ci_profile_index for c in self.compute_instance_profiles}:
            raise ValueError(f"{self.name}: default CI profile {self.default_ci_profile_index} is not in its CI table")
        return self

    @property
    def placement_size(self) -> int:
        """Memory slices one instance of this profile occupies."""
        return self.placements[0].size

    @property
    def memory_bytes(self) -> int:
        return self.memory_size_mb * 1024 * 1024

    @property
    def default_compute_instance(self) -> ComputeInstanceProfile:
        """The full-size CI (``nvidia-smi mig -cgi X -C``): the one that delivers all of the GI's SMs."""
        return self.compute_instance_profile(self.default_ci_profile_index)

    def compute_instance_profile(self, ci_profile_index: int) -> ComputeInstanceProfile:
        for ci in self.compute_instance_profiles:
            if ci.ci_profile_index == ci_profile_index:
                return ci
        raise KeyError(f"GI profile {self.name} has no compute-instance profile {ci_profile_index}")

    def placement_at(self, start: int) -> Placement | None:
        return next((p for p in self.placements if p.start == start), None)

    @property
    def share_sizes(self) -> tuple[int, ...]:
        """The compute-instance sizes (compute slices, ascending) one shared GPU instance of this profile
        can give a share; empty when the GI holds only one compute instance at a time (nothing to share).

        One size per distinct slice count: where two CI profiles have the same slice count (H100's
        ``1c.1g.20gb`` and ``1g.20gb``) the share gets :meth:`compute_instance_for_share`'s."""
        sizes = tuple(sorted({ci.slice_count for ci in self.compute_instance_profiles}))
        if not sizes or self.compute_instance_for_share(sizes[0]).instance_count < 2:
            return ()
        return sizes

    def compute_instance_for_share(self, slices: int) -> ComputeInstanceProfile:
        """The CI profile a share of ``slices`` compute slices gets: the GI's full-size default CI when
        ``slices`` is all of it, else the lowest profile index of that size (the plain ``Nc`` profile,
        not a revision).  KeyError when no CI profile has that size."""
        if slices == self.slice_count:
            return self.default_compute_instance
        matching = [ci for ci in self.compute_instance_profiles if ci.slice_count == slices]
        if not matching:
            sizes = ", ".join(str(size) for size in sorted({ci.slice_count for ci in self.compute_instance_profiles}))
            raise KeyError(f"GI profile {self.name} has no compute instance of {slices} slices (sizes: {sizes})")
        return min(matching, key=lambda ci: ci.ci_profile_index)


class GpuModel(_Frozen):
    """A GPU model that supports MIG."""

    key: str
    reference_key: str
    aliases: tuple[str, ...] = ()
    nvml_name: str
    pci_device_id: str
    architecture: Architecture
    nvml_architecture: int
    cuda_compute_capability: str
    nvml_brand: int = Field(ge=0, description="nvmlDeviceGetBrand: an NVML_BRAND_* value")
    nvml_addressing_mode: int = Field(
        ge=0, description="nvmlDeviceGetAddressingMode on a common host: an NVML_DEVICE_ADDRESSING_MODE_* value"
    )
    total_memory_mib: int = Field(gt=0)
    memory_slices: int = Field(gt=0, description="placement units; 12 on RTX PRO 6000")
    compute_slices: int = Field(gt=0)
    sm_total: int = Field(gt=0)
    max_gpu_instances: int = Field(gt=0)
    mig_mode_change_requires_reset: bool
    default_placement_order: dict[int, tuple[int, ...]] = Field(
        description="starts nvmlDeviceCreateGpuInstance (no placement) tries, per placement size"
    )
    gpu_instance_id_base_by_fraction: dict[str, int] = Field(
        description="catalog-wide GI ID rule: fraction of the GPU ('1/4') -> first GI ID of that class"
    )
    gpu_instance_profiles: tuple[GpuInstanceProfile, ...]
    sources: tuple[str, ...] = ()
    uncertain: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> GpuModel:
        ids = [p.profile_id for p in self.gpu_instance_profiles]
        if len(ids) != len(set(ids)):
            raise ValueError(f"{self.key}: duplicate GI profile IDs")
        indices = [p.nvml_profile_index for p in self.gpu_instance_profiles]
        if len(indices) != len(set(indices)):
            raise ValueError(f"{self.key}: duplicate GI profile indices")
        for profile in self.gpu_instance_profiles:
            for placement in profile.placements:
                if placement.end > self.memory_slices:
                    raise ValueError(
                        f"{self.key} {profile.name}: placement {placement} beyond {self.memory_slices} slices"
                    )
                self.gpu_instance_id(placement)  # raises for a size with no ID class
        return self

    def profile_by_id(self, profile_id: int) -> GpuInstanceProfile:
        for profile in self.gpu_instance_profiles:
            if profile.profile_id == profile_id:
                return profile
        raise KeyError(f"{self.key} has no GPU-instance profile ID {profile_id}")

    def profile_by_index(self, nvml_profile_index: int) -> GpuInstanceProfile:
        for profile in self.gpu_instance_profiles:
            if profile.nvml_profile_index == nvml_profile_index:
                return profile
        raise KeyError(f"{self.key} has no GPU-instance profile index {nvml_profile_index}")

    def profile_by_name(self, name: str) -> GpuInstanceProfile:
        for profile in self.gpu_instance_profiles:
            if profile.name == name:
                return profile
        raise KeyError(f"{self.key} has no GPU-instance profile {name!r}")

    def gpu_instance_id(self, placement: Placement) -> int:
        """The GI ID NVML assigns at ``placement``: a size class base plus ``start / size``.

        The rule is one fact of the catalog (``gpu_instance_id_rule``); see its ``uncertain`` note.
        """
        base = self.gpu_instance_id_base_by_fraction.get(str(Fraction(placement.size, self.memory_slices)))
        if base is None:
            raise ValueError(f"{self.key}: no GPU-instance ID class for placement size {placement.size}")
        return base + placement.start // placement.size

    @property
    def resource_budget(self) -> dict[str, int]:
        """See :func:`resource_budget`."""
        return resource_budget(self.gpu_instance_profiles)

    @property
    def max_compute_instances(self) -> int:
        """Most CIs (hence MIG devices) the GPU can hold at once: one per compute slice."""
        return self.compute_slices


class DriverProfileIndexCount(_Frozen):
    """How many ``NVML_GPU_INSTANCE_PROFILE_*`` indices drivers from one branch on know.

    A profile-info query at or past the count is INVALID_ARGUMENT; below it, a profile the GPU lacks is
    NOT_SUPPORTED.  pynvml may know more indices than the installed driver (recorded on H200).
    """

    from_driver_major: int = Field(ge=0)
    gpu_instance_profile_count: int = Field(gt=0)
    sources: tuple[str, ...] = ()
    uncertain: str | None = None


class MigCatalog(_Frozen):
    """All supported GPU models, by catalog key (``H100-SXM5-80GB``) and by alias."""

    schema_version: int
    gpus: dict[str, GpuModel]
    sources: dict[str, str]
    gpu_instance_id_rule: dict[str, Any]
    driver_profile_index_counts: tuple[DriverProfileIndexCount, ...] = Field(min_length=1)

    def gpu_instance_profile_index_count(self, driver_version: str) -> int:
        """``NVML_GPU_INSTANCE_PROFILE_COUNT`` as a driver of ``driver_version`` (``580.159.04``) knows it."""
        major_text = driver_version.split(".", 1)[0]
        major = int(major_text) if major_text.isdigit() else 0
        known = [d for d in self.driver_profile_index_counts if d.from_driver_major <= major]
        return max(known, key=lambda d: d.from_driver_major).gpu_instance_profile_count

    def model(self, key: str) -> GpuModel:
        """Look up a model by catalog key or alias (case-insensitive).

        An alias several models share (``A100``: the 40 GB and the 80 GB board) is refused with the
        candidates rather than resolved to one of them; an unknown name gets the closest spelling.
        """
        wanted = key.strip().lower()
        found = [
            gpu for gpu in self.gpus.values() if wanted == gpu.key.lower() or wanted in (a.lower() for a in gpu.aliases)
        ]
        if len(found) == 1:
            return found[0]
        if found:
            raise KeyError(f"ambiguous GPU model {key!r}: {' or '.join(g.key for g in found)}; name one of them")
        known = ", ".join(sorted(self.gpus))
        names = {name.lower(): gpu.key for gpu in self.gpus.values() for name in (gpu.key, *gpu.aliases)}
        close = difflib.get_close_matches(wanted, list(names), n=1, cutoff=0.8)
        hint = f"; did you mean {names[close[0]]}?" if close else ""
        raise KeyError(f"unknown GPU model {key!r}{hint} (known models: {known})")

    def by_nvml_name(self, nvml_name: str) -> GpuModel | None:
        """The model whose NVML device name matches (R450/R460 drop the ``NVIDIA `` prefix)."""
        name = nvml_name.strip().removeprefix("NVIDIA ")
        return next((g for g in self.gpus.values() if g.nvml_name.removeprefix("NVIDIA ") == name), None)

    def by_pci_device_id(self, pci_device_id: int) -> GpuModel | None:
        return next((g for g in self.gpus.values() if int(g.pci_device_id, 16) == pci_device_id), None)

    def identify(self, pci_device_id: int, nvml_name: str) -> GpuModel | None:
        """The model of a GPU NVML reports: by PCI device ID, else by name; None for unknown boards."""
        return self.by_pci_device_id(pci_device_id) or self.by_nvml_name(nvml_name)


@cache
def load_catalog() -> MigCatalog:
    """Load and validate the shipped catalog once per process.

    Every command and the node plugin pay for this at start-up: libyaml's loader parses the file about
    six times faster than PyYAML's pure-Python one, which remains the fallback where PyYAML was built
    without libyaml (both build the same document).
    """
    text = resources.files("dra_driver.mig").joinpath("data/mig-catalog.yaml").read_text(encoding="utf-8")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    raw = yaml.load(text, Loader=loader)  # a safe loader either way
    rule = raw["gpu_instance_id_rule"]
    bases = {str(Fraction(str(k))): int(v) for k, v in rule["base_by_fraction"].items()}
    gpus = {key: {"key": key, "gpu_instance_id_base_by_fraction": bases, **body} for key, body in raw["gpus"].items()}
    return MigCatalog.model_validate(
        {
            "schema_version": raw["schema_version"],
            "gpus": gpus,
            "sources": raw["sources"],
            "gpu_instance_id_rule": rule,
            "driver_profile_index_counts": raw["driver_profile_index_counts"],
        }
    )
