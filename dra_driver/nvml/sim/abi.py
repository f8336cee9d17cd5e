"""The C calling convention of the fake NVML library, seen from Python.

This module owns how the simulator reads the ctypes arguments pynvml passes (ints or ``c_uint``,
``byref(...)`` out-parameters whose target is ``ref._obj``, pointers, caller-allocated arrays, opaque
``POINTER(struct)`` handles) and how it writes results back into them, plus the encoding of handles
as synthetic addresses.  It knows nothing of MIG or of the state file.

A handle is never dereferenced by anyone (pynvml only passes it back), so its "address" carries the
identity of what it names: a tag, the kind (GPU, GPU instance, compute instance, MIG device), the GPU
index, the GPU-instance ID and the compute-instance ID.  Like real NVML handles, a handle names a
slot, not a generation: one kept across a destroy and re-create at the same IDs names the new one.
"""

from __future__ import annotations

import ctypes
import enum
from dataclasses import dataclass
from typing import Any

# 0x5EED in the top 16 bits: never a real user-space pointer, and easy to spot in a debugger dump.
_TAG = 0x5EED
_TAG_SHIFT = 48
_KIND_SHIFT = 44
_GPU_SHIFT = 28
_GI_SHIFT = 14
_FIELD_MASK = 0x3FFF  # 14 bits per id: far above NVML's 15 GIs / 8 CIs per GPU
_GPU_MASK = 0xFFFF


class NullArgumentError(Exception):
    """A NULL pointer where the C function needs one; the library answers INVALID_ARGUMENT."""


class HandleKind(enum.IntEnum):
    GPU = 1
    GPU_INSTANCE = 2
    COMPUTE_INSTANCE = 3
    MIG_DEVICE = 4
    EVENT_SET = 5  # the "GPU index" field carries the event set's number


@dataclass(frozen=True)
class Handle:
    kind: HandleKind
    gpu_index: int
    gpu_instance_id: int = 0
    compute_instance_id: int = 0

    @property
    def address(self) -> int:
        return (
            (_TAG << _TAG_SHIFT)
            | (int(self.kind) << _KIND_SHIFT)
            | (self.gpu_index << _GPU_SHIFT)
            | (self.gpu_instance_id << _GI_SHIFT)
            | self.compute_instance_id
        )


def decode_handle(value: Any) -> Handle | None:
    """The :class:`Handle` a ctypes handle argument names, or None if it is not one of ours / NULL."""
    address = _address_of(value)
    if address is None or address >> _TAG_SHIFT != _TAG:
        return None
    try:
        kind = HandleKind((address >> _KIND_SHIFT) & 0xF)
    except ValueError:
        return None
    return Handle(
        kind,
        (address >> _GPU_SHIFT) & _GPU_MASK,
        (address >> _GI_SHIFT) & _FIELD_MASK,
        address & _FIELD_MASK,
    )


def _address_of(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, ctypes.c_void_p):
        return value.value
    if isinstance(value, ctypes._Pointer):
        address: int | None = ctypes.cast(value, ctypes.c_void_p).value
        return address
    raise ctypes.ArgumentError(f"not a handle: {value!r}")


def handle_value(handle: Handle, pointer_type: Any) -> Any:
    """A ctypes value of ``pointer_type`` (e.g. ``c_nvmlDevice_t``) holding ``handle``'s address."""
    return ctypes.cast(ctypes.c_void_p(handle.address), pointer_type)


def write_handle(ref: Any, handle: Handle) -> None:
    """Store ``handle`` into an out-parameter ``byref(c_nvmlDevice_t())`` (or a pointer to one)."""
    target = out_target(ref)
    if not isinstance(target, ctypes._Pointer):
        raise ctypes.ArgumentError(f"handle out-parameter must point at a ctypes pointer, got {target!r}")
    ctypes.cast(ctypes.pointer(target), ctypes.POINTER(ctypes.c_void_p)).contents.value = handle.address


def out_target(ref: Any) -> Any:
    """The ctypes object an out-parameter points at: ``byref(x)`` → x, ``pointer(x)`` → x.

    A bare ctypes scalar or structure would be passed *by value* to a real C function, which then
    writes through garbage; refusing it here keeps such a caller bug from passing its tests.
    """
    if ref is None:
        raise NullArgumentError("NULL out-parameter")
    target = getattr(ref, "_obj", None)  # ctypes.byref() returns a CArgObject keeping its target here
    if target is not None:
        return target
    if isinstance(ref, ctypes._Pointer):
        if not ref:
            raise NullArgumentError("NULL out-parameter")
        return ref.contents
    if isinstance(ref, ctypes.Array):
        return ref
    raise ctypes.ArgumentError(f"out-parameter must be byref(...) or a pointer, got {ref!r}")


def write_value(ref: Any, value: int) -> None:
    """``*ref = value`` for a scalar out-parameter such as ``byref(c_uint())``."""
    out_target(ref).value = value


def read_uint(value: Any) -> int:
    """An ``unsigned int`` argument: a Python int or a ctypes integer, converted as C would."""
    if isinstance(value, bool | int):
        return ctypes.c_uint(int(value)).value
    if isinstance(value, ctypes._SimpleCData) and isinstance(value.value, int):
        return ctypes.c_uint(value.value).value
    raise ctypes.ArgumentError(f"expected an unsigned int, got {value!r}")


def read_c_string(value: Any) -> bytes:
    """A ``const char*`` argument: ``c_char_p``, bytes, or a char array."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, ctypes.c_char_p):
        if value.value is None:
            raise NullArgumentError("NULL string")
        return value.value
    if isinstance(value, ctypes.Array):
        raw: bytes = value.value
        return raw
    if value is None:
        raise NullArgumentError("NULL string")
    raise ctypes.ArgumentError(f"expected a C string, got {value!r}")


def write_c_string(buffer: Any, length: Any, text: str) -> bool:
    """Copy ``text`` NUL-terminated into a caller's ``char[length]``; False if it does not fit."""
    data = text.encode() + b"\0"
    if buffer is None:
        raise NullArgumentError("NULL buffer")
    if len(data) > read_uint(length):
        return False
    ctypes.memmove(buffer, data, len(data))
    return True


def read_placement(ref: Any) -> tuple[int, int]:
    """``const nvml*Placement_t*``: the (start, size) the caller points at."""
    target = out_target(ref)
    if not hasattr(target, "start") or not hasattr(target, "size"):
        raise ctypes.ArgumentError(f"expected byref(a placement structure), got {target!r}")
    return int(target.start), int(target.size)


@dataclass(frozen=True)
class ArrayArgument:
    """A caller-allocated output array (``T[n]``) and how many elements it can take."""

    array: Any
    capacity: int


def read_array(value: Any, count_ref: Any) -> ArrayArgument | None:
    """Decode an output-array argument; None for NULL (a count-only query).

    A ctypes array knows its length.  A bare pointer does not, so its capacity is the ``*count`` the
    caller passed in (0 if unset): writing past a buffer of unknown size would corrupt this process.
    """
    if value is None:
        return None
    element = getattr(value, "_obj", None)  # byref(x): x is an array, or the one element
    if element is not None:
        if isinstance(element, ctypes.Array):
            return ArrayArgument(element, len(element))
        return ArrayArgument(ctypes.pointer(element), 1)
    if isinstance(value, ctypes.Array):
        return ArrayArgument(value, len(value))
    if isinstance(value, ctypes._Pointer):
        if not value:
            return None
        return ArrayArgument(value, int(out_target(count_ref).value))
    raise ctypes.ArgumentError(f"expected an array argument, got {value!r}")
