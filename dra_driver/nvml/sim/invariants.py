"""What no real machine can be in: the checks a loaded state file must pass before it is used.

The simulator writes only states its rules allow, but a state file is a text file a person can edit
(or another program can overwrite).  Accepting an impossible one would make the simulator answer as
no GPU does -- two GPU instances on one placement, a compute instance outside its GPU instance, one
UUID for two devices -- and migdra, tested against it, would learn the wrong thing.  So
:func:`state_problems` lists every such fact, and the store refuses the file while the list is not
empty.

Pure: it reads a :class:`~dra_driver.nvml.sim.state.SimState` and the MIG catalog, nothing else.
Every number (legal placements, instance counts, the GPU's engine budget) comes from the catalog, so
these checks and the simulator's rules (``hardware.py``) agree by construction.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from itertools import combinations
from typing import TYPE_CHECKING

from dra_driver.mig.catalog import (
    RESOURCE_FIELDS,
    GpuInstanceProfile,
    GpuModel,
    Placement,
    load_catalog,
    resource_amounts,
)

if TYPE_CHECKING:
    from dra_driver.nvml.sim.state import SimGpu, SimGpuInstance, SimState

# Records that a device (named by the second argument) has a UUID; reports a UUID seen twice.
_ClaimUuid = Callable[[str, str], None]


def state_problems(state: SimState) -> list[str]:
    """Every way ``state`` differs from what a real machine could be in; empty when it is possible."""
    problems: list[str] = []
    owners: dict[str, str] = {}  # UUID -> the device that has it, across GPUs and MIG devices

    def claim_uuid(uuid: str, owner: str) -> None:
        first = owners.setdefault(uuid, owner)
        if first != owner:
            problems.append(f"UUID {uuid} is used twice ({first} and {owner})")

    buses: dict[tuple[int, int], int] = {}
    for position, gpu in enumerate(state.gpus):
        if gpu.index != position:
            problems.append(
                f"the GPU at position {position} of gpus has index {gpu.index}; "
                "NVML indices are 0, 1, ... in the order of the list"
            )
        claim_uuid(gpu.uuid, f"GPU {gpu.index}")
        first_index = buses.setdefault((gpu.pci_domain, gpu.pci_bus), gpu.index)
        if first_index != gpu.index:
            bus = f"{gpu.pci_domain:08X}:{gpu.pci_bus:02X}:00.0"
            problems.append(f"PCI bus {bus} is used twice (GPU {first_index} and GPU {gpu.index})")
        problems.extend(_gpu_problems(gpu, claim_uuid))
    problems.extend(_event_problems(state))
    return problems


def _event_problems(state: SimState) -> list[str]:
    """Events name a GPU of the machine and come in the order they happened, none after the last serial."""
    problems: list[str] = []
    previous = 0
    for event in state.events:
        if event.gpu_index >= len(state.gpus):
            problems.append(f"event {event.serial} names GPU {event.gpu_index}; the machine has {len(state.gpus)}")
        if event.serial <= previous or event.serial > state.event_serial:
            problems.append(
                f"event {event.serial} is out of order (after event {previous}, last serial {state.event_serial})"
            )
        previous = event.serial
    return problems


def gpu_problems(gpu: SimGpu) -> list[str]:
    """What makes one GPU impossible, as :func:`state_problems` finds it (UUIDs checked within the GPU).

    For a transaction that changed only this GPU: the rest of the machine is as it was loaded, and
    new MIG UUIDs come from a serial no other device has used, so a check of this GPU alone is as
    strong as the whole state's and costs what the GPU holds, not what the machine holds.
    """
    owners: dict[str, str] = {}
    problems: list[str] = []

    def claim_uuid(uuid: str, owner: str) -> None:
        first = owners.setdefault(uuid, owner)
        if first != owner:
            problems.append(f"UUID {uuid} is used twice ({first} and {owner})")

    claim_uuid(gpu.uuid, f"GPU {gpu.index}")
    return _gpu_problems(gpu, claim_uuid) + problems


def _model(name: str) -> GpuModel | str:
    """The catalog model a state file names (by catalog key only), or why there is none."""
    catalog = load_catalog()
    if name in catalog.gpus:
        return catalog.gpus[name]
    try:
        key = catalog.model(name).key
    except KeyError as exc:
        return str(exc.args[0])
    return f"GPU model {name!r} is an alias; state files name catalog keys: write {key!r}"


def _gpu_problems(gpu: SimGpu, claim_uuid: _ClaimUuid) -> list[str]:
    where = f"GPU {gpu.index}"
    model = _model(gpu.model)
    if isinstance(model, str):
        return [f"{where}: {model}"]
    problems: list[str] = []
    if gpu.gpu_instances and not gpu.mig_mode_current:
        problems.append(f"{where}: has GPU instances while its MIG mode is disabled")
    profiles: dict[int, GpuInstanceProfile] = {}
    misnumbered: list[str] = []
    for gi in gpu.gpu_instances:
        gi_where = f"{where} GPU instance {gi.gpu_instance_id}"
        try:
            profile = model.profile_by_id(gi.profile_id)
        except KeyError as exc:
            ids = ", ".join(str(p.profile_id) for p in model.gpu_instance_profiles)
            problems.append(f"{gi_where}: {exc.args[0]} (its profile IDs: {ids})")
            continue
        if gi.placement not in profile.placements:
            problems.append(
                f"{gi_where}: {gi.placement} is not a placement of {profile.name} (legal: {_list(profile.placements)})"
            )
            continue
        expected_id = model.gpu_instance_id(gi.placement)
        if gi.gpu_instance_id != expected_id:
            # The simulator numbers GPU instances by placement (the catalog's rule) and relies on it.
            # Reported last: a duplicate ID or an overlap, when there is one, says more.
            misnumbered.append(
                f"{gi_where}: a {profile.name} at {gi.placement} has GPU instance ID {expected_id} on {model.key}"
            )
        profiles[id(gi)] = profile
        problems.extend(_compute_instance_problems(gpu, gi, profile, claim_uuid))
    for gpu_instance_id, uses in Counter(gi.gpu_instance_id for gi in gpu.gpu_instances).items():
        if uses > 1:
            problems.append(f"{where}: GPU instance ID {gpu_instance_id} is used {_times(uses)}")
    placed = [gi for gi in gpu.gpu_instances if id(gi) in profiles]
    for a, b in combinations(placed, 2):
        if a.placement.overlaps(b.placement):
            problems.append(
                f"{where}: GPU instances {a.gpu_instance_id} ({profiles[id(a)].name} at {a.placement}) and "
                f"{b.gpu_instance_id} ({profiles[id(b)].name} at {b.placement}) overlap"
            )
    problems.extend(_capacity_problems(where, model, [profiles[id(gi)] for gi in placed]))
    return problems + misnumbered


def _capacity_problems(where: str, model: GpuModel, present: list[GpuInstanceProfile]) -> list[str]:
    """Instance counts and the engine budget (see :func:`dra_driver.mig.catalog.resource_budget`)."""
    problems: list[str] = []
    if len(present) > model.max_gpu_instances:
        problems.append(
            f"{where}: {len(present)} GPU instances, but {model.key} holds at most {model.max_gpu_instances}"
        )
    by_name = {p.name: p for p in present}
    for name, count in Counter(p.name for p in present).items():
        if count > by_name[name].instance_count:
            problems.append(
                f"{where}: {count} GPU instances of {name}, but the profile allows {by_name[name].instance_count}"
            )
    budget = model.resource_budget
    for field in RESOURCE_FIELDS:
        used = sum(resource_amounts(p)[field] for p in present)
        if used > budget[field]:
            problems.append(
                f"{where}: its GPU instances together hold {used} {field.removesuffix('_count')}, "
                f"but {model.key} has {budget[field]}"
            )
    return problems


def _compute_instance_problems(
    gpu: SimGpu, gi: SimGpuInstance, profile: GpuInstanceProfile, claim_uuid: _ClaimUuid
) -> list[str]:
    where = f"GPU {gpu.index} GPU instance {gi.gpu_instance_id}"
    problems: list[str] = []
    placed = []
    for ci in gi.compute_instances:
        ci_where = f"{where} compute instance {ci.compute_instance_id}"
        claim_uuid(ci.uuid, ci_where)
        try:
            ci_profile = profile.compute_instance_profile(ci.ci_profile_id)
        except KeyError as exc:
            problems.append(f"{ci_where}: {exc.args[0]}")
            continue
        if ci.placement not in ci_profile.placements:
            legal = _list(ci_profile.placements)
            problems.append(f"{ci_where}: {ci.placement} is not a placement of {ci_profile.name} (legal: {legal})")
            continue
        placed.append((ci, ci_profile))
    for compute_instance_id, uses in Counter(ci.compute_instance_id for ci in gi.compute_instances).items():
        if uses > 1:
            problems.append(f"{where}: compute instance ID {compute_instance_id} is used {_times(uses)}")
    for (a, _), (b, _) in combinations(placed, 2):
        if a.placement.overlaps(b.placement):
            problems.append(
                f"{where}: compute instances {a.compute_instance_id} (at {a.placement}) and "
                f"{b.compute_instance_id} (at {b.placement}) overlap"
            )
    ci_profiles = {ci_profile.name: ci_profile for _, ci_profile in placed}
    for name, count in Counter(ci_profile.name for _, ci_profile in placed).items():
        if count > ci_profiles[name].instance_count:
            allowed = ci_profiles[name].instance_count
            problems.append(f"{where}: {count} compute instances of {name}, but the profile allows {allowed}")
    return problems


def _list(placements: tuple[Placement, ...]) -> str:
    return ", ".join(str(p) for p in placements)


def _times(uses: int) -> str:
    return "twice" if uses == 2 else f"{uses} times"
