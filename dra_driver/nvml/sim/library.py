"""The fake ``libnvidia-ml``: an object installed as ``pynvml.nvmlLib`` so pynvml's own wrappers run.

This module owns the C-facing surface: one attribute per NVML C symbol the simulator implements,
each a callable taking the same ctypes arguments pynvml passes and returning an ``nvmlReturn_t`` int
(0 = success; pynvml raises the matching ``NVMLError_*``).  Every call goes through one dispatcher
that applies the fault plan (latency — slept before the state lock is taken, so GPUs can work in
parallel — injected errors, SIGKILL before/after), the initialisation check, and the mapping of
:class:`SimNvmlError` to its return code.

Reads use the store's cached state; every mutating call is one store transaction that copies only the
GPU its handle names (``_NvmlFunctions._writable``), so its cost does not grow with the machine.  The
MIG rules themselves live in ``hardware.py``: this module decodes arguments, picks the state objects a
handle names, calls a rule, and writes results back.  A symbol not defined here is an ``AttributeError``,
which pynvml reports as ``NVMLError_FunctionNotFound``, as with an older real library.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import operator
import re
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pynvml

from dra_driver.mig.catalog import GpuInstanceProfile, Placement
from dra_driver.nvml.sim import hardware
from dra_driver.nvml.sim.abi import (
    Handle,
    HandleKind,
    NullArgumentError,
    decode_handle,
    handle_value,
    out_target,
    read_array,
    read_c_string,
    read_placement,
    read_uint,
    write_c_string,
    write_handle,
    write_value,
)
from dra_driver.nvml.sim.errors import SimNvmlError
from dra_driver.nvml.sim.faults import FaultInjector, kill_this_process
from dra_driver.nvml.sim.state import SimGpu, SimGpuInstance, SimState, StateChange, StateStore

logger = logging.getLogger(__name__)

_MIB = 1024 * 1024

# Symbols real NVML answers before nvmlInit (the error string) or that perform it.
_WITHOUT_INIT = frozenset({"nvmlInitWithFlags", "nvmlInit_v2", "nvmlErrorString"})

# pynvml's own table lacks these; the texts are what nvidia-smi prints for them.
_RECORDED_ERROR_STRINGS = {
    pynvml.NVML_ERROR_IN_USE: "In use by another client",
    pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES: "Insufficient Resources",
}

_PCI_BUS_ID = re.compile(
    r"^(?:(?P<domain>[0-9a-f]{1,8}):)?(?P<bus>[0-9a-f]{1,2}):(?P<device>[0-9a-f]{1,2})(?:\.[0-7])?$"
)

_T = TypeVar("_T")


def error_string(code: int) -> str:
    """nvmlErrorString: the recorded text where known, else pynvml's, else one built from the name."""
    if code == pynvml.NVML_SUCCESS:
        return "Success"
    if code in _RECORDED_ERROR_STRINGS:
        return _RECORDED_ERROR_STRINGS[code]
    builtin: dict[int, str] = pynvml.NVMLError._errcode_to_string
    if code in builtin:
        return builtin[code]
    name = next(
        (n for n, v in vars(pynvml).items() if n.startswith("NVML_ERROR_") and v == code and isinstance(v, int)), None
    )
    return name.removeprefix("NVML_ERROR_").replace("_", " ").title() if name else "Unknown Error"


class _Symbol:
    """One exported C function.  An object, not a bound method, because pynvml sets ``restype`` on it."""

    def __init__(self, name: str, impl: Callable[..., int | bytes], library: SimulatedNvmlLibrary) -> None:
        self.__name__ = name
        self._impl = impl
        self._library = library
        self.restype: Any = ctypes.c_int
        self.argtypes: Any = None

    def __call__(self, *args: Any) -> Any:
        return self._library.dispatch(self.__name__, self._impl, args)

    def __repr__(self) -> str:
        return f"<simulated NVML symbol {self.__name__}>"


EVENT_KINDS = {
    "xid": int(pynvml.nvmlEventTypeXidCriticalError),
    "double-bit-ecc": int(pynvml.nvmlEventTypeDoubleBitEccError),
    "gpu-lost": int(getattr(pynvml, "nvmlEventTypeGpuUnavailableError", 0)),
}
"""The event kinds an operator injects (``migdra sim xid --event``), by the name migdra uses for them."""

# The health events a simulated GPU supports (nvmlDeviceGetSupportedEventTypes): all of them.
SUPPORTED_EVENT_TYPES = functools.reduce(operator.or_, EVENT_KINDS.values())

EVENT_POLL_INTERVAL_S = 0.1
"""How often a waiting ``nvmlEventSetWait_v2`` re-reads the state file for events another process added
(``migdra sim xid``): an unchanged file costs one stat; every simulated plugin waits so all the time,
hence not more often."""


class _EventSet:
    """One event set of this process: what it is registered for, and the last event serial it saw."""

    def __init__(self, cursor: int) -> None:
        self.cursor = cursor  # NVML returns only events after the set was created
        self.masks: dict[int, int] = {}  # GPU index -> registered nvmlEventType* bits


class SimulatedNvmlLibrary:
    """The object installed as ``pynvml.nvmlLib``: NVML C symbols over one simulated machine."""

    def __init__(self, store: StateStore, faults: FaultInjector) -> None:
        self.store = store
        self.faults = faults
        self.event_sets: dict[int, _EventSet] = {}
        self.event_sets_lock = threading.Lock()
        self._init_count = 0
        self._init_lock = threading.Lock()
        # Injected latency is slept through this; tests replace it to see latency without timing it.
        self.sleep: Callable[[float], None] = time.sleep
        functions = _NvmlFunctions(self)
        for name in dir(functions):
            if name.startswith("nvml"):
                setattr(self, name, _Symbol(name, getattr(functions, name), self))

    @property
    def initialised(self) -> bool:
        return self._init_count > 0

    def dispatch(self, name: str, impl: Callable[..., int | bytes], args: tuple[Any, ...]) -> int | bytes:
        rule = self.faults.on_call(name)
        delay = self.faults.latency(name)
        if delay > 0:
            self.sleep(delay)  # outside the state lock: latency on one GPU must not stall another
        if rule is not None and rule.action == "fail":
            assert rule.error is not None  # FaultRule guarantees it
            logger.debug("%s: injected NVML error %d", name, rule.error)
            return rule.error
        if rule is not None and rule.action == "kill_before":
            kill_this_process()
        if name not in _WITHOUT_INIT and not self.initialised:
            result: int | bytes = pynvml.NVML_ERROR_UNINITIALIZED
        else:
            try:
                result = impl(*args)
            except SimNvmlError as e:
                logger.debug("%s: %s", name, e)
                result = e.code
            except NullArgumentError as e:
                logger.debug("%s: %s", name, e)
                result = pynvml.NVML_ERROR_INVALID_ARGUMENT
        if rule is not None and rule.action == "kill_after":
            kill_this_process()
        return result

    def change_init_count(self, delta: int) -> bool:
        """Count nvmlInit / nvmlShutdown; False for a shutdown without a matching init."""
        with self._init_lock:
            if self._init_count + delta < 0:
                return False
            self._init_count += delta
            return True


class _NvmlFunctions:
    """The implementations; every public method named ``nvml…`` becomes an exported C symbol."""

    def __init__(self, library: SimulatedNvmlLibrary) -> None:
        self._library = library
        self._store = library.store

    # --- resolving handles ---------------------------------------------------------------------

    @staticmethod
    def _handle(value: Any, *kinds: HandleKind) -> Handle:
        handle = decode_handle(value)
        if handle is None or handle.kind not in kinds:
            raise SimNvmlError(
                pynvml.NVML_ERROR_INVALID_ARGUMENT, f"not a valid {'/'.join(k.name for k in kinds)} handle"
            )
        return handle

    def _gpu(self, state: SimState, value: Any) -> SimGpu:
        return hardware.gpu_at(state, self._handle(value, HandleKind.GPU).gpu_index)

    def _device(self, state: SimState, value: Any) -> tuple[SimGpu, hardware.MigDevice | None]:
        """A GPU handle or a MIG device handle, with the MIG device it names (None for a GPU)."""
        handle = self._handle(value, HandleKind.GPU, HandleKind.MIG_DEVICE)
        gpu = hardware.gpu_at(state, handle.gpu_index)
        if handle.kind is HandleKind.GPU:
            return gpu, None
        return gpu, self._mig_device(gpu, handle)

    @staticmethod
    def _mig_device(gpu: SimGpu, handle: Handle) -> hardware.MigDevice:
        gi = hardware.find_gpu_instance(gpu, handle.gpu_instance_id)
        ci = hardware.find_compute_instance(gi, handle.compute_instance_id) if gi is not None else None
        if gi is None or ci is None:
            raise SimNvmlError(pynvml.NVML_ERROR_INVALID_ARGUMENT, "stale handle: the instance was destroyed")
        return hardware.MigDevice(gi, ci)

    def _gpu_instance(self, state: SimState, value: Any) -> tuple[SimGpu, SimGpuInstance]:
        handle = self._handle(value, HandleKind.GPU_INSTANCE)
        return self._gi_of(hardware.gpu_at(state, handle.gpu_index), handle)

    @staticmethod
    def _gi_of(gpu: SimGpu, handle: Handle) -> tuple[SimGpu, SimGpuInstance]:
        gi = hardware.find_gpu_instance(gpu, handle.gpu_instance_id)
        if gi is None:
            raise SimNvmlError(pynvml.NVML_ERROR_INVALID_ARGUMENT, "stale GPU-instance handle")
        return gpu, gi

    def _compute_instance(self, state: SimState, value: Any) -> tuple[SimGpu, hardware.MigDevice]:
        handle = self._handle(value, HandleKind.COMPUTE_INSTANCE)
        gpu = hardware.gpu_at(state, handle.gpu_index)
        return gpu, self._mig_device(gpu, handle)

    def _writable(self, change: StateChange, value: Any, *kinds: HandleKind) -> tuple[SimGpu, Handle]:
        """The GPU a handle of ``kinds`` names, copied into ``change`` for changing, and the handle."""
        handle = self._handle(value, *kinds)
        hardware.gpu_at(change.state, handle.gpu_index)  # no such GPU: INVALID_ARGUMENT, nothing copied
        return change.gpu(handle.gpu_index), handle

    @staticmethod
    def _gpu_handle(gpu: SimGpu) -> Handle:
        return Handle(HandleKind.GPU, gpu.index)

    @staticmethod
    def _gi_handle(gpu: SimGpu, gi: SimGpuInstance) -> Handle:
        return Handle(HandleKind.GPU_INSTANCE, gpu.index, gi.gpu_instance_id)

    @staticmethod
    def _instance_handle(gpu: SimGpu, device: hardware.MigDevice, kind: HandleKind) -> Handle:
        return Handle(kind, gpu.index, device.gpu_instance.gpu_instance_id, device.compute_instance.compute_instance_id)

    # --- output helpers ------------------------------------------------------------------------

    @staticmethod
    def _string_out(buffer: Any, length: Any, text: str) -> int:
        if not write_c_string(buffer, length, text):
            return int(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
        return int(pynvml.NVML_SUCCESS)

    @staticmethod
    def _list_out(array_arg: Any, count_ref: Any, items: list[_T], store: Callable[[Any, int, _T], None]) -> int:
        """Fill a caller's array and ``*count``: NULL array → count only; too small → INSUFFICIENT_SIZE."""
        out_target(count_ref)  # a NULL count is an invalid argument before anything else
        array = read_array(array_arg, count_ref)
        write_value(count_ref, len(items))
        if array is None:
            return int(pynvml.NVML_SUCCESS)
        if array.capacity < len(items):
            return int(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
        for position, item in enumerate(items):
            store(array.array, position, item)
        return int(pynvml.NVML_SUCCESS)

    @staticmethod
    def _store_placement(array: Any, position: int, placement: Placement) -> None:
        array[position].start = placement.start
        array[position].size = placement.size

    @staticmethod
    def _check_version(info: Any, expected: int) -> None:
        if getattr(info, "version", None) != expected:
            raise SimNvmlError(
                pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
                f"structure version {getattr(info, 'version', None)!r}, expected {expected:#x}",
            )

    @staticmethod
    def _placement_arg(ref: Any) -> Placement:
        start, size = read_placement(ref)
        if size == 0:
            raise SimNvmlError(pynvml.NVML_ERROR_INVALID_ARGUMENT, f"placement {start}:{size} is empty")
        return Placement(start=start, size=size)

    # --- library and system --------------------------------------------------------------------

    def nvmlInitWithFlags(self, flags: Any) -> int:
        read_uint(flags)  # NO_GPUS / NO_ATTACH change nothing for simulated GPUs
        # A state file gone bad since install is a migdra error naming the file: it travels up through
        # pynvml (a Python callable, not C) to the caller as it is, rather than a vague DRIVER_NOT_LOADED.
        self._store.read()
        self._library.change_init_count(+1)
        return int(pynvml.NVML_SUCCESS)

    def nvmlInit_v2(self) -> int:
        return self.nvmlInitWithFlags(0)

    def nvmlShutdown(self) -> int:
        if not self._library.change_init_count(-1):
            return int(pynvml.NVML_ERROR_UNINITIALIZED)
        return int(pynvml.NVML_SUCCESS)

    def nvmlErrorString(self, result: Any) -> bytes:
        code = result.value if isinstance(result, ctypes._SimpleCData) else int(result)
        return error_string(code).encode()

    def nvmlSystemGetDriverVersion(self, buffer: Any, length: Any) -> int:
        return self._string_out(buffer, length, self._store.read().driver_version)

    def nvmlSystemGetNVMLVersion(self, buffer: Any, length: Any) -> int:
        return self._string_out(buffer, length, self._store.read().nvml_version)

    def nvmlSystemGetCudaDriverVersion(self, version_ref: Any) -> int:
        write_value(version_ref, self._store.read().cuda_driver_version)
        return int(pynvml.NVML_SUCCESS)

    def nvmlSystemGetCudaDriverVersion_v2(self, version_ref: Any) -> int:
        return self.nvmlSystemGetCudaDriverVersion(version_ref)

    # --- finding devices -----------------------------------------------------------------------

    def nvmlDeviceGetCount_v2(self, count_ref: Any) -> int:
        write_value(count_ref, len(self._store.read().gpus))
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetHandleByIndex_v2(self, index: Any, device_ref: Any) -> int:
        gpu = hardware.gpu_at(self._store.read(), read_uint(index))
        write_handle(device_ref, self._gpu_handle(gpu))
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetHandleByUUID(self, device_uuid: Any, device_ref: Any) -> int:
        text = read_c_string(device_uuid).decode(errors="replace")
        ref = hardware.device_by_uuid(self._store.read(), text)
        if ref is None:
            raise SimNvmlError(pynvml.NVML_ERROR_NOT_FOUND, f"no device with UUID {text!r}")
        if ref.mig_device is None:
            write_handle(device_ref, self._gpu_handle(ref.gpu))
        else:
            write_handle(device_ref, self._instance_handle(ref.gpu, ref.mig_device, HandleKind.MIG_DEVICE))
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetHandleByPciBusId_v2(self, pci_bus_id: Any, device_ref: Any) -> int:
        text = read_c_string(pci_bus_id).decode(errors="replace").strip().lower()
        match = _PCI_BUS_ID.match(text)
        if match is None:
            raise SimNvmlError(pynvml.NVML_ERROR_INVALID_ARGUMENT, f"malformed PCI bus ID {text!r}")
        wanted = (int(match["domain"] or "0", 16), int(match["bus"], 16), int(match["device"], 16))
        gpu = next((g for g in self._store.read().gpus if (g.pci_domain, g.pci_bus, 0) == wanted), None)
        if gpu is None:
            raise SimNvmlError(pynvml.NVML_ERROR_NOT_FOUND, f"no GPU at PCI bus ID {text!r}")
        write_handle(device_ref, self._gpu_handle(gpu))
        return int(pynvml.NVML_SUCCESS)

    # --- device properties ---------------------------------------------------------------------

    def nvmlDeviceGetIndex(self, device: Any, index_ref: Any) -> int:
        write_value(index_ref, self._gpu(self._store.read(), device).index)
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetMinorNumber(self, device: Any, minor_ref: Any) -> int:
        # Simulated machines number their GPUs' device nodes like their NVML indices.
        write_value(minor_ref, self._gpu(self._store.read(), device).index)
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetName(self, device: Any, buffer: Any, length: Any) -> int:
        gpu, mig = self._device(self._store.read(), device)
        name = hardware.gpu_model(gpu).nvml_name
        if mig is not None:
            # CUDA's form ("NVIDIA H200 MIG 1g.18gb"); NVML returning the same is UNCONFIRMED.
            ci_profile = hardware.gpu_profile(gpu, mig.gpu_instance).compute_instance_profile(
                mig.compute_instance.ci_profile_id
            )
            name = f"{name} MIG {ci_profile.name.removeprefix('MIG ')}"
        return self._string_out(buffer, length, name)

    def nvmlDeviceGetUUID(self, device: Any, buffer: Any, length: Any) -> int:
        gpu, mig = self._device(self._store.read(), device)
        return self._string_out(buffer, length, gpu.uuid if mig is None else mig.compute_instance.uuid)

    def nvmlDeviceGetArchitecture(self, device: Any, arch_ref: Any) -> int:
        gpu, _ = self._device(self._store.read(), device)
        write_value(arch_ref, hardware.gpu_model(gpu).nvml_architecture)
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetCudaComputeCapability(self, device: Any, major_ref: Any, minor_ref: Any) -> int:
        gpu, _ = self._device(self._store.read(), device)
        major, _, minor = hardware.gpu_model(gpu).cuda_compute_capability.partition(".")
        write_value(major_ref, int(major))
        write_value(minor_ref, int(minor or "0"))
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetBrand(self, device: Any, brand_ref: Any) -> int:
        write_value(brand_ref, hardware.gpu_model(self._gpu(self._store.read(), device)).nvml_brand)
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetAddressingMode(self, device: Any, mode_ref: Any) -> int:
        gpu = self._gpu(self._store.read(), device)
        mode = out_target(mode_ref)
        self._check_version(mode, pynvml.nvmlDeviceAddressingMode_v1)
        mode.value = hardware.gpu_model(gpu).nvml_addressing_mode
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetPciInfo_v3(self, device: Any, info_ref: Any) -> int:
        gpu = self._gpu(self._store.read(), device)
        info = out_target(info_ref)
        info.domain = gpu.pci_domain
        info.bus = gpu.pci_bus
        info.device = 0
        info.pciDeviceId = int(hardware.gpu_model(gpu).pci_device_id, 16)
        info.pciSubSystemId = 0  # not in the catalog; real boards report a vendor-specific value
        info.busIdLegacy = (pynvml.NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT % (gpu.pci_domain, gpu.pci_bus, 0)).encode()
        info.busId = (pynvml.NVML_DEVICE_PCI_BUS_ID_FMT % (gpu.pci_domain, gpu.pci_bus, 0)).encode()
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetNumaNodeId(self, device: Any, node_ref: Any) -> int:
        write_value(node_ref, self._gpu(self._store.read(), device).numa_node)
        return int(pynvml.NVML_SUCCESS)

    def _memory_bytes(self, device: Any) -> int:
        gpu, mig = self._device(self._store.read(), device)
        if mig is None:
            return hardware.gpu_model(gpu).total_memory_mib * _MIB
        return hardware.gpu_profile(gpu, mig.gpu_instance).memory_size_mb * _MIB

    def nvmlDeviceGetMemoryInfo(self, device: Any, memory_ref: Any) -> int:
        total = self._memory_bytes(device)
        memory = out_target(memory_ref)
        memory.total, memory.free, memory.used = total, total, 0
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetMemoryInfo_v2(self, device: Any, memory_ref: Any) -> int:
        memory = out_target(memory_ref)
        self._check_version(memory, pynvml.nvmlMemory_v2)
        total = self._memory_bytes(device)
        memory.total, memory.reserved, memory.free, memory.used = total, 0, total, 0
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetAttributes_v2(self, device: Any, attributes_ref: Any) -> int:
        gpu, mig = self._device(self._store.read(), device)
        if mig is None:
            raise SimNvmlError(pynvml.NVML_ERROR_NOT_SUPPORTED, "device attributes exist only for MIG device handles")
        gi_profile = hardware.gpu_profile(gpu, mig.gpu_instance)
        ci_profile = gi_profile.compute_instance_profile(mig.compute_instance.ci_profile_id)
        attributes = out_target(attributes_ref)
        attributes.multiprocessorCount = ci_profile.multiprocessor_count
        attributes.sharedCopyEngineCount = gi_profile.copy_engine_count
        attributes.sharedDecoderCount = gi_profile.decoder_count
        attributes.sharedEncoderCount = gi_profile.encoder_count
        attributes.sharedJpegCount = gi_profile.jpeg_count
        attributes.sharedOfaCount = gi_profile.ofa_count
        attributes.gpuInstanceSliceCount = gi_profile.slice_count
        attributes.computeInstanceSliceCount = ci_profile.slice_count
        attributes.memorySizeMB = gi_profile.memory_size_mb
        return int(pynvml.NVML_SUCCESS)

    # --- MIG mode ------------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, device: Any, current_ref: Any, pending_ref: Any) -> int:
        gpu = self._gpu(self._store.read(), device)
        write_value(current_ref, int(gpu.mig_mode_current))
        write_value(pending_ref, int(gpu.mig_mode_pending))
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceSetMigMode(self, device: Any, mode: Any, activation_status_ref: Any) -> int:
        requested = read_uint(mode)
        out_target(activation_status_ref)
        if requested not in (pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_ENABLE):
            raise SimNvmlError(pynvml.NVML_ERROR_INVALID_ARGUMENT, f"MIG mode {requested}")
        with self._store.transaction() as change:
            gpu, _ = self._writable(change, device, HandleKind.GPU)
            status = hardware.set_mig_mode(gpu, requested == pynvml.NVML_DEVICE_MIG_ENABLE)
        write_value(activation_status_ref, status)
        return int(pynvml.NVML_SUCCESS)

    # --- GPU-instance profiles -----------------------------------------------------------------

    @staticmethod
    def _fill_gpu_profile(info: Any, profile: GpuInstanceProfile) -> None:
        info.id = profile.profile_id
        info.isP2pSupported = profile.is_p2p_supported
        info.sliceCount = profile.slice_count
        info.instanceCount = profile.instance_count
        info.multiprocessorCount = profile.multiprocessor_count
        info.copyEngineCount = profile.copy_engine_count
        info.decoderCount = profile.decoder_count
        info.encoderCount = profile.encoder_count
        info.jpegCount = profile.jpeg_count
        info.ofaCount = profile.ofa_count
        info.memorySizeMB = profile.memory_size_mb

    def nvmlDeviceGetGpuInstanceProfileInfo(self, device: Any, profile: Any, info_ref: Any) -> int:
        state = self._store.read()
        gpu = self._gpu(state, device)
        info = out_target(info_ref)
        self._fill_gpu_profile(info, hardware.gpu_profile_by_index(state, gpu, read_uint(profile)))
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetGpuInstanceProfileInfoV(self, device: Any, profile: Any, info_ref: Any) -> int:
        state = self._store.read()
        gpu = self._gpu(state, device)
        info = out_target(info_ref)
        self._check_version(info, pynvml.nvmlGpuInstanceProfileInfo_v2)
        found = hardware.gpu_profile_by_index(state, gpu, read_uint(profile))
        self._fill_gpu_profile(info, found)
        info.name = f"MIG {found.name}".encode()
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetGpuInstanceProfileInfoByIdV(self, device: Any, profile_id: Any, info_ref: Any) -> int:
        gpu = self._gpu(self._store.read(), device)
        info = out_target(info_ref)
        self._check_version(info, pynvml.nvmlGpuInstanceProfileInfo_v2)
        found = hardware.gpu_profile_by_id(gpu, read_uint(profile_id))
        self._fill_gpu_profile(info, found)
        info.name = f"MIG {found.name}".encode()
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetGpuInstanceRemainingCapacity(self, device: Any, profile_id: Any, count_ref: Any) -> int:
        gpu = self._gpu(self._store.read(), device)
        profile = hardware.gpu_profile_by_id(gpu, read_uint(profile_id))
        write_value(count_ref, hardware.gpu_instance_remaining_capacity(gpu, profile))
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetGpuInstancePossiblePlacements_v2(
        self, device: Any, profile_id: Any, placements: Any, count_ref: Any
    ) -> int:
        # Answers with MIG disabled too ("regardless of whether MIG is enabled", nvml.h).
        gpu = self._gpu(self._store.read(), device)
        profile = hardware.gpu_profile_by_id(gpu, read_uint(profile_id))
        return self._list_out(placements, count_ref, list(profile.placements), self._store_placement)

    # --- GPU instances -------------------------------------------------------------------------

    def _create_gpu_instance(self, device: Any, profile_id: Any, placement: Placement | None, gi_ref: Any) -> int:
        out_target(gi_ref)  # refuse a NULL out-parameter before changing anything
        with self._store.transaction() as change:
            gpu, _ = self._writable(change, device, HandleKind.GPU)
            gi = hardware.create_gpu_instance(gpu, read_uint(profile_id), placement)
            handle = self._gi_handle(gpu, gi)
        write_handle(gi_ref, handle)
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceCreateGpuInstance(self, device: Any, profile_id: Any, gi_ref: Any) -> int:
        return self._create_gpu_instance(device, profile_id, None, gi_ref)

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, device: Any, profile_id: Any, placement_ref: Any, gi_ref: Any
    ) -> int:
        return self._create_gpu_instance(device, profile_id, self._placement_arg(placement_ref), gi_ref)

    def nvmlGpuInstanceDestroy(self, gpu_instance: Any) -> int:
        with self._store.transaction() as change:
            gpu, gi = self._gi_of(*self._writable(change, gpu_instance, HandleKind.GPU_INSTANCE))
            hardware.destroy_gpu_instance(gpu, gi.gpu_instance_id)
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetGpuInstances(self, device: Any, profile_id: Any, instances: Any, count_ref: Any) -> int:
        # With MIG disabled: SUCCESS and a count of 0, not NOT_SUPPORTED (recorded, H200 / 580.159.04).
        gpu = self._gpu(self._store.read(), device)
        profile = hardware.gpu_profile_by_id(gpu, read_uint(profile_id))
        found = sorted(
            (gi for gi in gpu.gpu_instances if gi.profile_id == profile.profile_id), key=lambda g: g.gpu_instance_id
        )

        def store(array: Any, position: int, gi: SimGpuInstance) -> None:
            array[position] = handle_value(self._gi_handle(gpu, gi), array._type_)

        return self._list_out(instances, count_ref, found, store)

    def nvmlDeviceGetGpuInstanceById(self, device: Any, gpu_instance_id: Any, gi_ref: Any) -> int:
        gpu = self._gpu(self._store.read(), device)
        gi = hardware.gpu_instance_by_id(gpu, read_uint(gpu_instance_id))
        write_handle(gi_ref, self._gi_handle(gpu, gi))
        return int(pynvml.NVML_SUCCESS)

    def nvmlGpuInstanceGetInfo(self, gpu_instance: Any, info_ref: Any) -> int:
        gpu, gi = self._gpu_instance(self._store.read(), gpu_instance)
        info = out_target(info_ref)
        info.device = handle_value(self._gpu_handle(gpu), pynvml.c_nvmlDevice_t)
        info.id = gi.gpu_instance_id
        info.profileId = gi.profile_id
        info.placement.start = gi.placement.start
        info.placement.size = gi.placement.size
        return int(pynvml.NVML_SUCCESS)

    # --- compute-instance profiles -------------------------------------------------------------

    def _compute_profile_info(self, gpu_instance: Any, profile: Any, engine_profile: Any, info: Any) -> str:
        gpu, gi = self._gpu_instance(self._store.read(), gpu_instance)
        if read_uint(engine_profile) >= pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT:
            raise SimNvmlError(pynvml.NVML_ERROR_INVALID_ARGUMENT, f"engine profile {read_uint(engine_profile)}")
        gi_profile = hardware.gpu_profile(gpu, gi)
        ci_profile = hardware.compute_profile(gi_profile, read_uint(profile))
        info.id = ci_profile.profile_id
        info.sliceCount = ci_profile.slice_count
        info.instanceCount = ci_profile.instance_count
        info.multiprocessorCount = ci_profile.multiprocessor_count
        # A compute instance shares its GPU instance's engines.
        info.sharedCopyEngineCount = gi_profile.copy_engine_count
        info.sharedDecoderCount = gi_profile.decoder_count
        info.sharedEncoderCount = gi_profile.encoder_count
        info.sharedJpegCount = gi_profile.jpeg_count
        info.sharedOfaCount = gi_profile.ofa_count
        return ci_profile.name

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, gpu_instance: Any, profile: Any, engine_profile: Any, info_ref: Any
    ) -> int:
        self._compute_profile_info(gpu_instance, profile, engine_profile, out_target(info_ref))
        return int(pynvml.NVML_SUCCESS)

    def nvmlGpuInstanceGetComputeInstanceProfileInfoV(
        self, gpu_instance: Any, profile: Any, engine_profile: Any, info_ref: Any
    ) -> int:
        info = out_target(info_ref)
        self._check_version(info, pynvml.nvmlComputeInstanceProfileInfo_v2)
        info.name = self._compute_profile_info(gpu_instance, profile, engine_profile, info).encode()
        return int(pynvml.NVML_SUCCESS)

    def nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
        self, gpu_instance: Any, profile_id: Any, count_ref: Any
    ) -> int:
        gpu, gi = self._gpu_instance(self._store.read(), gpu_instance)
        ci_profile = hardware.compute_profile(hardware.gpu_profile(gpu, gi), read_uint(profile_id))
        write_value(count_ref, hardware.compute_instance_remaining_capacity(gi, ci_profile))
        return int(pynvml.NVML_SUCCESS)

    def nvmlGpuInstanceGetComputeInstancePossiblePlacements(
        self, gpu_instance: Any, profile_id: Any, placements: Any, count_ref: Any
    ) -> int:
        gpu, gi = self._gpu_instance(self._store.read(), gpu_instance)
        ci_profile = hardware.compute_profile(hardware.gpu_profile(gpu, gi), read_uint(profile_id))
        return self._list_out(placements, count_ref, list(ci_profile.placements), self._store_placement)

    # --- compute instances and MIG devices -----------------------------------------------------

    def _create_compute_instance(
        self, gpu_instance: Any, profile_id: Any, placement: Placement | None, ci_ref: Any
    ) -> int:
        out_target(ci_ref)
        with self._store.transaction() as change:
            gpu, gi = self._gi_of(*self._writable(change, gpu_instance, HandleKind.GPU_INSTANCE))
            ci = hardware.create_compute_instance(change.state, gpu, gi, read_uint(profile_id), placement)
            handle = self._instance_handle(gpu, hardware.MigDevice(gi, ci), HandleKind.COMPUTE_INSTANCE)
        write_handle(ci_ref, handle)
        return int(pynvml.NVML_SUCCESS)

    def nvmlGpuInstanceCreateComputeInstance(self, gpu_instance: Any, profile_id: Any, ci_ref: Any) -> int:
        return self._create_compute_instance(gpu_instance, profile_id, None, ci_ref)

    def nvmlGpuInstanceCreateComputeInstanceWithPlacement(
        self, gpu_instance: Any, profile_id: Any, placement_ref: Any, ci_ref: Any
    ) -> int:
        return self._create_compute_instance(gpu_instance, profile_id, self._placement_arg(placement_ref), ci_ref)

    def nvmlComputeInstanceDestroy(self, compute_instance: Any) -> int:
        with self._store.transaction() as change:
            gpu, handle = self._writable(change, compute_instance, HandleKind.COMPUTE_INSTANCE)
            device = self._mig_device(gpu, handle)
            hardware.destroy_compute_instance(gpu, device.gpu_instance, device.compute_instance.compute_instance_id)
        return int(pynvml.NVML_SUCCESS)

    def nvmlGpuInstanceGetComputeInstances(
        self, gpu_instance: Any, profile_id: Any, instances: Any, count_ref: Any
    ) -> int:
        gpu, gi = self._gpu_instance(self._store.read(), gpu_instance)
        ci_profile = hardware.compute_profile(hardware.gpu_profile(gpu, gi), read_uint(profile_id))
        found = sorted(
            (ci for ci in gi.compute_instances if ci.ci_profile_id == ci_profile.profile_id),
            key=lambda c: c.compute_instance_id,
        )

        def store(array: Any, position: int, ci: Any) -> None:
            handle = self._instance_handle(gpu, hardware.MigDevice(gi, ci), HandleKind.COMPUTE_INSTANCE)
            array[position] = handle_value(handle, array._type_)

        return self._list_out(instances, count_ref, found, store)

    def nvmlGpuInstanceGetComputeInstanceById(self, gpu_instance: Any, compute_instance_id: Any, ci_ref: Any) -> int:
        gpu, gi = self._gpu_instance(self._store.read(), gpu_instance)
        ci = hardware.compute_instance_by_id(gi, read_uint(compute_instance_id))
        write_handle(ci_ref, self._instance_handle(gpu, hardware.MigDevice(gi, ci), HandleKind.COMPUTE_INSTANCE))
        return int(pynvml.NVML_SUCCESS)

    def nvmlComputeInstanceGetInfo_v2(self, compute_instance: Any, info_ref: Any) -> int:
        gpu, device = self._compute_instance(self._store.read(), compute_instance)
        info = out_target(info_ref)
        info.device = handle_value(self._instance_handle(gpu, device, HandleKind.MIG_DEVICE), pynvml.c_nvmlDevice_t)
        info.gpuInstance = handle_value(self._gi_handle(gpu, device.gpu_instance), pynvml.c_nvmlGpuInstance_t)
        info.id = device.compute_instance.compute_instance_id
        info.profileId = device.compute_instance.ci_profile_id
        info.placement.start = device.compute_instance.placement.start
        info.placement.size = device.compute_instance.placement.size
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceIsMigDeviceHandle(self, device: Any, is_mig_ref: Any) -> int:
        _, mig = self._device(self._store.read(), device)
        write_value(is_mig_ref, int(mig is not None))
        return int(pynvml.NVML_SUCCESS)

    def _mig_only(self, device: Any) -> hardware.MigDevice:
        gpu, mig = self._device(self._store.read(), device)
        if mig is None:
            raise SimNvmlError(pynvml.NVML_ERROR_NOT_SUPPORTED, f"GPU {gpu.index}'s handle is not a MIG device handle")
        return mig

    def nvmlDeviceGetGpuInstanceId(self, device: Any, id_ref: Any) -> int:
        write_value(id_ref, self._mig_only(device).gpu_instance.gpu_instance_id)
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetComputeInstanceId(self, device: Any, id_ref: Any) -> int:
        write_value(id_ref, self._mig_only(device).compute_instance.compute_instance_id)
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any, count_ref: Any) -> int:
        write_value(count_ref, hardware.max_mig_device_count(self._gpu(self._store.read(), device)))
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: Any, mig_ref: Any) -> int:
        gpu = self._gpu(self._store.read(), device)
        hardware.require_mig_enabled(gpu)
        position = read_uint(index)
        if position >= hardware.max_mig_device_count(gpu):
            raise SimNvmlError(pynvml.NVML_ERROR_INVALID_ARGUMENT, f"MIG device index {position} out of range")
        devices = hardware.mig_devices(gpu)
        if position >= len(devices):
            raise SimNvmlError(pynvml.NVML_ERROR_NOT_FOUND, f"no MIG device at index {position}")
        write_handle(mig_ref, self._instance_handle(gpu, devices[position], HandleKind.MIG_DEVICE))
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, mig_device: Any, device_ref: Any) -> int:
        handle = self._handle(mig_device, HandleKind.MIG_DEVICE)
        gpu = hardware.gpu_at(self._store.read(), handle.gpu_index)
        self._mig_device(gpu, handle)  # a stale MIG handle has no parent to report
        write_handle(device_ref, self._gpu_handle(gpu))
        return int(pynvml.NVML_SUCCESS)

    # --- events --------------------------------------------------------------------------------

    def _event_set(self, value: Any) -> tuple[int, _EventSet]:
        number = self._handle(value, HandleKind.EVENT_SET).gpu_index
        with self._library.event_sets_lock:
            found = self._library.event_sets.get(number)
        if found is None:
            raise SimNvmlError(pynvml.NVML_ERROR_INVALID_ARGUMENT, f"event set {number} was freed or never created")
        return number, found

    def nvmlEventSetCreate(self, set_ref: Any) -> int:
        out_target(set_ref)
        cursor = self._store.read().event_serial
        with self._library.event_sets_lock:
            number = max(self._library.event_sets, default=0) + 1
            self._library.event_sets[number] = _EventSet(cursor)
        write_handle(set_ref, Handle(HandleKind.EVENT_SET, number))
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetSupportedEventTypes(self, device: Any, types_ref: Any) -> int:
        self._gpu(self._store.read(), device)
        write_value(types_ref, SUPPORTED_EVENT_TYPES)
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceRegisterEvents(self, device: Any, event_types: Any, event_set: Any) -> int:
        gpu = self._gpu(self._store.read(), device)
        bits = int(event_types.value if isinstance(event_types, ctypes._SimpleCData) else event_types)
        if bits & ~SUPPORTED_EVENT_TYPES:
            raise SimNvmlError(pynvml.NVML_ERROR_NOT_SUPPORTED, f"event types {bits & ~SUPPORTED_EVENT_TYPES:#x}")
        _, found = self._event_set(event_set)
        with self._library.event_sets_lock:
            found.masks[gpu.index] = found.masks.get(gpu.index, 0) | bits
        return int(pynvml.NVML_SUCCESS)

    def nvmlEventSetWait_v2(self, event_set: Any, data_ref: Any, timeout_ms: Any) -> int:
        """The next registered event after the set's cursor, polling the state file until the timeout."""
        _, found = self._event_set(event_set)
        data = out_target(data_ref)
        deadline = time.monotonic() + read_uint(timeout_ms) / 1000
        while True:
            state = self._store.read()
            with self._library.event_sets_lock:
                event = next(
                    (
                        e
                        for e in state.events
                        if e.serial > found.cursor and found.masks.get(e.gpu_index, 0) & e.event_type
                    ),
                    None,
                )
                # Skipped (unregistered) events are consumed too: the set never sees them later.
                found.cursor = event.serial if event is not None else max(found.cursor, state.event_serial)
            if event is not None:
                gpu = hardware.gpu_at(state, event.gpu_index)
                data.device = handle_value(self._gpu_handle(gpu), pynvml.c_nvmlDevice_t)
                data.eventType = event.event_type
                data.eventData = event.event_data
                data.gpuInstanceId = event.gpu_instance_id
                data.computeInstanceId = event.compute_instance_id
                return int(pynvml.NVML_SUCCESS)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return int(pynvml.NVML_ERROR_TIMEOUT)
            time.sleep(min(EVENT_POLL_INTERVAL_S, remaining))

    def nvmlEventSetFree(self, event_set: Any) -> int:
        number, _ = self._event_set(event_set)
        with self._library.event_sets_lock:
            del self._library.event_sets[number]
        return int(pynvml.NVML_SUCCESS)
