"""Click options generated from the settings models, the settings built from what was given, and the
one line a serving process announces itself with.

A setting is declared once, as a field of its pydantic-settings model, with its flag
(:mod:`dra_driver.flags`); :func:`settings_options` turns each such field into a ``click.Option``: the
flag's spelling, a ``--x/--no-x`` pair for a boolean, a choice for a ``Literal``, a path type
for a path (an enum is left to the model, whose one-line error names the flag and the variable); the
help is the field's description with its variable and default.  Every option defaults
to None ("not given"), so :func:`dra_driver.errors.build_settings` lets the ``MIGDRA_*`` variable and then the model's
default decide, and a bad value fails in one line naming the flag and the variable.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click
from pydantic.fields import FieldInfo

from dra_driver.flags import Flag, model_flags

F = TypeVar("F", bound=Callable[..., Any])
SettingsT = TypeVar("SettingsT")


class _FilePath(click.Path):
    """A file path flag that refuses ``""``: click would make it ``Path(".")``, the current directory."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("is empty; give the path of a file, e.g. ./node.json", param, ctx)
        return super().convert(value, param, ctx)


def settings_options(model: type[Any]) -> Callable[[F], F]:
    """Decorate a click command with one option per flag ``model`` declares, in declaration order."""
    prefix = str(model.model_config.get("env_prefix", ""))
    options = [
        _option(name, declared, model.model_fields[name], prefix) for name, declared in model_flags(model).items()
    ]

    def decorate(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def given_settings(model: type[Any], given: Mapping[str, object]) -> dict[str, object]:
    """The values of ``model``'s flags among a command's parameters."""
    return {name: given[name] for name in model_flags(model) if name in given}


def _option(name: str, declared: Flag, info: FieldInfo, prefix: str) -> Callable[[F], F]:
    annotation = unwrapped_annotation(info.annotation)
    variable = f"{prefix}{name.upper()}"
    help_text = f"{info.description or ''} [{_default(info)}env {variable}]"
    if annotation is bool:
        spelling = f"{declared.spelled(name)}/{declared.negative(name)}"
        return click.option(spelling, name, default=None, help=help_text)
    kind: Any = None
    if declared.path is not None:
        kind = (
            _FilePath(dir_okay=False)
            if declared.path == "file"
            else click.Path(
                exists=declared.path == "existing-file",
                dir_okay=declared.path == "dir",
                file_okay=declared.path != "dir",
            )
        )
    elif typing.get_origin(annotation) is typing.Literal:
        kind = click.Choice([str(value) for value in typing.get_args(annotation)])
    elif annotation in (int, float):
        kind = annotation
    return click.option(declared.spelled(name), name, type=kind, default=None, metavar=declared.metavar, help=help_text)


def unwrapped_annotation(annotation: Any) -> Any:
    """``X`` of ``X | None`` and of ``Annotated[X, ...]``."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        members = [member for member in typing.get_args(annotation) if member is not type(None)]
        if len(members) == 1:
            return unwrapped_annotation(members[0])
    return annotation


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required; "
    value = info.get_default(call_default_factory=True)
    if value is None or value in ((), "", frozenset()):
        return ""
    if isinstance(value, bool):
        return f"default: {'on' if value else 'off'}; "
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, (set, frozenset, tuple)):
        value = ",".join(str(item) for item in sorted(value))
    if isinstance(value, Path):
        value = str(value)
    return f"default: {value}; "


def announcer() -> Callable[[str], None]:
    """How a serving command announces itself once up (one line on stderr; with ``--log-format json`` the
    same line as a JSON log line, since a log pipeline reads nothing else).  Chosen on the command's
    thread: the line may come from another.  The ``migdra`` group put the log settings on the root
    context before any command ran."""
    from dra_driver.logs import LogFormat, render_announcement  # noqa: PLC0415

    settings = click.get_current_context().find_root().obj
    if getattr(settings, "log_format", None) is LogFormat.JSON:
        return lambda line: click.echo(render_announcement(line), err=True)
    return lambda line: click.echo(line, err=True)
