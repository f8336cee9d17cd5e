"""The ``migdra`` command line.

Each subcommand builds its settings from flags plus environment, opens what it needs, and hands off
to library code; no logic of its own beyond presentation lives here.
"""

from __future__ import annotations

import logging
import sys
import traceback
from typing import NoReturn

import click

from dra_driver import __version__
from dra_driver.cli.lazy import LazyGroup
from dra_driver.errors import ConfigurationError, MigdraError, build_settings
from dra_driver.logs import LogSettings
from dra_driver.settings_cli import settings_options

# Subcommand groups whose modules load only when used, so `migdra --help` and the commands defined here
# do not pay for the CEL environment or the recorder.
_LAZY_GROUPS = {
    "allocate": (
        "dra_driver.cli.allocate_command",
        "allocate_command",
        "Which devices kube-scheduler would allocate to claims on a node; or why none.",
    ),
    "bench": ("dra_driver.cli.bench_commands", "bench", "Measurements anyone can re-run (placement quality)."),
    "cel": ("dra_driver.cli.cel_commands", "cel", "Evaluate and lint DRA CEL selectors."),
    "controller": (
        "dra_driver.cli.controller_command",
        "controller",
        "Run the reservation controller: every allocated claim of the driver shows its exact placement.",
    ),
    "gpus": (
        "dra_driver.cli.inventory_commands",
        "gpus",
        "Show the GPUs, their MIG profiles and legal placements, and which placements are free.",
    ),
    "hw": ("dra_driver.cli.hw_commands", "hw", "Record what real NVML answers (read-only); check the simulator."),
    "plan": (
        "dra_driver.cli.plan_command",
        "plan_command",
        "Will this workload mix fit these nodes? How many, which fails first and why (before deploying).",
    ),
    "slices": (
        "dra_driver.cli.inventory_commands",
        "slices",
        "Print the ResourceSlices this node would publish, without a cluster.",
    ),
    "status": (
        "dra_driver.cli.status_command",
        "status_command",
        "Per GPU: which memory slices hold which claim, what is realized, what still fits (from the API).",
    ),
}


# Commands found by entry point (dra_driver.cli.lazy.ENTRY_POINT_GROUP) when used, so the library never imports
# them: the node plugin's own commands (kubeletplugin/cli.py, in this distribution), and the development
# cluster, which is not part of the product (docs/local-cluster.md).
_NODE_PLUGIN_MISSING = "the node plugin (package kubeletplugin) is not installed with this migdra; reinstall it"
_ENTRY_POINT_GROUPS = {
    "health": (
        "List and clear the GPU faults that taint this node's devices (run on the node).",
        _NODE_PLUGIN_MISSING,
    ),
    "kubelet-plugin": (
        "Run the node plugin: publish ResourceSlices, register with kubelet, prepare and unprepare claims.",
        _NODE_PLUGIN_MISSING,
    ),
    "sim": (
        "Local stand-ins for cluster components (never for production).",
        "the development cluster (package migdra-devcluster) is not installed; "
        "pip install 'migdra[dev]' installs it (in a source checkout: make install)",
    ),
}


@click.group(
    cls=LazyGroup,
    lazy_commands=_LAZY_GROUPS,
    entry_point_commands=_ENTRY_POINT_GROUPS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="migdra")
@click.option("-v", "--verbose", count=True, help="more log output (-vv for debug)")
@settings_options(LogSettings)
@click.pass_context
def cli(ctx: click.Context, verbose: int, log_format: str | None) -> None:
    """migdra: NVIDIA MIG as Kubernetes DRA devices."""
    from dra_driver.logs import configure_logging  # noqa: PLC0415 -- keep `migdra --help` light

    level = logging.WARNING - 10 * min(verbose, 2)
    ctx.obj = build_settings(LogSettings, "logging", {"log_format": log_format})
    configure_logging(ctx.obj, level)
    if not verbose:  # urllib3 warns once per transport retry; migdra says once, in one line, what failed
        logging.getLogger("urllib3").setLevel(logging.ERROR)


# Exit statuses of the error boundary: usage errors (a flag, variable or file that cannot be used) are
# 2, like click's own usage errors and most Unix tools; every other failure is 1.
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def _one_line(text: str) -> str:
    """Collapse a message onto one line: a terminal user and a log scraper both read one line per error."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def _details_requested() -> bool:
    """``-v`` was given: the group callback lowered the root logger to INFO or below."""
    return logging.getLogger().isEnabledFor(logging.INFO)


def _fail(message: str, status: int) -> NoReturn:
    click.echo(f"migdra: error: {_one_line(message)}", err=True)
    sys.exit(status)


def main() -> None:
    """Console-script entry point and the one error boundary of every ``migdra`` command.

    Every expected failure is a :class:`MigdraError` (or a click usage error) and becomes exactly one
    line ``migdra: error: ...`` on stderr: exit status 2 for usage errors (bad flags, variables, input
    files), 1 for everything else.  Anything unexpected is a bug: one line plus a hint to rerun with
    ``-v``, which prints the traceback.
    """
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.NoArgsIsHelpError as exc:
        # `migdra` (or `migdra cel`) alone: the help it asks for, whole and readable, not an error line;
        # still status 2, as no command ran.
        click.echo(exc.ctx.get_help() if exc.ctx is not None else cli.get_help(click.Context(cli)))
        sys.exit(EXIT_USAGE)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "migdra"
        _fail(f"{exc.format_message()} (see '{where} --help')", EXIT_USAGE)
    except click.ClickException as exc:
        _fail(exc.format_message(), exc.exit_code or EXIT_FAILURE)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("migdra: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except ConfigurationError as exc:
        _fail(str(exc), EXIT_USAGE)
    except MigdraError as exc:
        _fail(str(exc), EXIT_FAILURE)
    except BrokenPipeError:
        # `migdra slices | head`: the reader left; nothing more to say, and nowhere to say it.
        sys.stderr.close()
        sys.exit(EXIT_FAILURE)
    except Exception as exc:
        if _details_requested():
            traceback.print_exc()
        hint = "a bug in migdra; run with -v for details: migdra -v COMMAND ..."
        _fail(f"unexpected {type(exc).__name__}: {exc} ({hint})", EXIT_FAILURE)


if __name__ == "__main__":
    main()
