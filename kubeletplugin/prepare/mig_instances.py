"""The MIG instances of a claim on NVML: created at exactly the allocated placement, destroyed only
when a checkpoint record proves they are migdra's, checked against what NVML shows.

Owns the NVML mutations of prepare and unprepare, each one step the service calls in order (the
service records each step in the checkpoint between them, docs/prepare.md §4 and §8); no function here
writes the checkpoint or takes a lock:

- :func:`read_instances_with_placement_free` reads the GPU's instances right before creating and refuses an
  occupied placement; :func:`create_gpu_instance` creates the GPU instance of the allocated profile at
  **exactly** the allocated placement (never another: an occupied placement is an error, not a reason
  to move); :func:`create_compute_instance` creates the compute instance that covers the whole GI --
  the CI profile whose SM count equals the GI profile's (CI profile 7, not 0, in Hopper's 1g.20gb-type
  GIs; NVIDIA #1454/#1480) -- and :func:`check_delivered_sms` checks the created CI delivers those SMs.
  On a failure after the GI exists the service destroys what it created with
  :func:`destroy_created_instance`, CI first (NVIDIA #1452 left the GI behind).
- Release, one device at a time, each step returning what the device's record must say next:
  :func:`find_instance_to_release` checks identity (GI ID, profile, placement, MIG UUID) and says what
  of an exclusive device's instance is migdra's -- an instance that does not match is someone else's
  and is left alone; without a recorded GI ID, only a GI the record *proves* migdra created
  (:func:`find_unrecorded_gpu_instance`) -- and :func:`destroy_instance` destroys it, CI first.  A share
  is :func:`destroy_share_compute_instance` (its own CI), then :func:`destroy_shared_gpu_instance_if_last`
  (the GI, only when no other record names it).  An instance already gone counts as released
  (idempotence).
- :func:`read_verification_problems` says whether NVML still shows a completed record's instances
  (start-up recovery adopts on it; a prepare of a completed claim checks it).
- :func:`compute_placement_conflict` (pure) decides whether a device's placement is taken, and by
  whose instance: another claim's (named by its checkpoint record) or one migdra did not create.

It never decides *which* device a claim gets, never destroys an instance no record names, and never
falls back to another placement or CI profile.  Callers hold the GPU's lock around every mutation.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from dra_driver.mig.catalog import Placement
from dra_driver.mig.compute_placement import describe_compute_instances
from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.errors import (
    NvmlComputeInstanceLeft,
    NvmlError,
    NvmlInsufficientResources,
    NvmlInUse,
    NvmlNotFound,
)
from dra_driver.nvml.types import ComputeInstanceInfo, ComputeInstanceProfileInfo, GpuInstanceInfo
from kubeletplugin.prepare.devices import DeviceTarget
from kubeletplugin.prepare.errors import (
    CapacityMismatchError,
    ComputeInstanceLeftError,
    DeviceConflictError,
    LockTimeoutError,
    RealizeError,
    ReleaseError,
)
from kubeletplugin.prepare.locks import KeyedLocks
from kubeletplugin.prepare.records import ClaimRecord, DeviceIntent, DeviceRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RealizedInstance:
    """A GPU instance and its full compute instance, as NVML reported them after creation."""

    gpu_uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    compute_instance_profile_id: int
    mig_uuid: str
    multiprocessor_count: int


def compute_full_ci_profile(
    profiles: Sequence[ComputeInstanceProfileInfo], gi_multiprocessor_count: int
) -> ComputeInstanceProfileInfo | None:
    """The CI profile that delivers all of a GI's SMs; pure.  None when no profile does.

    Several matches (not seen on any recorded GPU) resolve to the one spanning the most compute
    slices, then the lowest profile index, so the choice is deterministic.
    """
    full = [p for p in profiles if p.multiprocessor_count == gi_multiprocessor_count]
    if not full:
        return None
    return min(full, key=lambda p: (-p.slice_count, p.ci_profile_index))


def find_overlapping_instance(instances: Sequence[GpuInstanceInfo], placement: Placement) -> GpuInstanceInfo | None:
    """The first GPU instance whose memory slices overlap ``placement``; pure."""
    return next((gi for gi in instances if gi.placement.overlaps(placement)), None)


@dataclass(frozen=True, slots=True)
class PlacementConflict:
    """A GPU instance standing where a device must be created, and the claim whose record names it."""

    occupant: GpuInstanceInfo
    holder: ClaimRecord | None  # None: no record names it -- an instance migdra did not create

    def describe(self, intent: DeviceIntent) -> str:
        """The per-claim error: device, placement, occupant, whose it is; never a fallback."""
        occupant = self.occupant
        who = (
            f"prepared for claim {self.holder.label} (UID {self.holder.claim_uid})"
            if self.holder is not None
            else "that migdra did not create"
        )
        return (
            f"device {intent.device_name}: placement {intent.placement} on GPU {intent.gpu_uuid} is occupied by "
            f"GPU instance {occupant.gpu_instance_id} (profile {occupant.profile_id} at {occupant.placement}) "
            f"{who}; "
            + (
                "a share joins only a GPU instance migdra created for shares of this device"
                if intent.is_share
                else "migdra never falls back to another placement"
            )
        )


def compute_placement_conflict(
    instances: Sequence[GpuInstanceInfo], intent: DeviceIntent, records: Iterable[ClaimRecord], claim_uid: str
) -> PlacementConflict | None:
    """Whether ``intent``'s placement is taken on its GPU, given the GPU's ``instances`` and the checkpoint's
    ``records`` (read *after* the instances, so a GI in ``instances`` that migdra created is named by
    one of them); pure.

    None for admin access and whole GPUs (they create nothing) and for a free placement.  The occupant
    is attributed to the first record of another claim that names it -- by its GI ID, or as the GI of
    that profile at that placement whose creation is in flight -- else to nobody (a foreign instance).

    For a share, None too when the occupant is exactly its device's GI (profile and placement) and a
    share of the same device in another claim's record names it or is creating it: that is the GI it
    joins.  The unlocked check must not refuse a share that races the share creating its GI (between
    NVML's answer and the recorded GI ID); :func:`find_shared_gpu_instance`, under the GPU's lock,
    decides whether it really joins.
    """
    if intent.admin_access or not intent.is_mig:
        return None
    assert intent.placement is not None
    occupant = find_overlapping_instance(instances, intent.placement)
    if occupant is None:
        return None
    records = tuple(records)
    if intent.is_share and _shares_record_gpu_instance(occupant, intent, records, claim_uid):
        return None  # the shared GI of this device, held (or being created) by other shares: this share joins it
    holder = next(
        (
            record
            for record in records
            if record.claim_uid != claim_uid
            and any(d.intent.gpu_uuid == intent.gpu_uuid and records_gpu_instance(d, occupant) for d in record.devices)
        ),
        None,
    )
    return PlacementConflict(occupant, holder)


def find_share_holders(
    gi: GpuInstanceInfo, intent: DeviceIntent, records: Iterable[ClaimRecord], claim_uid: str
) -> list[tuple[ClaimRecord, DeviceRecord]]:
    """The shares of other claims whose records name ``gi`` as the shared GPU instance of ``intent``'s
    device; pure.  Empty when ``gi`` is not exactly that device's GI (profile, placement) or no live
    share record names it -- then it is someone else's (foreign, or an exclusive claim's) and a share
    must not join it.  Every GI a share record names was created by migdra for shares of that device:
    a share records only the GI it created or the GI another share's record named."""
    if gi.profile_id != intent.profile_id or gi.placement != intent.placement:
        return []
    return [
        (record, device)
        for record in records
        if record.claim_uid != claim_uid
        for device in record.devices
        if device.intent.is_share
        and device.intent.gpu_uuid == intent.gpu_uuid
        and device.intent.device_name == intent.device_name
        and device.gpu_instance_id == gi.gpu_instance_id
    ]


def _shares_record_gpu_instance(
    gi: GpuInstanceInfo, intent: DeviceIntent, records: Iterable[ClaimRecord], claim_uid: str
) -> bool:
    """Whether ``gi`` is exactly the GI of ``intent``'s shared device (profile, placement) and a share of that
    device in another claim's record names it by ID or is creating it (its creation in flight); pure."""
    if gi.profile_id != intent.profile_id or gi.placement != intent.placement:
        return False
    return any(
        device.intent.is_share
        and device.intent.gpu_uuid == intent.gpu_uuid
        and device.intent.device_name == intent.device_name
        and records_gpu_instance(device, gi)
        for record in records
        if record.claim_uid != claim_uid
        for device in record.devices
    )


def records_gpu_instance(device: DeviceRecord, gi: GpuInstanceInfo) -> bool:
    """Whether ``device`` (of the same GPU) records ``gi``: by its ID, or as the GI being created as."""
    if device.owns_instance:
        return device.gpu_instance_id == gi.gpu_instance_id
    return (
        device.creation_in_flight
        and device.intent.placement == gi.placement
        and device.intent.profile_id == gi.profile_id
    )


def _where(target: DeviceTarget) -> str:
    return f"device {target.device_name}: GPU {target.gpu_uuid}"


def read_instances_with_placement_free(nvml: Nvml, target: DeviceTarget) -> list[GpuInstanceInfo]:
    """The GPU's instances now, right before creating ``target``'s -- checking that ``target``'s
    placement is still free: raises :class:`DeviceConflictError` when one of them occupies it,
    :class:`RealizeError` when NVML cannot say.

    Under the GPU's lock, so nothing of migdra's changes the GPU between this read, the recorded
    request and the creation.
    """
    profile_name, placement = _mig_target(target)
    try:
        standing = nvml.gpu_instances(target.gpu_uuid)
    except NvmlError as e:
        raise RealizeError(f"{_where(target)}: reading its GPU instances before creating failed: {e}") from e
    in_the_way = find_overlapping_instance(standing, placement)
    if in_the_way is not None:
        raise DeviceConflictError(
            f"{_where(target)} placement {placement} of {profile_name} is occupied by GPU instance "
            f"{in_the_way.gpu_instance_id} (profile {in_the_way.profile_id} at {in_the_way.placement}); "
            "migdra never falls back to another placement"
        )
    return standing


def create_gpu_instance(nvml: Nvml, target: DeviceTarget) -> GpuInstanceInfo:
    """The GPU instance of ``target``'s profile at exactly its placement; raises
    :class:`DeviceConflictError` (occupied) or :class:`RealizeError` (NVML failed)."""
    profile_name, placement = _mig_target(target)
    assert target.profile is not None
    try:
        gi = nvml.create_gpu_instance(target.gpu_uuid, target.profile.profile_id, placement)
    except NvmlInsufficientResources as e:
        occupant = _describe_occupant(nvml, target.gpu_uuid, placement)
        raise DeviceConflictError(
            f"{_where(target)} placement {placement} of {profile_name} is occupied{occupant}; migdra never falls "
            f"back to another placement (NVML: {e.nvml_message})"
        ) from e
    except NvmlError as e:
        raise RealizeError(f"{_where(target)}: creating the GPU instance failed: {e}") from e
    log.info(
        "created GI %d (%s, profile %d) at %s on GPU %s for device %s",
        gi.gpu_instance_id,
        profile_name,
        target.profile.profile_id,
        placement,
        target.gpu_uuid,
        target.device_name,
    )
    return gi


def create_compute_instance(
    nvml: Nvml, target: DeviceTarget, gpu_instance_id: int
) -> tuple[ComputeInstanceProfileInfo, ComputeInstanceInfo]:
    """The compute instance covering all of the GI's SMs, and its profile; raises
    :class:`CapacityMismatchError` (no CI profile delivers them) or :class:`RealizeError`."""
    profile_name, _ = _mig_target(target)
    assert target.profile is not None
    sms = target.profile.multiprocessor_count
    try:
        ci_profiles = nvml.compute_instance_profiles(target.gpu_uuid, gpu_instance_id)
        ci_profile = compute_full_ci_profile(ci_profiles, sms)
        if ci_profile is None:
            offered = ", ".join(f"{p.ci_profile_index} ({p.multiprocessor_count} SMs)" for p in ci_profiles)
            raise CapacityMismatchError(
                f"{_where(target)} {profile_name} advertises {sms} SMs, but no compute-instance "
                f"profile of GI {gpu_instance_id} delivers {sms} (offered: {offered})"
            )
        ci = nvml.create_compute_instance(target.gpu_uuid, gpu_instance_id, ci_profile.ci_profile_index)
    except NvmlError as e:
        raise RealizeError(f"{_where(target)}: creating the compute instance failed: {e}") from e
    return ci_profile, ci


def check_delivered_sms(
    target: DeviceTarget, gpu_instance_id: int, ci_profile: ComputeInstanceProfileInfo, ci: ComputeInstanceInfo
) -> RealizedInstance:
    """The created instance, once its CI delivers the SMs the device advertises; else
    :class:`CapacityMismatchError` (the caller destroys what it created)."""
    profile_name, _ = _mig_target(target)
    assert target.profile is not None
    sms = target.profile.multiprocessor_count
    if ci.multiprocessor_count < sms:
        raise CapacityMismatchError(
            f"{_where(target)} {profile_name} advertises {sms} SMs, but compute instance "
            f"{ci.compute_instance_id} (CI profile {ci_profile.ci_profile_index}) of GI {gpu_instance_id} "
            f"delivers {ci.multiprocessor_count}"
        )
    log.info(
        "created CI %d (CI profile %d, %d SMs, %s) in GI %d on GPU %s",
        ci.compute_instance_id,
        ci_profile.ci_profile_index,
        ci.multiprocessor_count,
        ci.mig_uuid,
        gpu_instance_id,
        target.gpu_uuid,
    )
    return RealizedInstance(
        target.gpu_uuid,
        gpu_instance_id,
        ci.compute_instance_id,
        ci_profile.ci_profile_index,
        ci.mig_uuid,
        ci.multiprocessor_count,
    )


def find_shared_gpu_instance(
    standing: Sequence[GpuInstanceInfo],
    target: DeviceTarget,
    intent: DeviceIntent,
    records: Iterable[ClaimRecord],
    claim_uid: str,
) -> GpuInstanceInfo | None:
    """The shared GI this share joins (None: none stands, create it); pure.  Raises
    :class:`DeviceConflictError` when anything else occupies the placement: a GI of another profile or
    placement, or one at exactly the placement that no other share's record names (an instance migdra
    did not create, or an exclusive claim's): a share never joins a GI migdra did not create for shares."""
    profile_name, placement = _mig_target(target)
    in_the_way = [gi for gi in standing if gi.placement.overlaps(placement)]
    if not in_the_way:
        return None
    gi = in_the_way[0]
    if len(in_the_way) == 1 and find_share_holders(gi, intent, records, claim_uid):
        return gi
    holder = next(
        (
            r
            for r in records
            if r.claim_uid != claim_uid
            for d in r.devices
            if d.intent.gpu_uuid == target.gpu_uuid and records_gpu_instance(d, gi)
        ),
        None,
    )
    whose = f"prepared for claim {holder.label} (UID {holder.claim_uid})" if holder else "that migdra did not create"
    raise DeviceConflictError(
        f"{_where(target)} placement {placement} of {profile_name} is occupied by GPU instance {gi.gpu_instance_id} "
        f"(profile {gi.profile_id} at {gi.placement}) {whose}; a share joins only a GPU instance migdra created for "
        "shares of this device"
    )


def describe_share_refusal(target: DeviceTarget, gi: GpuInstanceInfo, size: int) -> str:
    """The one-line error of a share that finds no free CI placement in its GI: device, size, CIs, why."""
    assert target.catalog_profile is not None
    profile = target.catalog_profile
    present = [ci.placement for ci in gi.compute_instances]
    free = profile.slice_count - sum(p.size for p in present)
    legal = ", ".join(str(p) for p in profile.compute_instance_for_share(size).placements)
    why = (
        f"the free compute slices are not contiguous at a legal placement of a {size}-slice CI ({legal}): the GPU "
        "instance is fragmented"
        if free >= size
        else f"only {free} of its {profile.slice_count} compute slices are free"
    )
    return (
        f"device {target.device_name}: no free placement for a share of {size} compute slice(s) in GI "
        f"{gi.gpu_instance_id} on GPU {target.gpu_uuid} ({describe_compute_instances(present)}): {why}"
    )


def create_share_compute_instance(
    nvml: Nvml, target: DeviceTarget, gpu_instance_id: int, ci_profile_index: int, placement: Placement
) -> ComputeInstanceInfo:
    """The share's CI at exactly ``placement`` in the shared GI; raises :class:`DeviceConflictError`
    (occupied) or :class:`RealizeError`."""
    try:
        ci = nvml.create_compute_instance_at(target.gpu_uuid, gpu_instance_id, ci_profile_index, placement)
    except NvmlInsufficientResources as e:
        raise DeviceConflictError(
            f"{_where(target)}: compute-instance placement {placement} in GI {gpu_instance_id} is occupied "
            f"(NVML: {e.nvml_message})"
        ) from e
    except NvmlComputeInstanceLeft as e:
        stray = e.compute_instance
        raise ComputeInstanceLeftError(
            f"{_where(target)}: creating the share's compute instance failed: {e}",
            stray.compute_instance_id,
            stray.mig_uuid,
            stray.placement,
        ) from e
    except NvmlError as e:
        raise RealizeError(f"{_where(target)}: creating the share's compute instance failed: {e}") from e
    log.info(
        "created CI %d (CI profile %d at %s, %d SMs, %s) in shared GI %d on GPU %s for device %s",
        ci.compute_instance_id,
        ci_profile_index,
        placement,
        ci.multiprocessor_count,
        ci.mig_uuid,
        gpu_instance_id,
        target.gpu_uuid,
        target.device_name,
    )
    return ci


def _mig_target(target: DeviceTarget) -> tuple[str, Placement]:
    """``target``'s profile name and placement; only MIG targets are created."""
    assert target.profile is not None, "only a MIG target has an instance to create"
    assert target.placement is not None, "only a MIG target has an instance to create"
    return target.profile_name or target.profile.name, target.placement


def destroy_created_instance(
    nvml: Nvml, gpu_uuid: str, gpu_instance_id: int, compute_instance_id: int | None
) -> str | None:
    """Destroy an instance this prepare call created (CI, then GI); the failure text, or None."""
    try:
        if compute_instance_id is not None:
            _destroy_compute_instance(nvml, gpu_uuid, gpu_instance_id, compute_instance_id)
        _destroy_gpu_instance(nvml, gpu_uuid, gpu_instance_id)
    except NvmlError as e:
        log.error(
            "ROLLBACK FAILED: GI %d on GPU %s created by this prepare call could not be destroyed: %s; it stays "
            "recorded in the checkpoint and is retried",
            gpu_instance_id,
            gpu_uuid,
            e,
        )
        return str(e)
    log.info("rolled back GI %d on GPU %s", gpu_instance_id, gpu_uuid)
    return None


# -- release: each NVML step of one device's release, in the order the service calls them ---------------


@dataclass(frozen=True, slots=True)
class InstanceToRelease:
    """What of an exclusive device's instance is migdra's to destroy, identity proven
    (:func:`find_instance_to_release`), and the device as its record must say *before* anything goes."""

    device: DeviceRecord  # the GI's ID and no CI identity -- or, with the GI kept, the device as recorded
    gpu_instance: GpuInstanceInfo
    compute_instances: tuple[ComputeInstanceInfo, ...]  # destroyed first
    destroy_gpu_instance: bool  # False: the GI is someone else's; only migdra's own CI in it goes


def _release_where(device: DeviceRecord) -> str:
    return f"device {device.intent.device_name}: GPU {device.intent.gpu_uuid}"


@contextlib.contextmanager
def _release_errors(device: DeviceRecord, doing: str) -> Iterator[None]:
    """NVML's refusal of a release step as the claim's :class:`ReleaseError`: in use (a process holds
    the device: kubelet retries), or any other failure of ``doing``."""
    where = _release_where(device)
    try:
        yield
    except NvmlInUse as e:
        raise ReleaseError(f"{where}: the MIG device is still in use ({e}); kubelet retries") from e
    except NvmlError as e:
        raise ReleaseError(f"{where}: {doing} at {device.intent.placement} failed: {e}") from e


def find_instance_to_release(nvml: Nvml, device: DeviceRecord) -> InstanceToRelease | None:
    """The instance the exclusive MIG ``device`` records, if NVML shows it is still migdra's; None when
    nothing of migdra's is left to destroy (the device counts as released).  Reads only.

    Nothing is destroyed unless the record and NVML agree on identity:

    - GI ID recorded: that GI, if its profile and placement still match; else it is gone (released).
    - MIG UUID recorded too: the GI must hold the compute instance with that UUID and no other; a GI
      without it is someone else's, even with the same ID (an operator re-created it), and is left
      alone, loudly -- only migdra's own CI, if the GI still holds it beside another, is destroyed.
    - GI ID unknown (a crash before the ID was recorded): the GI at exactly the recorded placement
      with the recorded profile, only if the record proves migdra created it
      (:func:`find_unrecorded_gpu_instance`); any other GI there is left alone, loudly, and the
      device counts as released (nothing of migdra's is left).
    - With no CI identity recorded (the plugin stopped between creating the GI and recording its
      CI), the CIs inside the (ours) GI are destroyed.

    The returned ``device`` names the GI alone (its ID, no CI identity): the service records it before
    :func:`destroy_instance` runs, so a crash or a refused GI destroy after the CI is gone is retried
    against a GI of migdra's, not against a CI that no longer is (which would make the GI look foreign).
    A share with its GI's ID recorded is released by :func:`destroy_share_compute_instance` and
    :func:`destroy_shared_gpu_instance_if_last`; one without is released here, as an exclusive device
    (its GI, if migdra made it, is empty).  Raises :class:`ReleaseError` when NVML cannot be read.
    """
    intent = device.intent
    assert intent.is_mig, "a whole GPU created nothing"
    assert not intent.admin_access, "admin access created nothing"
    assert intent.placement is not None
    assert intent.profile_id is not None
    where = _release_where(device)
    with _release_errors(device, "destroying the instance"):
        gi = _find_recorded_gpu_instance(nvml, device)
    if gi is None:
        log.info("%s: no GPU instance left at %s, nothing to destroy", where, intent.placement)
        return None
    if device.mig_uuid is not None:
        theirs = [ci for ci in gi.compute_instances if ci.mig_uuid != device.mig_uuid]
        ours = [ci for ci in gi.compute_instances if ci.mig_uuid == device.mig_uuid]
        if theirs or not ours:
            log.error(
                "NOT DESTROYED: %s: GI %d at %s does not hold migdra's compute instance %s (it holds %s); "
                "it is not the instance migdra created, leaving it alone",
                where,
                gi.gpu_instance_id,
                intent.placement,
                device.mig_uuid,
                ", ".join(ci.mig_uuid for ci in gi.compute_instances) or "none",
            )
            if not ours:
                return None
            return InstanceToRelease(device, gi, tuple(ours), destroy_gpu_instance=False)
    releasing = device.model_copy(
        update={
            "gpu_instance_id": gi.gpu_instance_id,
            "compute_instance_id": None,
            "compute_instance_profile_id": None,
            "mig_uuid": None,
        }
    )
    return InstanceToRelease(releasing, gi, tuple(gi.compute_instances), destroy_gpu_instance=True)


def destroy_instance(nvml: Nvml, release: InstanceToRelease) -> None:
    """Destroy what :func:`find_instance_to_release` proved migdra's: the compute instances first, then
    the GI (unless it is someone else's).  An instance already gone counts as destroyed.  Raises
    :class:`ReleaseError` when NVML refuses (a process holds the device: kubelet retries)."""
    device = release.device
    gi = release.gpu_instance
    gpu_uuid = device.intent.gpu_uuid
    with _release_errors(device, "destroying the instance"):
        for ci in release.compute_instances:
            _destroy_compute_instance(nvml, gpu_uuid, gi.gpu_instance_id, ci.compute_instance_id)
        if not release.destroy_gpu_instance:
            return
        _destroy_gpu_instance(nvml, gpu_uuid, gi.gpu_instance_id)
    log.info(
        "destroyed GI %d at %s on GPU %s (%s)",
        gi.gpu_instance_id,
        device.intent.placement,
        gpu_uuid,
        _release_where(device),
    )


def destroy_share_compute_instance(
    nvml: Nvml, device: DeviceRecord, others: Sequence[ClaimRecord]
) -> DeviceRecord | None:
    """Destroy the share ``device``'s own compute instance; the device as its record must say now (the
    shared GI alone, no CI identity), or None when the shared GI is gone (nothing of the share is left).

    ``others``: every other claim's record, read under the GPU's lock.  Identity first, as for
    exclusive devices: the GI with the recorded ID must still be the recorded profile at the recorded
    placement (else it is not migdra's any more: nothing is destroyed, None).  The share's CI is the one
    with the recorded MIG UUID; with none recorded (a crash between asking NVML for the CI and
    recording it) the CI at exactly the recorded CI placement that was not in the GI then
    (``computeInstancesBefore``) and that no other record names; with no request recorded, the share
    has no CI.  The service records the returned device before the GI's turn
    (:func:`destroy_shared_gpu_instance_if_last`), so a crash or a refusal after the CI is gone never
    looks for that CI again -- another share may get its placement.  Raises :class:`ReleaseError`
    when NVML refuses.
    """
    intent = device.intent
    assert intent.is_share, "an exclusive device is released by find_instance_to_release"
    assert device.gpu_instance_id is not None, "a share without its GI's ID is released as an exclusive device"
    gpu_uuid = intent.gpu_uuid
    where = _release_where(device)
    with _release_errors(device, "releasing the share"):
        gi = _find_recorded_gpu_instance(nvml, device)
        if gi is None:
            log.info("%s: shared GI %s is gone, nothing to destroy", where, device.gpu_instance_id)
            return None
        named: set[tuple[int | None, str | None]] = {
            (d.gpu_instance_id, d.mig_uuid)
            for record in others
            for d in record.devices
            if d.intent.gpu_uuid == gpu_uuid and d.mig_uuid is not None
        }
        ours = _find_share_compute_instance(device, gi, named)
        if ours is not None:
            _destroy_compute_instance(nvml, gpu_uuid, gi.gpu_instance_id, ours.compute_instance_id)
            log.info(
                "%s: destroyed the share's CI %d (%s) in GI %d",
                where,
                ours.compute_instance_id,
                ours.mig_uuid,
                gi.gpu_instance_id,
            )
    return device.model_copy(
        update={
            "compute_instance_id": None,
            "compute_instance_profile_id": None,
            "mig_uuid": None,
            "compute_instances_before": None,
            "compute_instance_placement": None,
        }
    )


def destroy_shared_gpu_instance_if_last(nvml: Nvml, device: DeviceRecord, others: Sequence[ClaimRecord]) -> None:
    """Destroy the shared GI of ``device`` -- a share whose own CI is gone
    (:func:`destroy_share_compute_instance`) -- only if no other claim's record names it (the last
    share) and it holds no compute instance at all.

    A CI no record names inside the GI (someone else's) keeps the GI, loudly.  The last share destroys
    the GI whoever created it: every GI a share record names is migdra's (docs/prepare.md §4b).  Raises
    :class:`ReleaseError` when NVML refuses.
    """
    intent = device.intent
    assert device.gpu_instance_id is not None
    gpu_uuid = intent.gpu_uuid
    gi_id = device.gpu_instance_id
    where = _release_where(device)
    # Only shares of this very device count: GI IDs are reused, so a stale record of another device
    # (an exclusive claim whose GI was destroyed before its record was dropped) naming the same ID must
    # not keep this GI alive -- it would leak once that record is rolled back.
    sharers = [
        r.label
        for r in others
        if any(
            d.intent.is_share
            and d.intent.gpu_uuid == gpu_uuid
            and d.intent.device_name == intent.device_name
            and d.gpu_instance_id == gi_id
            for d in r.devices
        )
    ]
    if sharers:
        log.info("%s: shared GI %d stays, claims %s still use it", where, gi_id, ", ".join(sharers))
        return
    with _release_errors(device, "releasing the share"):
        left = list(nvml.gpu_instance(gpu_uuid, gi_id).compute_instances)
        if left:
            log.error(
                "NOT DESTROYED: %s: shared GI %d holds compute instance(s) %s that no claim of migdra's names; "
                "leaving it alone",
                where,
                gi_id,
                ", ".join(ci.mig_uuid for ci in left),
            )
            return
        _destroy_gpu_instance(nvml, gpu_uuid, gi_id)
    log.info("%s: destroyed shared GI %d at %s (its last share)", where, gi_id, intent.placement)


def _find_share_compute_instance(
    device: DeviceRecord, gi: GpuInstanceInfo, named: set[tuple[int | None, str | None]]
) -> ComputeInstanceInfo | None:
    """The CI of the share ``device`` records in ``gi`` (see :func:`destroy_share_compute_instance`); None: it
    has none."""
    if device.mig_uuid is not None:
        return next((ci for ci in gi.compute_instances if ci.mig_uuid == device.mig_uuid), None)
    if device.compute_instances_before is None or device.compute_instance_placement is None:
        return None  # NVML was never asked for this share's CI
    candidate = next((ci for ci in gi.compute_instances if ci.placement == device.compute_instance_placement), None)
    if candidate is None:
        return None
    if candidate.compute_instance_id in device.compute_instances_before or (
        (gi.gpu_instance_id, candidate.mig_uuid) in named
    ):
        log.warning(
            "device %s: CI %d (%s) at %s in GI %d is not this share's (it stood before, or another claim names it); "
            "left alone",
            device.intent.device_name,
            candidate.compute_instance_id,
            candidate.mig_uuid,
            candidate.placement,
            gi.gpu_instance_id,
        )
        return None
    if device.compute_instance_profile_id is not None and candidate.profile_id != device.compute_instance_profile_id:
        return None
    return candidate


def _find_recorded_gpu_instance(nvml: Nvml, device: DeviceRecord) -> GpuInstanceInfo | None:
    intent = device.intent
    if device.gpu_instance_id is not None:
        try:
            gi = nvml.gpu_instance(intent.gpu_uuid, device.gpu_instance_id)
        except NvmlNotFound:
            return None
        if gi.profile_id != intent.profile_id or gi.placement != intent.placement:
            log.warning(
                "GI %d on GPU %s is now profile %d at %s, not the recorded %s at %s: not ours, left alone",
                gi.gpu_instance_id,
                intent.gpu_uuid,
                gi.profile_id,
                gi.placement,
                intent.profile_id,
                intent.placement,
            )
            return None
        return gi
    ours, stranger = find_unrecorded_gpu_instance(device, nvml.gpu_instances(intent.gpu_uuid))
    if stranger is not None:
        log.error(
            "NOT DESTROYED: device %s of GPU %s: GI %d (profile %d at %s) stands at the recorded placement, but "
            "migdra did not create it: %s; left alone",
            intent.device_name,
            intent.gpu_uuid,
            stranger[0].gpu_instance_id,
            stranger[0].profile_id,
            stranger[0].placement,
            stranger[1],
        )
    return ours


def find_unrecorded_gpu_instance(
    device: DeviceRecord, instances: Sequence[GpuInstanceInfo]
) -> tuple[GpuInstanceInfo | None, tuple[GpuInstanceInfo, str] | None]:
    """For a device record without a GI ID: (the GI migdra created, None) or (None, (a stranger, why)).

    Pure.  A GI of the recorded profile at exactly the recorded placement is migdra's only if all of:

    - the record says NVML was asked for it (``gpuInstancesBefore`` is written, under the GPU's lock
      after the placement was found free, *before* the NVML call): without that, the crash came
      before the call and any GI there was created by someone else afterwards;
    - it is not one of the GIs that stood on the GPU at that moment;
    - it holds no compute instance: migdra records a GI's ID before it creates a compute instance in
      it, so a GI of migdra's whose ID is unrecorded is empty.

    ``(None, None)``: no GI of that profile at that placement.
    """
    intent = device.intent
    candidate = next(
        (gi for gi in instances if gi.placement == intent.placement and gi.profile_id == intent.profile_id), None
    )
    if candidate is None:
        return None, None
    if device.gpu_instances_before is None:
        return None, (candidate, "the record shows the plugin stopped before it asked NVML for a GPU instance")
    if candidate.gpu_instance_id in device.gpu_instances_before:
        return None, (candidate, "it already stood on the GPU when migdra asked NVML for its own")
    if candidate.compute_instances:
        uuids = ", ".join(ci.mig_uuid for ci in candidate.compute_instances)
        return None, (
            candidate,
            f"it holds compute instance(s) {uuids}, and migdra records a GI's ID before it creates a compute "
            "instance in it",
        )
    return candidate, None


def _describe_occupant(nvml: Nvml, gpu_uuid: str, placement: Placement) -> str:
    try:
        occupant = find_overlapping_instance(nvml.gpu_instances(gpu_uuid), placement)
    except NvmlError:
        return ""
    if occupant is None:
        return ""
    return f" by GPU instance {occupant.gpu_instance_id} (profile {occupant.profile_id} at {occupant.placement})"


def _destroy_compute_instance(nvml: Nvml, gpu_uuid: str, gpu_instance_id: int, compute_instance_id: int) -> None:
    with contextlib.suppress(NvmlNotFound):  # already gone: the goal of a destroy is reached
        nvml.destroy_compute_instance(gpu_uuid, gpu_instance_id, compute_instance_id)


def _destroy_gpu_instance(nvml: Nvml, gpu_uuid: str, gpu_instance_id: int) -> None:
    with contextlib.suppress(NvmlNotFound):
        nvml.destroy_gpu_instance(gpu_uuid, gpu_instance_id)


# -- a record's instances, as NVML shows them now ----------------------------------------------------


def compute_verification_problems(record: ClaimRecord, instances: Mapping[str, Sequence[GpuInstanceInfo]]) -> list[str]:
    """Why ``record``'s instances do not match NVML's ``instances`` (per GPU UUID); [] = verified.  Pure."""
    problems: list[str] = []
    for device in record.devices:
        intent = device.intent
        if intent.admin_access or not intent.is_mig:
            continue
        name = intent.device_name
        if device.gpu_instance_id is None or device.compute_instance_id is None or device.mig_uuid is None:
            problems.append(f"{name}: the record lacks the realized GI/CI identity")
            continue
        gi = next((g for g in instances.get(intent.gpu_uuid, ()) if g.gpu_instance_id == device.gpu_instance_id), None)
        if gi is None:
            problems.append(f"{name}: GI {device.gpu_instance_id} no longer exists on GPU {intent.gpu_uuid}")
            continue
        if gi.placement != intent.placement or gi.profile_id != intent.profile_id:
            problems.append(
                f"{name}: GI {gi.gpu_instance_id} is profile {gi.profile_id} at {gi.placement}, the record says "
                f"profile {intent.profile_id} at {intent.placement}"
            )
            continue
        ci = next((c for c in gi.compute_instances if c.compute_instance_id == device.compute_instance_id), None)
        if ci is None:
            problems.append(f"{name}: CI {device.compute_instance_id} of GI {gi.gpu_instance_id} no longer exists")
        elif ci.mig_uuid != device.mig_uuid:
            problems.append(f"{name}: CI {ci.compute_instance_id} is {ci.mig_uuid}, the record says {device.mig_uuid}")
    return problems


def read_instances(
    nvml: Nvml, gpu_locks: KeyedLocks, gpu_uuids: set[str]
) -> tuple[dict[str, list[GpuInstanceInfo]], set[str]]:
    """GPU instances per GPU, and the GPUs that could not be read (to be left alone).

    Each GPU is read under its lock: a GI that another plugin process destroys in the middle of a
    read would make NVML fail the read (a stale handle), and a GPU that cannot be read is not acted on.
    """
    found: dict[str, list[GpuInstanceInfo]] = {}
    unreadable: set[str] = set()
    for gpu_uuid in sorted(gpu_uuids):
        try:
            with gpu_locks.hold(gpu_uuid):
                found[gpu_uuid] = nvml.gpu_instances(gpu_uuid)
        except (NvmlError, LockTimeoutError) as e:
            log.error("cannot read the instances of GPU %s (%s); its records are left untouched", gpu_uuid, e)
            unreadable.add(gpu_uuid)
    return found, unreadable


def record_gpus(record: ClaimRecord) -> set[str]:
    """The GPUs on which ``record`` may have created instances (admin access and whole GPUs create none)."""
    return {d.intent.gpu_uuid for d in record.devices if d.intent.is_mig and not d.intent.admin_access}


def read_verification_problems(nvml: Nvml, gpu_locks: KeyedLocks, record: ClaimRecord) -> list[str] | None:
    """Why a completed ``record`` does not match NVML now ([] = verified); None when a GPU is unreadable."""
    instances, unreadable = read_instances(nvml, gpu_locks, record_gpus(record))
    if unreadable:
        return None
    return compute_verification_problems(record, instances)
