"""The hardware boundary: every NVML call migdra makes goes through :class:`Nvml`.

This is the only production module that imports ``pynvml``.  It turns ctypes structs and handles into
the frozen values of :mod:`dra_driver.nvml.types` and translates every ``pynvml.NVMLError`` into the
:mod:`dra_driver.nvml.errors` hierarchy in one place (:func:`_translate`).  It holds no MIG knowledge
of its own: what NVML reports is the truth here; the catalog is consulted by callers, never by this
module.

The simulator (:mod:`dra_driver.nvml.sim`) replaces the *library* underneath ``pynvml``, not this
class, so the code path tested without GPUs is the code path that runs on them.

Thread safety: NVML itself is thread-safe; the handle and profile caches are guarded by a lock.
Callers serialise mutations per GPU (the kubelet plugin holds per-GPU locks).

Profile caches: a GPU's GI profiles and their possible placements are fixed by the GPU and the driver
for as long as its MIG mode stays as it is, yet reading them is ~17 profile-info and placement calls,
~10 ms on a real H200 (recorded; docs/nvml-mig.md, "Timing") -- and a prepare reads them several
times per claim.  So :meth:`Nvml.gpu_instance_profiles` keeps them per GPU UUID together with the MIG mode
(current and pending) they were read under, and re-checks that mode with one ``nvmlDeviceGetMigMode``
(~160 us recorded) on every use: a mode change made by anyone -- our :meth:`Nvml.set_mig_mode`, an
admin's nvidia-smi, another process -- is seen on the next read.

The compute-instance profiles a GI offers depend on the GI's profile (and the GPU), not on the GI:
every 2g.20gb GI of a GPU offers the same CI profiles.  Reading them is one
``nvmlGpuInstanceGetComputeInstanceProfileInfoV`` per ``NVML_COMPUTE_INSTANCE_PROFILE_*`` index (9
calls), and listing a GI's compute instances needs them -- for every GI that
:meth:`Nvml.gpu_instances` lists.  So they are cached the same way, per (GPU UUID, GI profile ID)
under the MIG mode they were read under, validated by the same mode read: a listing reads the mode
once and uses it for the GI table and every GI's CI table.  A GI just created has no compute
instances, so :meth:`Nvml.create_gpu_instance` does not ask NVML for them.

Any read of a GPU's MIG mode that finds it changed since the last one drops that GPU's tables of both
kinds (:meth:`Nvml._saw_mode`), so a mode switched off and on again, seen in between, is read afresh.
A driver reload needs a new ``nvmlInit``, and :meth:`Nvml.init` / :meth:`Nvml.shutdown` drop both
caches.  A table read while the mode changed (the mode is read again after the read) is not kept.
Nothing else of the GPU's state (instances, capacity) is cached.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

import pynvml

from dra_driver.mig.catalog import Placement
from dra_driver.nvml.errors import (
    NvmlComputeInstanceLeft,
    NvmlError,
    NvmlInsufficientResources,
    NvmlInUse,
    NvmlInvalidArgument,
    NvmlLibraryUnavailable,
    NvmlNoPermission,
    NvmlNotFound,
    NvmlNotSupported,
    NvmlUnexpectedError,
)
from dra_driver.nvml.types import (
    NOT_ATTRIBUTED,
    ComputeInstanceInfo,
    ComputeInstanceProfileInfo,
    GpuInfo,
    GpuInstanceInfo,
    GpuInstanceProfileInfo,
    MigMode,
    MigModeState,
    NvmlEvent,
    NvmlEventType,
)

_ERROR_CLASSES: dict[int, type[NvmlError]] = {
    pynvml.NVML_ERROR_UNINITIALIZED: NvmlLibraryUnavailable,
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: NvmlLibraryUnavailable,
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: NvmlLibraryUnavailable,
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND: NvmlLibraryUnavailable,
    pynvml.NVML_ERROR_NO_PERMISSION: NvmlNoPermission,
    pynvml.NVML_ERROR_NOT_SUPPORTED: NvmlNotSupported,
    pynvml.NVML_ERROR_INVALID_ARGUMENT: NvmlInvalidArgument,
    pynvml.NVML_ERROR_NOT_FOUND: NvmlNotFound,
    pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES: NvmlInsufficientResources,
    pynvml.NVML_ERROR_IN_USE: NvmlInUse,
}

_GI_PROFILE_COUNT: int = pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT
_CI_PROFILE_COUNT: int = pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT
_CI_ENGINE_SHARED: int = pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
DESTROYED_AGAIN = "it was destroyed again"
"""What became of a CI this backend created but does not return, when destroying it worked."""


def _translate(operation: str, gpu: str | None, exc: pynvml.NVMLError) -> NvmlError:
    """The one place an NVML return code becomes a migdra error."""
    code = int(exc.value)
    try:
        message = str(exc)
    except Exception:  # str() calls back into the library; a broken library must not hide the code
        message = f"NVML error {code}"
    return _error_of(operation, gpu, code, message, type(exc).__name__)


def _error_of(operation: str, gpu: str | None, code: int, message: str, nvml_error_name: str | None) -> NvmlError:
    """The migdra error for an NVML return code, whether pynvml raised it or returned it (activation status)."""
    error_class = _ERROR_CLASSES.get(code, NvmlUnexpectedError)
    return error_class(operation, code, message, gpu, nvml_error_name=nvml_error_name)


TIMED_CALL_SYMBOLS: dict[str, tuple[str, ...]] = {
    "GetHandleByIndex": ("nvmlDeviceGetHandleByIndex_v2",),
    "GetMigMode": ("nvmlDeviceGetMigMode",),
    "GetUUID": ("nvmlDeviceGetUUID",),
    "GetGpuInstanceProfileInfo": ("nvmlDeviceGetGpuInstanceProfileInfoV",),  # pynvml picks V for version 2
    # Two C calls per sample: the count, then the placements (as every placements read here makes them).
    "GetGpuInstancePossiblePlacements": ("nvmlDeviceGetGpuInstancePossiblePlacements_v2",) * 2,
    "GetGpuInstanceRemainingCapacity": ("nvmlDeviceGetGpuInstanceRemainingCapacity",),
    "GetGpuInstances": ("nvmlDeviceGetGpuInstances",),
}
"""The NVML C symbols pynvml calls for one sample of each call :meth:`Nvml.time_read_only_calls` times,
by the name the recording keeps its latency under (``latency_us_p50_p99_read_only_calls``).  The
simulator turns a recording into per-symbol latency with it (``dra_driver.nvml.sim.recorded_latency``);
tests/integration/test_sim_latency_profile.py holds it to the calls the timing really makes."""

INIT_SYMBOLS: tuple[str, ...] = ("nvmlInitWithFlags",)
"""What ``pynvml.nvmlInit`` calls (after loading the library): a recording's ``nvmlInit_ms`` is timed
around the whole session open, library load included."""

CallObserver = Callable[[str, float, str], None]
"""``(NVML function, seconds, result)``: told of every NVML call, ``result`` is ``success`` or the
migdra error class (``NvmlNotSupported``).  Metrics hang here, so this module needs no metrics library."""


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


_V = TypeVar("_V")
_K = TypeVar("_K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class _ProfileTable(Generic[_V]):
    """A cached profile table (a GPU's GI profiles, or one GI profile's CI profiles) and the MIG mode
    it was read under: it is served only while the GPU's mode is still that one."""

    mig_mode: MigModeState | None
    profiles: tuple[_V, ...]


class Nvml:
    """One NVML session: enumerate GPUs and create / inspect / destroy MIG instances.

    GPUs are addressed by UUID (stable across reboots and re-enumeration), GPU instances by
    ``(gpu_uuid, gpu_instance_id)`` and compute instances by ``(gpu_uuid, gpu_instance_id,
    compute_instance_id)`` -- the identities NVML itself keeps.
    """

    def __init__(self, observe_call: CallObserver | None = None) -> None:
        self._handles: dict[str, Any] = {}
        self._profile_tables: dict[str, _ProfileTable[GpuInstanceProfileInfo]] = {}  # by GPU UUID
        # By (GPU UUID, GI profile ID): CI profiles depend on the GI's profile, not on the GI.
        self._ci_profile_tables: dict[tuple[str, int], _ProfileTable[ComputeInstanceProfileInfo]] = {}
        # The MIG mode each GPU was last seen in: a change seen by any read drops the GPU's tables.
        self._seen_modes: dict[str, MigModeState | None] = {}
        # One reader per table fills it: threads that miss at once wait for that read, not repeat it.
        self._profile_fill_locks: dict[Hashable, threading.Lock] = {}
        # Bumped by init / shutdown, so a table read before either is never stored after it.
        self._session = 0
        self._lock = threading.Lock()
        self._initialised = False
        self._observe_call = observe_call

    @contextmanager
    def _calling(self, operation: str, gpu: str | None = None) -> Iterator[None]:
        """Translate NVML errors of the calls inside (the one place), and time them for the observer."""
        started = time.perf_counter()
        result = "success"
        try:
            yield
        except pynvml.NVMLError as exc:
            error = _translate(operation, gpu, exc)
            result = type(error).__name__
            raise error from exc
        finally:
            if self._observe_call is not None:
                self._observe_call(operation.split("(", 1)[0], time.perf_counter() - started, result)

    # -- session ---------------------------------------------------------------------------------

    def init(self) -> None:
        self._forget_profiles()  # a new session may be a new driver (reloaded, upgraded)
        with self._calling("nvmlInit"):
            pynvml.nvmlInit()
        self._initialised = True

    def shutdown(self) -> None:
        if not self._initialised:
            return
        self._initialised = False
        self._forget_profiles()
        with self._lock:
            self._handles.clear()
        with self._calling("nvmlShutdown"):
            pynvml.nvmlShutdown()

    def __enter__(self) -> Nvml:
        self.init()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    # -- system ----------------------------------------------------------------------------------

    def driver_version(self) -> str:
        with self._calling("nvmlSystemGetDriverVersion"):
            return _text(pynvml.nvmlSystemGetDriverVersion())

    def nvml_version(self) -> str:
        """NVML's own version, e.g. ``13.580.159.04`` (CUDA major, then the driver version)."""
        with self._calling("nvmlSystemGetNVMLVersion"):
            return _text(pynvml.nvmlSystemGetNVMLVersion())

    def cuda_driver_version(self) -> str:
        """CUDA version the driver supports, as ``major.minor`` (NVML reports e.g. 13000)."""
        with self._calling("nvmlSystemGetCudaDriverVersion"):
            value = int(pynvml.nvmlSystemGetCudaDriverVersion())
        return f"{value // 1000}.{(value % 1000) // 10}"

    # -- GPUs ------------------------------------------------------------------------------------

    def list_gpus(self) -> list[GpuInfo]:
        with self._calling("nvmlDeviceGetCount"):
            count = int(pynvml.nvmlDeviceGetCount())
        gpus = []
        for index in range(count):
            with self._calling("nvmlDeviceGetHandleByIndex", f"GPU {index}"):
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpu = self._gpu_info(index, handle)
            with self._lock:
                self._handles[gpu.uuid] = handle
            gpus.append(gpu)
        return gpus

    def gpu(self, gpu_uuid: str) -> GpuInfo:
        handle = self._handle(gpu_uuid)
        with self._calling("nvmlDeviceGetIndex", gpu_uuid):
            index = int(pynvml.nvmlDeviceGetIndex(handle))
        return self._gpu_info(index, handle)

    def mig_mode(self, gpu_uuid: str) -> MigModeState | None:
        return self._mig_mode(self._handle(gpu_uuid), gpu_uuid)

    def set_mig_mode(self, gpu_uuid: str, enabled: bool) -> MigModeState:
        """Request MIG on or off.  On Ampere only the pending mode changes until a GPU reset.

        Raises :class:`NvmlInUse` when NVML reports the GPU is not idle (the activation status).
        """
        handle = self._handle(gpu_uuid)
        mode = MigMode.ENABLED if enabled else MigMode.DISABLED
        with self._calling("nvmlDeviceSetMigMode", gpu_uuid):
            activation = int(pynvml.nvmlDeviceSetMigMode(handle, int(mode)))
        if activation != pynvml.NVML_SUCCESS:
            raise _error_of("nvmlDeviceSetMigMode (activation)", gpu_uuid, activation, _error_string(activation), None)
        state = self._mig_mode(handle, gpu_uuid)
        if state is None:
            raise _error_of("nvmlDeviceGetMigMode", gpu_uuid, pynvml.NVML_ERROR_NOT_SUPPORTED, "Not Supported", None)
        return state

    # -- GPU-instance profiles -------------------------------------------------------------------

    @property
    def gpu_instance_profile_index_count(self) -> int:
        """``NVML_GPU_INSTANCE_PROFILE_COUNT`` as pynvml knows it (the driver may know fewer)."""
        return _GI_PROFILE_COUNT

    def gpu_instance_profiles(self, gpu_uuid: str) -> list[GpuInstanceProfileInfo]:
        """Every GI profile the GPU reports, with its possible placements (works with MIG off too).

        Cached per GPU while its MIG mode stays the same (see the module docstring): a repeated call
        costs one ``nvmlDeviceGetMigMode``.
        """
        return self.mig_mode_and_profiles(gpu_uuid)[1]

    def mig_mode_and_profiles(self, gpu_uuid: str) -> tuple[MigModeState | None, list[GpuInstanceProfileInfo]]:
        """The GPU's MIG mode now and its GI profiles under that mode, for one ``nvmlDeviceGetMigMode``
        when the profiles are cached: what a caller that needs both would otherwise read the mode twice for."""
        handle = self._handle(gpu_uuid)
        mode = self._mig_mode(handle, gpu_uuid)
        return mode, list(self._profile_table(handle, gpu_uuid, mode))

    def gpu_instance_profile(self, gpu_uuid: str, nvml_profile_index: int) -> GpuInstanceProfileInfo:
        """One GI profile by ``NVML_GPU_INSTANCE_PROFILE_*`` index, with its possible placements.

        Always asks NVML (never the cache): recordings (:mod:`dra_driver.nvml.recording`) hold what
        the hardware answers now.  Raises :class:`NvmlNotSupported` when the GPU lacks it and
        :class:`NvmlInvalidArgument` when the driver does not know the index.
        """
        return self._read_gpu_instance_profile(self._handle(gpu_uuid), gpu_uuid, nvml_profile_index)

    def _read_gpu_instance_profile(self, handle: Any, gpu_uuid: str, nvml_profile_index: int) -> GpuInstanceProfileInfo:
        with self._calling("nvmlDeviceGetGpuInstanceProfileInfo", gpu_uuid):
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, nvml_profile_index, 2)
        return GpuInstanceProfileInfo(
            nvml_profile_index=nvml_profile_index,
            profile_id=int(info.id),
            name=_text(info.name),
            slice_count=int(info.sliceCount),
            instance_count=int(info.instanceCount),
            multiprocessor_count=int(info.multiprocessorCount),
            copy_engine_count=int(info.copyEngineCount),
            decoder_count=int(info.decoderCount),
            encoder_count=int(info.encoderCount),
            jpeg_count=int(info.jpegCount),
            ofa_count=int(info.ofaCount),
            memory_size_mb=int(info.memorySizeMB),
            is_p2p_supported=bool(info.isP2pSupported),
            placements=self._possible_placements(handle, gpu_uuid, int(info.id)),
        )

    def gpu_instance_count(self, gpu_uuid: str, profile_id: int, instance_count: int) -> int:
        """How many GIs of ``profile_id`` NVML lists, asked even with MIG off (a recording asks as-is)."""
        handle = self._handle(gpu_uuid)
        array = (pynvml.c_nvmlGpuInstance_t * max(instance_count, 1))()
        count = ctypes.c_uint(0)
        with self._calling("nvmlDeviceGetGpuInstances", gpu_uuid):
            pynvml.nvmlDeviceGetGpuInstances(handle, profile_id, array, ctypes.byref(count))
        return int(count.value)

    def max_mig_device_count(self, gpu_uuid: str) -> int:
        """``nvmlDeviceGetMaxMigDeviceCount``: 0 when MIG is off."""
        handle = self._handle(gpu_uuid)
        with self._calling("nvmlDeviceGetMaxMigDeviceCount", gpu_uuid):
            return int(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle))

    def time_read_only_calls(self, gpu: GpuInfo, profile_id: int, repeats: int) -> dict[str, list[float]]:
        """Microseconds each read-only MIG query takes, ``repeats`` times each, timed around pynvml alone.

        For recordings of real hardware (``migdra hw record``): the calls the node plugin makes when it
        reads a GPU's MIG state.  A call the GPU refuses is left out.  Nothing here changes the GPU.
        Asks NVML every time (no cache).  A call added here needs its C symbols in :data:`TIMED_CALL_SYMBOLS`.
        """
        handle = self._handle(gpu.uuid)
        calls: dict[str, Any] = {
            "GetHandleByIndex": lambda: pynvml.nvmlDeviceGetHandleByIndex(gpu.index),
            "GetMigMode": lambda: pynvml.nvmlDeviceGetMigMode(handle),
            "GetUUID": lambda: pynvml.nvmlDeviceGetUUID(handle),
            "GetGpuInstanceProfileInfo": lambda: pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, 0, 2),
            "GetGpuInstancePossiblePlacements": lambda: self._possible_placements(handle, gpu.uuid, profile_id),
            "GetGpuInstanceRemainingCapacity": lambda: pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(
                handle, profile_id
            ),
            "GetGpuInstances": lambda: self.gpu_instance_count(gpu.uuid, profile_id, 8),
        }
        timings: dict[str, list[float]] = {}
        for name, call in calls.items():
            samples = []
            try:
                for _ in range(repeats):
                    started = time.perf_counter_ns()
                    call()
                    samples.append((time.perf_counter_ns() - started) / 1000)
            except (pynvml.NVMLError, NvmlError):
                continue
            timings[name] = samples
        return timings

    def remaining_capacity(self, gpu_uuid: str, profile_id: int) -> int:
        handle = self._handle(gpu_uuid)
        with self._calling("nvmlDeviceGetGpuInstanceRemainingCapacity", gpu_uuid):
            return int(pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, profile_id))

    # -- GPU instances ---------------------------------------------------------------------------

    def gpu_instances(self, gpu_uuid: str) -> list[GpuInstanceInfo]:
        """Every GPU instance on the GPU (ours or not), with its compute instances; [] when MIG is off."""
        handle = self._handle(gpu_uuid)
        mode = self._mig_mode(handle, gpu_uuid)
        if mode is None or not mode.enabled:
            return []
        found: list[GpuInstanceInfo] = []
        # The one mode just read validates the GI table and every GI's CI table: one check per listing.
        for profile in self._profile_table(handle, gpu_uuid, mode):
            array = (pynvml.c_nvmlGpuInstance_t * profile.instance_count)()
            count = ctypes.c_uint(0)
            with self._calling("nvmlDeviceGetGpuInstances", gpu_uuid):
                pynvml.nvmlDeviceGetGpuInstances(handle, profile.profile_id, array, ctypes.byref(count))
            found.extend(self._gpu_instance_info(gpu_uuid, handle, array[i], mode) for i in range(count.value))
        return sorted(found, key=lambda gi: gi.gpu_instance_id)

    def gpu_instance(self, gpu_uuid: str, gpu_instance_id: int) -> GpuInstanceInfo:
        gi_handle = self._gi_handle(gpu_uuid, gpu_instance_id)
        handle = self._handle(gpu_uuid)
        return self._gpu_instance_info(gpu_uuid, handle, gi_handle, self._mig_mode(handle, gpu_uuid))

    def create_gpu_instance(self, gpu_uuid: str, profile_id: int, placement: Placement) -> GpuInstanceInfo:
        """Create a GI of ``profile_id`` at exactly ``placement``; never anywhere else.

        Raises :class:`NvmlInsufficientResources` when the placement is occupied and
        :class:`NvmlInvalidArgument` when it is not a legal placement of the profile.
        """
        handle = self._handle(gpu_uuid)
        c_placement = pynvml.c_nvmlGpuInstancePlacement_t()
        c_placement.start = placement.start
        c_placement.size = placement.size
        operation = f"nvmlDeviceCreateGpuInstanceWithPlacement(profile {profile_id}, placement {placement})"
        with self._calling(operation, gpu_uuid):
            gi_handle = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, profile_id, ctypes.byref(c_placement))
        # A GI is created without compute instances (those are created one by one, by ID): nothing to list.
        created = self._bare_gpu_instance_info(gpu_uuid, gi_handle)
        if created.placement != placement or created.profile_id != profile_id:
            raise NvmlUnexpectedError(
                operation,
                pynvml.NVML_ERROR_UNKNOWN,
                f"NVML created GI {created.gpu_instance_id} (profile {created.profile_id}) at {created.placement}",
                gpu_uuid,
            )
        return created

    def destroy_gpu_instance(self, gpu_uuid: str, gpu_instance_id: int) -> None:
        """Destroy a GI.  Raises :class:`NvmlInUse` while compute instances or processes remain."""
        gi_handle = self._gi_handle(gpu_uuid, gpu_instance_id)
        with self._calling(f"nvmlGpuInstanceDestroy(GI {gpu_instance_id})", gpu_uuid):
            pynvml.nvmlGpuInstanceDestroy(gi_handle)

    # -- compute instances -----------------------------------------------------------------------

    def compute_instance_profiles(self, gpu_uuid: str, gpu_instance_id: int) -> list[ComputeInstanceProfileInfo]:
        """The CI profiles the GI offers, in index order.

        Cached per GI profile (see the module docstring): a repeated call costs the GI's handle, its
        info (for its profile) and one ``nvmlDeviceGetMigMode``, instead of one read per CI profile index.
        """
        gi_handle = self._gi_handle(gpu_uuid, gpu_instance_id)
        handle = self._handle(gpu_uuid)
        mode = self._mig_mode(handle, gpu_uuid)
        gi_profile_id = self._bare_gpu_instance_info(gpu_uuid, gi_handle).profile_id
        return list(self._ci_profile_table(handle, gi_handle, gpu_uuid, gi_profile_id, mode))

    def create_compute_instance(
        self, gpu_uuid: str, gpu_instance_id: int, ci_profile_index: int
    ) -> ComputeInstanceInfo:
        """Create a CI of the given ``NVML_COMPUTE_INSTANCE_PROFILE_*`` inside a GI.

        Reads that one CI profile (for its ID) from NVML, not from the CI table: which cached table
        applies depends on the GI's profile and the GPU's MIG mode, two calls to learn, to save one.
        A created CI that cannot be read back is destroyed again before the error is raised.
        """
        gi_handle = self._gi_handle(gpu_uuid, gpu_instance_id)
        operation = f"nvmlGpuInstanceCreateComputeInstance(GI {gpu_instance_id}, CI profile {ci_profile_index})"
        with self._calling(operation, gpu_uuid):
            info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi_handle, ci_profile_index, _CI_ENGINE_SHARED, 2
            )
            ci_handle = pynvml.nvmlGpuInstanceCreateComputeInstance(gi_handle, int(info.id))
        return self._read_back_compute_instance(operation, gpu_uuid, gpu_instance_id, ci_handle)

    def create_compute_instance_at(
        self, gpu_uuid: str, gpu_instance_id: int, ci_profile_index: int, placement: Placement
    ) -> ComputeInstanceInfo:
        """Create a CI of ``NVML_COMPUTE_INSTANCE_PROFILE_*`` ``ci_profile_index`` at exactly ``placement``
        (compute slices of the GI) with ``nvmlGpuInstanceCreateComputeInstanceWithPlacement``; never anywhere
        else: a shared GI's CIs are placed by migdra (``dra_driver.mig.compute_placement``) so that larger
        shares stay placeable, which NVML's own first-fit choice does not do.

        Raises :class:`NvmlInsufficientResources` when the placement overlaps a CI of the GI and
        :class:`NvmlInvalidArgument` when it is not a placement of the CI profile.  The created CI is read
        back and one NVML put elsewhere is an :class:`NvmlUnexpectedError`, as for GPU instances; so is a
        read-back that fails.  Either way the CI is destroyed again first (its handle is known here, and
        nowhere else: the caller gets no ID, so it could neither record nor destroy it), and the error
        says whether that worked; a misplaced CI that could not be destroyed is an
        :class:`NvmlComputeInstanceLeft` carrying its identity, for the caller to record.
        """
        gi_handle = self._gi_handle(gpu_uuid, gpu_instance_id)
        c_placement = pynvml.c_nvmlComputeInstancePlacement_t()
        c_placement.start = placement.start
        c_placement.size = placement.size
        operation = (
            f"nvmlGpuInstanceCreateComputeInstanceWithPlacement(GI {gpu_instance_id}, CI profile {ci_profile_index}, "
            f"placement {placement})"
        )
        with self._calling(operation, gpu_uuid):
            info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi_handle, ci_profile_index, _CI_ENGINE_SHARED, 2
            )
            ci_handle = pynvml.nvmlGpuInstanceCreateComputeInstanceWithPlacement(
                gi_handle, int(info.id), ctypes.byref(c_placement)
            )
        created = self._read_back_compute_instance(operation, gpu_uuid, gpu_instance_id, ci_handle)
        if created.placement != placement:
            undone = self._destroy_unreturned_compute_instance(gpu_uuid, ci_handle)
            message = f"NVML created CI {created.compute_instance_id} of GI {gpu_instance_id} at {created.placement}; "
            if undone != DESTROYED_AGAIN:
                raise NvmlComputeInstanceLeft(operation, pynvml.NVML_ERROR_UNKNOWN, message + undone, gpu_uuid, created)
            raise NvmlUnexpectedError(operation, pynvml.NVML_ERROR_UNKNOWN, message + undone, gpu_uuid)
        return created

    def _read_back_compute_instance(
        self, operation: str, gpu_uuid: str, gpu_instance_id: int, ci_handle: Any
    ) -> ComputeInstanceInfo:
        """The CI just created with ``operation``; a failed read-back destroys it again and raises
        :class:`NvmlUnexpectedError` (the caller never learns its ID, so it could not undo it)."""
        try:
            return self._compute_instance_info(gpu_uuid, gpu_instance_id, ci_handle)
        except NvmlError as e:
            undone = self._destroy_unreturned_compute_instance(gpu_uuid, ci_handle)
            raise NvmlUnexpectedError(
                operation,
                e.code,
                f"reading the created CI of GI {gpu_instance_id} back failed ({e}); {undone}",
                gpu_uuid,
            ) from e

    def _destroy_unreturned_compute_instance(self, gpu_uuid: str, ci_handle: Any) -> str:
        """Destroy a CI this backend created but will not return; what became of it, for the error."""
        try:
            with self._calling("nvmlComputeInstanceDestroy", gpu_uuid):
                pynvml.nvmlComputeInstanceDestroy(ci_handle)
        except NvmlError as e:
            return f"destroying it again failed, it is left in the GI ({e})"
        return DESTROYED_AGAIN

    def compute_instance_possible_placements(
        self, gpu_uuid: str, gpu_instance_id: int, ci_profile_index: int
    ) -> tuple[Placement, ...]:
        """Every placement (compute slices of the GI) a CI of ``ci_profile_index`` may have in this GI, free
        or not (``nvmlGpuInstanceGetComputeInstancePossiblePlacements``, asked twice: count, then the list)."""
        gi_handle = self._gi_handle(gpu_uuid, gpu_instance_id)
        operation = "nvmlGpuInstanceGetComputeInstancePossiblePlacements"
        with self._calling(operation, gpu_uuid):
            info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi_handle, ci_profile_index, _CI_ENGINE_SHARED, 2
            )
            count = ctypes.c_uint(0)
            pynvml.nvmlGpuInstanceGetComputeInstancePossiblePlacements(
                gi_handle, int(info.id), None, ctypes.byref(count)
            )
            if count.value == 0:
                return ()
            array = (pynvml.c_nvmlComputeInstancePlacement_t * count.value)()
            pynvml.nvmlGpuInstanceGetComputeInstancePossiblePlacements(
                gi_handle, int(info.id), array, ctypes.byref(count)
            )
        return tuple(Placement(start=int(array[i].start), size=int(array[i].size)) for i in range(count.value))

    def compute_instances(self, gpu_uuid: str, gpu_instance_id: int) -> list[ComputeInstanceInfo]:
        return list(self.gpu_instance(gpu_uuid, gpu_instance_id).compute_instances)

    def destroy_compute_instance(self, gpu_uuid: str, gpu_instance_id: int, compute_instance_id: int) -> None:
        """Destroy a CI.  Raises :class:`NvmlInUse` while a process holds its MIG device."""
        gi_handle = self._gi_handle(gpu_uuid, gpu_instance_id)
        operation = f"nvmlComputeInstanceDestroy(GI {gpu_instance_id}, CI {compute_instance_id})"
        with self._calling(operation, gpu_uuid):
            ci_handle = pynvml.nvmlGpuInstanceGetComputeInstanceById(gi_handle, compute_instance_id)
            pynvml.nvmlComputeInstanceDestroy(ci_handle)

    def mig_device_uuid(self, gpu_uuid: str, gpu_instance_id: int, compute_instance_id: int) -> str:
        gi_handle = self._gi_handle(gpu_uuid, gpu_instance_id)
        with self._calling("nvmlGpuInstanceGetComputeInstanceById", gpu_uuid):
            ci_handle = pynvml.nvmlGpuInstanceGetComputeInstanceById(gi_handle, compute_instance_id)
        return self._compute_instance_info(gpu_uuid, gpu_instance_id, ci_handle).mig_uuid

    # -- events ----------------------------------------------------------------------------------

    def watch_events(self) -> NvmlEventWatch:
        """A new NVML event set (``nvmlEventSetCreate``); register GPUs on it, then wait."""
        with self._calling("nvmlEventSetCreate"):
            event_set = pynvml.nvmlEventSetCreate()
        return NvmlEventWatch(self, event_set)

    # -- internals -------------------------------------------------------------------------------

    def _handle(self, gpu_uuid: str) -> Any:
        with self._lock:
            handle = self._handles.get(gpu_uuid)
        if handle is None:
            with self._calling("nvmlDeviceGetHandleByUUID", gpu_uuid):
                handle = pynvml.nvmlDeviceGetHandleByUUID(gpu_uuid)
            with self._lock:
                self._handles[gpu_uuid] = handle
        return handle

    def _gi_handle(self, gpu_uuid: str, gpu_instance_id: int) -> Any:
        handle = self._handle(gpu_uuid)
        with self._calling(f"nvmlDeviceGetGpuInstanceById(GI {gpu_instance_id})", gpu_uuid):
            return pynvml.nvmlDeviceGetGpuInstanceById(handle, gpu_instance_id)

    def _mig_mode(self, handle: Any, gpu_uuid: str) -> MigModeState | None:
        try:
            with self._calling("nvmlDeviceGetMigMode", gpu_uuid):
                current, pending = pynvml.nvmlDeviceGetMigMode(handle)
        except NvmlNotSupported:
            mode = None
        else:
            mode = MigModeState(current=MigMode(int(current)), pending=MigMode(int(pending)))
        self._saw_mode(gpu_uuid, mode)
        return mode

    def _saw_mode(self, gpu_uuid: str, mode: MigModeState | None) -> None:
        """Drop the GPU's profile tables when its MIG mode is seen to differ from the last one seen.

        Each table is served only under the mode it was read under anyway; dropping them as soon as any
        read (a listing that stops early with MIG off, ``mig_mode``, a GPU listing) sees a change also
        retires them across a change and its undoing (MIG off and on again) that this backend saw, and
        frees what no longer applies.  A change and its undoing that no read saw cannot be told apart.
        """
        with self._lock:
            if gpu_uuid in self._seen_modes and self._seen_modes[gpu_uuid] != mode:
                self._profile_tables.pop(gpu_uuid, None)
                for key in [key for key in self._ci_profile_tables if key[0] == gpu_uuid]:
                    del self._ci_profile_tables[key]
            self._seen_modes[gpu_uuid] = mode

    def _gpu_info(self, index: int, handle: Any) -> GpuInfo:
        where = f"GPU {index}"
        with self._calling("nvmlDeviceGetUUID", where):
            uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
        with self._calling("nvmlDeviceGetName", uuid):
            name = _text(pynvml.nvmlDeviceGetName(handle))
        with self._calling("nvmlDeviceGetMinorNumber", uuid):
            minor = int(pynvml.nvmlDeviceGetMinorNumber(handle))
        with self._calling("nvmlDeviceGetPciInfo", uuid):
            pci = pynvml.nvmlDeviceGetPciInfo(handle)
        with self._calling("nvmlDeviceGetArchitecture", uuid):
            architecture = int(pynvml.nvmlDeviceGetArchitecture(handle))
        with self._calling("nvmlDeviceGetCudaComputeCapability", uuid):
            major, minor_cc = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        with self._calling("nvmlDeviceGetMemoryInfo", uuid):
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        try:
            with self._calling("nvmlDeviceGetNumaNodeId", uuid):
                numa: int | None = int(pynvml.nvmlDeviceGetNumaNodeId(handle))
        except (NvmlNotSupported, NvmlLibraryUnavailable, NvmlInvalidArgument):
            numa = None  # older drivers lack the call; NUMA is optional information
        brand = self._optional_answer("nvmlDeviceGetBrand", uuid, lambda: pynvml.nvmlDeviceGetBrand(handle))
        addressing = self._optional_answer(
            "nvmlDeviceGetAddressingMode", uuid, lambda: pynvml.nvmlDeviceGetAddressingMode(handle)
        )
        return GpuInfo(
            index=index,
            uuid=uuid,
            name=name,
            minor_number=minor,
            pci_bus_id=_text(pci.busId),
            pci_device_id=int(pci.pciDeviceId),
            nvml_architecture=architecture,
            cuda_compute_capability=(int(major), int(minor_cc)),
            memory_total_bytes=int(memory.total),
            mig_mode=self._mig_mode(handle, uuid),
            numa_node=numa if numa is not None and numa >= 0 else None,
            nvml_brand=brand,
            nvml_addressing_mode=addressing,
        )

    def _optional_answer(self, operation: str, gpu_uuid: str, call: Callable[[], Any]) -> int | None:
        """An enum NVML may not answer: ``None`` where the driver lacks the call or says NOT_SUPPORTED.

        Only those two: any other failure (GPU lost, no permission) is an error of the listing, as for the
        mandatory properties, so a flaky GPU is not published with an attribute silently missing.
        """
        try:
            with self._calling(operation, gpu_uuid):
                return int(call())
        except NvmlNotSupported:
            return None
        except NvmlLibraryUnavailable as exc:
            if exc.code == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                return None
            raise

    def possible_placements(self, gpu_uuid: str, profile_id: int) -> tuple[Placement, ...]:
        """``nvmlDeviceGetGpuInstancePossiblePlacements_v2``: every legal placement, MIG on or off.

        From the profile cache when the GPU's profiles are cached under its current MIG mode (one
        ``nvmlDeviceGetMigMode``); otherwise, and for a profile ID the GPU does not list, asked of NVML.
        """
        handle = self._handle(gpu_uuid)
        mode = self._mig_mode(handle, gpu_uuid)
        with self._lock:
            table = self._profile_tables.get(gpu_uuid)
        if table is not None and table.mig_mode == mode:
            cached = next((p for p in table.profiles if p.profile_id == profile_id), None)
            if cached is not None:
                return cached.placements
        return self._possible_placements(handle, gpu_uuid, profile_id)

    def _profile_table(
        self, handle: Any, gpu_uuid: str, mode: MigModeState | None
    ) -> tuple[GpuInstanceProfileInfo, ...]:
        """The GPU's profiles under ``mode`` (its MIG mode as just read): cached, or read and cached."""
        return self._cached_table(
            self._profile_tables,
            gpu_uuid,
            handle,
            gpu_uuid,
            mode,
            lambda: self._read_gpu_instance_profiles(handle, gpu_uuid),
        )

    def _ci_profile_table(
        self, handle: Any, gi_handle: Any, gpu_uuid: str, gi_profile_id: int, mode: MigModeState | None
    ) -> tuple[ComputeInstanceProfileInfo, ...]:
        """The CI profiles of GI profile ``gi_profile_id`` under ``mode`` (the GPU's MIG mode as just
        read), read through ``gi_handle`` (a GI of that profile) when not cached."""
        return self._cached_table(
            self._ci_profile_tables,
            (gpu_uuid, gi_profile_id),
            handle,
            gpu_uuid,
            mode,
            lambda: self._read_compute_instance_profiles(gi_handle, gpu_uuid),
        )

    def _cached_table(
        self,
        tables: dict[_K, _ProfileTable[_V]],
        key: _K,
        handle: Any,
        gpu_uuid: str,
        mode: MigModeState | None,
        read: Callable[[], list[_V]],
    ) -> tuple[_V, ...]:
        """``tables[key]`` if it was read under ``mode``, else ``read()`` -- kept if the mode held still."""
        with self._lock:
            table = tables.get(key)
            # GI tables are keyed by a UUID, CI tables by a (UUID, profile ID) pair: the keys never meet.
            fill_lock = self._profile_fill_locks.setdefault(key, threading.Lock())
        if table is not None and table.mig_mode == mode:
            return table.profiles
        with fill_lock:
            with self._lock:
                table = tables.get(key)
                session = self._session
            if table is not None and table.mig_mode == mode:
                return table.profiles  # another thread read them while this one waited
            profiles = tuple(read())
            # Kept only if the mode held still throughout the read: a table read across a mode change
            # belongs to no single mode (and would be served under the wrong one).
            if self._mig_mode(handle, gpu_uuid) == mode:
                with self._lock:
                    if self._session == session:
                        tables[key] = _ProfileTable(mode, profiles)
            return profiles

    def _read_gpu_instance_profiles(self, handle: Any, gpu_uuid: str) -> list[GpuInstanceProfileInfo]:
        """Every GI profile the GPU reports, asked of NVML (uncached)."""
        profiles = []
        for index in range(_GI_PROFILE_COUNT):
            try:
                profiles.append(self._read_gpu_instance_profile(handle, gpu_uuid, index))
            except (NvmlNotSupported, NvmlInvalidArgument):
                continue  # this GPU lacks the profile (or the driver predates the constant)
        return profiles

    def _forget_profiles(self) -> None:
        with self._lock:
            self._profile_tables.clear()
            self._ci_profile_tables.clear()
            self._seen_modes.clear()
            self._session += 1

    def _possible_placements(self, handle: Any, gpu_uuid: str, profile_id: int) -> tuple[Placement, ...]:
        count = ctypes.c_uint(0)
        with self._calling("nvmlDeviceGetGpuInstancePossiblePlacements", gpu_uuid):
            pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, None, ctypes.byref(count))
        if count.value == 0:
            return ()
        array = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
        with self._calling("nvmlDeviceGetGpuInstancePossiblePlacements", gpu_uuid):
            pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, array, ctypes.byref(count))
        return tuple(Placement(start=int(array[i].start), size=int(array[i].size)) for i in range(count.value))

    def _bare_gpu_instance_info(self, gpu_uuid: str, gi_handle: Any) -> GpuInstanceInfo:
        """``nvmlGpuInstanceGetInfo`` alone: the GI without its compute instances (not asked for)."""
        with self._calling("nvmlGpuInstanceGetInfo", gpu_uuid):
            info = pynvml.nvmlGpuInstanceGetInfo(gi_handle)
        return GpuInstanceInfo(
            gpu_uuid=gpu_uuid,
            gpu_instance_id=int(info.id),
            profile_id=int(info.profileId),
            placement=Placement(start=int(info.placement.start), size=int(info.placement.size)),
            compute_instances=(),
        )

    def _gpu_instance_info(
        self, gpu_uuid: str, handle: Any, gi_handle: Any, mode: MigModeState | None
    ) -> GpuInstanceInfo:
        """The GI with its compute instances; ``mode`` is the GPU's MIG mode as the caller just read it."""
        bare = self._bare_gpu_instance_info(gpu_uuid, gi_handle)
        profiles = self._ci_profile_table(handle, gi_handle, gpu_uuid, bare.profile_id, mode)
        found: list[ComputeInstanceInfo] = []
        for profile in profiles:
            array = (pynvml.c_nvmlComputeInstance_t * profile.instance_count)()
            count = ctypes.c_uint(0)
            with self._calling("nvmlGpuInstanceGetComputeInstances", gpu_uuid):
                pynvml.nvmlGpuInstanceGetComputeInstances(gi_handle, profile.profile_id, array, ctypes.byref(count))
            found.extend(
                self._compute_instance_info(gpu_uuid, bare.gpu_instance_id, array[i]) for i in range(count.value)
            )
        return replace(bare, compute_instances=tuple(sorted(found, key=lambda ci: ci.compute_instance_id)))

    def _read_compute_instance_profiles(self, gi_handle: Any, gpu_uuid: str) -> list[ComputeInstanceProfileInfo]:
        """Every CI profile the GI offers, asked of NVML index by index (uncached)."""
        profiles = []
        for index in range(_CI_PROFILE_COUNT):
            try:
                with self._calling("nvmlGpuInstanceGetComputeInstanceProfileInfo", gpu_uuid):
                    info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi_handle, index, _CI_ENGINE_SHARED, 2)
            except (NvmlNotSupported, NvmlInvalidArgument):
                continue  # the GI's profile lacks it
            profiles.append(
                ComputeInstanceProfileInfo(
                    ci_profile_index=index,
                    profile_id=int(info.id),
                    name=_text(info.name),
                    slice_count=int(info.sliceCount),
                    instance_count=int(info.instanceCount),
                    multiprocessor_count=int(info.multiprocessorCount),
                )
            )
        return profiles

    def _compute_instance_info(self, gpu_uuid: str, gpu_instance_id: int, ci_handle: Any) -> ComputeInstanceInfo:
        with self._calling("nvmlComputeInstanceGetInfo", gpu_uuid):
            info = pynvml.nvmlComputeInstanceGetInfo(ci_handle)
            mig_uuid = _text(pynvml.nvmlDeviceGetUUID(info.device))
            attributes = pynvml.nvmlDeviceGetAttributes(info.device)
        return ComputeInstanceInfo(
            gpu_uuid=gpu_uuid,
            gpu_instance_id=gpu_instance_id,
            compute_instance_id=int(info.id),
            profile_id=int(info.profileId),
            placement=Placement(start=int(info.placement.start), size=int(info.placement.size)),
            mig_uuid=mig_uuid,
            multiprocessor_count=int(attributes.multiprocessorCount),
        )


# migdra's event kinds and the NVML event-type bits they stand for (the ones this pynvml has).
_EVENT_BITS: dict[NvmlEventType, int] = {
    NvmlEventType.XID: int(pynvml.nvmlEventTypeXidCriticalError),
    NvmlEventType.DOUBLE_BIT_ECC: int(pynvml.nvmlEventTypeDoubleBitEccError),
}
if hasattr(pynvml, "nvmlEventTypeGpuUnavailableError"):
    _EVENT_BITS[NvmlEventType.GPU_LOST] = int(pynvml.nvmlEventTypeGpuUnavailableError)


def _attributed(value: int) -> int | None:
    return None if value == NOT_ATTRIBUTED else value


class NvmlEventWatch:
    """An NVML event set over some GPUs: health events (XID, double-bit ECC, GPU lost), waited for.

    Made by :meth:`Nvml.watch_events`.  NVML does not replay events from before the set existed, so a
    caller that must remember faults keeps them itself.  One thread waits on a watch at a time (NVML's
    event sets are not meant to be shared between waiters); :meth:`close` frees the set.
    """

    def __init__(self, nvml: Nvml, event_set: Any) -> None:
        self._nvml = nvml
        self._event_set = event_set
        self._uuids_by_handle: dict[int, str] = {}
        self.registered: dict[str, frozenset[NvmlEventType]] = {}

    def register(self, gpu_uuid: str) -> frozenset[NvmlEventType]:
        """Register the health events this GPU supports; returns which (empty: it supports none)."""
        handle = self._nvml._handle(gpu_uuid)
        with self._nvml._calling("nvmlDeviceGetSupportedEventTypes", gpu_uuid):
            supported = int(pynvml.nvmlDeviceGetSupportedEventTypes(handle))
        kinds = frozenset(kind for kind, bit in _EVENT_BITS.items() if supported & bit)
        mask = 0
        for kind in kinds:
            mask |= _EVENT_BITS[kind]
        if mask:
            with self._nvml._calling("nvmlDeviceRegisterEvents", gpu_uuid):
                pynvml.nvmlDeviceRegisterEvents(handle, mask, self._event_set)
        self._uuids_by_handle[_handle_address(handle)] = gpu_uuid
        self.registered[gpu_uuid] = kinds
        return kinds

    def wait(self, timeout_s: float) -> NvmlEvent | None:
        """The next event, or None when none came within ``timeout_s`` (NVML's TIMEOUT is no error)."""
        timeout_ms = max(0, int(timeout_s * 1000))
        try:
            with self._nvml._calling("nvmlEventSetWait"):
                data = pynvml.nvmlEventSetWait_v2(self._event_set, timeout_ms)
        except NvmlUnexpectedError as exc:
            if exc.code == pynvml.NVML_ERROR_TIMEOUT:
                return None
            raise
        gpu_uuid = self._uuids_by_handle.get(_handle_address(data.device))
        if gpu_uuid is None:
            with self._nvml._calling("nvmlDeviceGetUUID"):
                gpu_uuid = _text(pynvml.nvmlDeviceGetUUID(data.device))
        bits = int(data.eventType)
        kind = next((k for k, bit in _EVENT_BITS.items() if bits & bit), None)
        if kind is None:
            raise NvmlUnexpectedError("nvmlEventSetWait", -1, f"event type {bits:#x} was not registered", gpu_uuid)
        return NvmlEvent(
            gpu_uuid=gpu_uuid,
            event_type=kind,
            xid=int(data.eventData) if kind is NvmlEventType.XID else None,
            gpu_instance_id=_attributed(int(data.gpuInstanceId)),
            compute_instance_id=_attributed(int(data.computeInstanceId)),
        )

    def close(self) -> None:
        if self._event_set is None:
            return
        event_set, self._event_set = self._event_set, None
        with self._nvml._calling("nvmlEventSetFree"):
            pynvml.nvmlEventSetFree(event_set)


def _handle_address(handle: Any) -> int:
    return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)


def _error_string(code: int) -> str:
    try:
        return _text(pynvml.nvmlErrorString(code))
    except pynvml.NVMLError:
        return f"NVML error {code}"
