"""A click group whose subcommands are imported only when they run (or their own help is asked for).

``migdra --help`` and ``migdra gpus`` should not import the CEL environment or the recorder: start-up
time is what a user feels first.  The one-line help of a lazy command is given up front so the group's
help needs no import either.

A lazy command is a module of migdra, or the entry point of the same name in the group
:data:`ENTRY_POINT_GROUP` of another installed distribution: the development cluster's ``migdra sim``
is one (package ``migdra-devcluster``), so the product names the command without importing or shipping
it, and says how to install it where it is absent.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any, Final

import click

from dra_driver.errors import ConfigurationError

ENTRY_POINT_GROUP: Final = "migdra.commands"


class LazyGroup(click.Group):
    """``lazy_commands``: name -> (module, attribute, one-line help); ``entry_point_commands``: name ->
    (one-line help, what to install when no distribution provides the entry point)."""

    def __init__(
        self,
        *args: Any,
        lazy_commands: dict[str, tuple[str, str, str]],
        entry_point_commands: dict[str, tuple[str, str]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = lazy_commands
        self.entry_point_commands = entry_point_commands or {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands, *self.entry_point_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            if cmd_name in self.lazy_commands:
                module_name, attribute, _ = self.lazy_commands[cmd_name]
                self._add(getattr(importlib.import_module(module_name), attribute), cmd_name, module_name)
            elif cmd_name in self.entry_point_commands:
                self._add(self._load_entry_point(ctx, cmd_name), cmd_name, ENTRY_POINT_GROUP)
        return super().get_command(ctx, cmd_name)

    def _load_entry_point(self, ctx: click.Context, cmd_name: str) -> object:
        found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=cmd_name)
        if not found:
            _, install = self.entry_point_commands[cmd_name]
            raise ConfigurationError(f"{ctx.command_path} {cmd_name}: {install}")
        return next(iter(found)).load()

    def _add(self, command: object, cmd_name: str, source: str) -> None:
        if not isinstance(command, click.Command):
            raise TypeError(f"{source}: {cmd_name} is not a click command")
        self.add_command(command, cmd_name)

    def _one_line_help(self, name: str) -> str | None:
        """The help given up front for a command not loaded yet (None: loaded, or not lazy)."""
        if name in self.commands:
            return None
        if name in self.lazy_commands:
            return self.lazy_commands[name][2]
        if name in self.entry_point_commands:
            return self.entry_point_commands[name][0]
        return None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            given = self._one_line_help(name)
            if given is not None:
                rows.append((name, given))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(formatter.width - 6 - len(name))))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
