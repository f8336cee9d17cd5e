"""NVML return codes become migdra errors in one place, keeping the code and NVML's message."""

from __future__ import annotations

import pynvml
import pytest

from dra_driver.nvml import errors
from dra_driver.nvml.backend import _translate


@pytest.mark.parametrize(
    ("code", "error_class", "retryable"),
    [
        (pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES, errors.NvmlInsufficientResources, False),
        (pynvml.NVML_ERROR_IN_USE, errors.NvmlInUse, True),
        (pynvml.NVML_ERROR_INVALID_ARGUMENT, errors.NvmlInvalidArgument, False),
        (pynvml.NVML_ERROR_NOT_SUPPORTED, errors.NvmlNotSupported, False),
        (pynvml.NVML_ERROR_NOT_FOUND, errors.NvmlNotFound, False),
        (pynvml.NVML_ERROR_NO_PERMISSION, errors.NvmlNoPermission, False),
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, errors.NvmlLibraryUnavailable, False),
        (pynvml.NVML_ERROR_UNINITIALIZED, errors.NvmlLibraryUnavailable, False),
        (pynvml.NVML_ERROR_GPU_IS_LOST, errors.NvmlUnexpectedError, True),
        (pynvml.NVML_ERROR_UNKNOWN, errors.NvmlUnexpectedError, True),
    ],
)
def test_translation(code: int, error_class: type[errors.NvmlError], retryable: bool) -> None:
    translated = _translate("nvmlDoSomething", "GPU-1", pynvml.NVMLError(code))
    assert type(translated) is error_class
    assert translated.code == code
    assert translated.retryable is retryable
    assert "nvmlDoSomething on GPU-1" in str(translated)
    assert f"NVML error {code}" in str(translated)
