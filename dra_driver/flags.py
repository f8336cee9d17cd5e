"""A setting's command-line flag, declared with the setting itself.

Every setting of migdra's processes is one field of a pydantic-settings model: its name, type, default,
``MIGDRA_*`` variable and meaning.  A field that is also a flag says so here, in the same declaration
(``Field(..., json_schema_extra=flag())``); the CLI's options (``dra_driver.cli.settings_options``), the
errors that name a flag (:func:`dra_driver.errors.describe_settings_error`) and the configuration doc
(``hack/gen_config_docs.py``) are all generated from it, so no setting is spelled twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

PathKind = Literal["file", "existing-file", "dir"]

_KEY = "migdraFlag"


@dataclass(frozen=True, slots=True)
class Flag:
    """How a setting is spelled on the command line.  ``name``: the flag (``--`` and the field's name
    with dashes when None); ``off``: a boolean's negative (``--no-<name>`` when None); ``metavar``: what
    the help shows as its value; ``path``: what kind of path it takes (click checks it exists with
    ``existing-file``; an empty file path is refused rather than read as the current directory)."""

    name: str | None = None
    off: str | None = None
    metavar: str | None = None
    path: PathKind | None = None

    def spelled(self, field: str) -> str:
        return self.name or "--" + field.replace("_", "-")

    def negative(self, field: str) -> str:
        return self.off or "--no-" + self.spelled(field).removeprefix("--")


def flag(
    name: str | None = None, *, off: str | None = None, metavar: str | None = None, path: PathKind | None = None
) -> dict[str, Any]:
    """``json_schema_extra`` of a field that is also a flag."""
    spec = {"name": name, "off": off, "metavar": metavar, "path": path}
    return {_KEY: {key: value for key, value in spec.items() if value is not None}}


def flag_of(extra: object) -> Flag | None:
    """The flag a field's ``json_schema_extra`` declares; None: the setting is a variable only."""
    if not isinstance(extra, Mapping) or _KEY not in extra:
        return None
    return Flag(**extra[_KEY])


def model_flags(model: object) -> dict[str, Flag]:
    """Field name -> its flag, for every field of a settings model that has one (in declaration order)."""
    fields = getattr(model, "model_fields", {})
    found = {}
    for name, info in fields.items():
        declared = flag_of(info.json_schema_extra)
        if declared is not None:
            found[name] = declared
    return found
