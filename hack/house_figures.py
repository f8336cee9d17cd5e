#!/usr/bin/env python3
"""The figures of docs/architecture.md's "before and after": lines per room, the longest classes and
functions, and the longest modules of the node plugin's prepare.

Counts Python lines (every line of every ``*.py``) under each room of a checkout -- the production
library, the tools-only library, the node plugin, the controller, the development cluster, the
benchmarks, the tests -- and finds the longest class and function bodies with :mod:`ast`.  Run from a
checkout's root (``.venv/bin/python hack/house_figures.py``); the same script in an older checkout
gives the "before".  Rooms that do not exist there count zero.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path.cwd()
ROOMS: dict[str, tuple[str, ...]] = {
    "node plugin (kubeletplugin/)": ("kubeletplugin",),
    "controller (dra_driver/controller/)": ("dra_driver/controller",),
    "library, all (dra_driver/)": ("dra_driver",),
    "of it what only the tools run (dra_driver/tools/, or before: allocation, packing, cel, validation)": (
        "dra_driver/tools",
        "dra_driver/allocation",
        "dra_driver/packing",
        "dra_driver/cel",
        "dra_driver/validation",
    ),
    "of it the command line (dra_driver/cli/)": ("dra_driver/cli",),
    "development cluster (devcluster/)": ("devcluster",),
    "benchmarks and generators (hack/)": ("hack",),
    "tests (tests/)": ("tests",),
}


def _files(prefixes: tuple[str, ...]) -> list[Path]:
    found = {p for prefix in prefixes for p in (ROOT / prefix).rglob("*.py") if ".venv" not in p.parts}
    return sorted(found)


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _longest(paths: list[Path], kind: type[ast.stmt]) -> list[tuple[int, str]]:
    found = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, kind) and node.end_lineno is not None:
                name = getattr(node, "name", "?")
                found.append((node.end_lineno - node.lineno + 1, f"{path.relative_to(ROOT)}:{name}"))
    return sorted(found, reverse=True)[:3]


def main() -> int:
    for room, prefixes in ROOMS.items():
        files = _files(prefixes)
        print(f"{room}: {sum(_lines(p) for p in files)} lines in {len(files)} files")
    product = _files(("dra_driver", "kubeletplugin"))
    print("longest classes:", "; ".join(f"{name} {n}" for n, name in _longest(product, ast.ClassDef)))
    functions = _longest(product, ast.FunctionDef)
    print("longest functions:", "; ".join(f"{name} {n}" for n, name in functions))
    prepare = sorted(((_lines(p), str(p.relative_to(ROOT))) for p in _files(("kubeletplugin/prepare",))), reverse=True)
    print("longest prepare modules:", "; ".join(f"{name} {n}" for n, name in prepare[:5]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
