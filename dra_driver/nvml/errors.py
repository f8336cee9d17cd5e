"""Errors of the NVML boundary.

NVML return codes are translated to these classes in exactly one place
(``dra_driver.nvml.backend._translate``); nothing outside the backend ever sees a ``pynvml`` exception.

    NvmlError                      any failed NVML call; .code = NVML return code, .operation = what we did
     ├── NvmlLibraryUnavailable    libnvidia-ml missing, driver not loaded, NVML not initialised  (permanent)
     ├── NvmlNoPermission          not root / no mig/config capability                            (permanent)
     ├── NvmlNotSupported          MIG off, profile absent on this GPU, vGPU guest                (permanent)
     ├── NvmlInvalidArgument       e.g. a placement not in the legal list                         (permanent)
     ├── NvmlNotFound              the GPU / GPU instance / compute instance does not exist       (permanent)
     ├── NvmlInsufficientResources placement occupied or the profile's instances used up         (permanent*)
     ├── NvmlInUse                 a process or a compute instance still holds it                 (retryable)
     └── NvmlUnexpectedError       any other code (unknown, GPU lost, timeout...)                 (retryable)
          └── NvmlComputeInstanceLeft  NVML made a CI other than asked, and it could not be destroyed again

*InsufficientResources is permanent for the caller: migdra never falls back to another placement, so
the fix is to free the placement (or reschedule), not to retry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dra_driver.errors import MigdraError

if TYPE_CHECKING:
    from dra_driver.nvml.types import ComputeInstanceInfo


class NvmlError(MigdraError):
    """An NVML call failed.  ``str()`` names the operation, the GPU and NVML's own message."""

    def __init__(
        self, operation: str, code: int, message: str, gpu: str | None = None, nvml_error_name: str | None = None
    ) -> None:
        self.operation = operation
        self.code = code
        self.nvml_message = message
        self.gpu = gpu
        # pynvml's exception class name (``NVMLError_NotSupported``): what recordings of hardware store.
        self.nvml_error_name = nvml_error_name
        where = f" on {gpu}" if gpu else ""
        super().__init__(f"{operation}{where}: {message} (NVML error {code})")


class NvmlLibraryUnavailable(NvmlError):
    """NVML cannot be used at all on this machine."""


class NvmlNoPermission(NvmlError):
    """The process lacks root or the ``mig/config`` capability."""


class NvmlNotSupported(NvmlError):
    """The operation is not supported in the GPU's current state (e.g. MIG mode off)."""


class NvmlInvalidArgument(NvmlError):
    """An argument NVML rejects, such as a placement outside the profile's legal list."""


class NvmlNotFound(NvmlError):
    """The addressed GPU, GPU instance or compute instance does not exist."""


class NvmlInsufficientResources(NvmlError):
    """The placement overlaps an existing instance, or the profile's instance count is used up."""


class NvmlInUse(NvmlError):
    """A process (or a compute instance inside a GPU instance) still holds the resource."""

    retryable = True


class NvmlUnexpectedError(NvmlError):
    """Any other NVML failure; worth retrying once the GPU settles."""

    retryable = True


class NvmlComputeInstanceLeft(NvmlUnexpectedError):
    """NVML created a compute instance other than the one asked for (elsewhere in the GI), and destroying
    it again failed: it stands, and ``compute_instance`` says which, so the caller can record it and
    destroy it later rather than leak it (and the GI it sits in) as someone else's."""

    def __init__(
        self, operation: str, code: int, message: str, gpu: str | None, compute_instance: ComputeInstanceInfo
    ) -> None:
        super().__init__(operation, code, message, gpu)
        self.compute_instance = compute_instance
