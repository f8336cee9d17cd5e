"""Flags shared by several ``migdra`` commands."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


class _FilePath(click.Path):
    """A file path flag that refuses ``""``: click would make it ``Path(".")``, the current directory."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("is empty; give the path of a file, e.g. ./node.json", param, ctx)
        return super().convert(value, param, ctx)


def nvml_options(command: F) -> F:
    """The flags that choose the NVML library; each also reads its ``MIGDRA_*`` variable."""
    options = [
        click.option(
            "--nvml",
            type=click.Choice(["real", "simulated"]),
            default=None,
            help="NVML library: the real libnvidia-ml (default) or the simulator [env MIGDRA_NVML]",
        ),
        click.option(
            "--sim-state",
            type=_FilePath(dir_okay=False, path_type=Path),
            default=None,
            help="simulated hardware state file, created if absent [env MIGDRA_SIM_STATE]",
        ),
        click.option(
            "--sim-gpus",
            default=None,
            metavar="MODEL[:N],...",
            help="GPUs of a new simulated node, e.g. H100-SXM5-80GB:8 [env MIGDRA_SIM_GPUS]",
        ),
        click.option(
            "--sim-mig-enabled/--sim-mig-disabled",
            default=None,
            help="MIG mode of a new simulated node (default enabled) [env MIGDRA_SIM_MIG_ENABLED]",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command
