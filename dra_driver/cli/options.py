"""Flags shared by several ``migdra`` commands, generated from the settings they set."""

from __future__ import annotations

from dra_driver.nvml.settings import NvmlSettings
from dra_driver.settings_cli import settings_options

nvml_options = settings_options(NvmlSettings)
"""The flags that choose the NVML library; each also reads its ``MIGDRA_*`` variable."""
