#!/usr/bin/env python3
"""Regenerate the settings tables of docs/configuration.md from the settings models themselves.

The models (pydantic-settings) are the one place each setting is defined: name, environment variable,
default and meaning.  The tables between ``<!-- settings:NAME -->`` and ``<!-- /settings:NAME -->``
markers are generated; ``--check`` fails when they are stale (``tests/integration/test_generated_files.py``).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from dra_driver.controller.settings import ControllerSettings
from dra_driver.flags import model_flags
from dra_driver.logs import LogSettings
from dra_driver.nvml.settings import NvmlSettings
from dra_driver.settings_cli import unwrapped_annotation as _unwrapped
from kubeletplugin.settings import PluginSettings, PrepareSettings

DOC = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
GROUPS: dict[str, type[BaseSettings]] = {
    "logging": LogSettings,
    "nvml": NvmlSettings,
    "plugin": PluginSettings,
    "prepare": PrepareSettings,
    "controller": ControllerSettings,
}


def _flags(model: type[BaseSettings]) -> dict[str, str]:
    """Field name -> its flag as the CLI spells it (``--health/--no-health``), from the field's declaration."""
    flags = {}
    for name, declared in model_flags(model).items():
        spelled = declared.spelled(name)
        if _unwrapped(model.model_fields[name].annotation) is bool:
            spelled += "/" + declared.negative(name)
        flags[name] = f"`{spelled}`"
    return flags


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if value is None or value in ((), ""):
        return "-"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (set, frozenset)):  # as the flag takes it: comma-separated, sorted
        return f"`{','.join(str(item) for item in sorted(value))}`"
    return f"`{value}`"


def table(model: type[BaseSettings]) -> str:
    prefix = str(model.model_config.get("env_prefix", ""))
    flags = _flags(model)
    rows = ["| Flag | Variable | Default | Meaning |", "|---|---|---|---|"]
    for name, info in model.model_fields.items():
        flag = flags.get(name, "(variable only)")
        description = (info.description or "").replace("|", "\\|")
        rows.append(f"| {flag} | `{prefix}{name.upper()}` | {_default(info)} | {description} |")
    return "\n".join(rows)


def _between_markers(body: str) -> Callable[[re.Match[str]], str]:
    """A ``re.sub`` replacement that keeps a match's two markers and puts ``body`` between them."""
    return lambda m: m.group(1) + body + "\n" + m.group(2)


def render(text: str) -> str:
    for group, model in GROUPS.items():
        pattern = re.compile(rf"(<!-- settings:{group} -->\n).*?(<!-- /settings:{group} -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"{DOC}: no <!-- settings:{group} --> markers")
        text = pattern.sub(_between_markers(table(model)), text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/configuration.md is stale")
    args = parser.parse_args()
    current = DOC.read_text()
    wanted = render(current)
    if args.check:
        if wanted != current:
            print(f"{DOC} is stale: run hack/gen_config_docs.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(wanted)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
