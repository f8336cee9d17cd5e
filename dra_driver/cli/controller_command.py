"""``migdra controller``: the reservation controller's process.  Loaded only when used: its flags are
generated from :class:`~dra_driver.controller.settings.ControllerSettings`."""

from __future__ import annotations

import sys

import click

from dra_driver.controller.settings import ControllerSettings
from dra_driver.errors import build_settings
from dra_driver.settings_cli import announcer, given_settings, settings_options


@click.command("controller")
@settings_options(ControllerSettings)
def controller(**given: object) -> None:
    """Run the reservation controller: every allocated claim of the driver shows its exact placement
    (docs/claim-status.md); conflicts are flagged, never deallocated."""
    from dra_driver.controller.app import run_controller  # noqa: PLC0415 -- keep `migdra --help` light
    from dra_driver.serving import stop_on_signals  # noqa: PLC0415

    settings = build_settings(ControllerSettings, "controller", given_settings(ControllerSettings, given))
    stop = stop_on_signals()
    sys.exit(run_controller(settings, stop, announcer()))
