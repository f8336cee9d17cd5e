#!/usr/bin/env python3
"""Put the tables of ``docs/benchmarks.json`` into ``docs/benchmarks.md`` (``--check``: only compare).

The doc keeps its prose; each generated table sits between ``<!-- bench:TABLE_ID -->`` and
``<!-- /bench:TABLE_ID -->`` and is preceded there by the line saying when, where and under which load
it was measured.  So a number in the doc is always one a ``make bench`` run produced, and the lint step
(``--check``) fails when someone edits a table by hand or forgets to render after a run.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from benchlib import REPO, Table, describe_machine

RESULTS = REPO / "docs" / "benchmarks.json"
DOC = REPO / "docs" / "benchmarks.md"
BLOCK = re.compile(r"<!-- bench:(?P<id>[\w.-]+) -->\n.*?<!-- /bench:(?P=id) -->", re.DOTALL)


def _tables(results: dict[str, Any]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Every table of every report by its id, with the report it belongs to."""
    found: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for report in results["reports"].values():
        for table in report["tables"]:
            found[table["id"]] = (report, table)
    return found


def _render_table(report: dict[str, Any], table: dict[str, Any]) -> str:
    rendered = Table(table["id"], table["title"], table["columns"])
    rendered.rows = table["rows"]
    table_id = table["id"]
    measured = describe_machine(report)
    return f"<!-- bench:{table_id} -->\n_{measured}_\n\n{rendered.markdown()}\n<!-- /bench:{table_id} -->"


def render(doc: str, results: dict[str, Any]) -> tuple[str, list[str]]:
    """The doc with every marked table replaced; and the problems (unknown ids, tables never shown)."""
    tables = _tables(results)
    problems: list[str] = []
    shown: set[str] = set()

    def replace(match: re.Match[str]) -> str:
        table_id = match.group("id")
        if table_id not in tables:
            problems.append(f"docs/benchmarks.md shows table {table_id!r}, which no report in the results has")
            return match.group(0)
        shown.add(table_id)
        return _render_table(*tables[table_id])

    rendered = BLOCK.sub(replace, doc)
    problems += [
        f"table {table_id!r} of the results is not shown in docs/benchmarks.md (add <!-- bench:{table_id} -->"
        f"<!-- /bench:{table_id} --> where it belongs)"
        for table_id in sorted(set(tables) - shown)
    ]
    return rendered, problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the doc's tables differ from the results")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--doc", type=Path, default=DOC)
    args = parser.parse_args()
    results = json.loads(args.results.read_text(encoding="utf-8"))
    doc = args.doc.read_text(encoding="utf-8")
    rendered, problems = render(doc, results)
    for problem in problems:
        print(f"render: {problem}", file=sys.stderr)
    if args.check:
        if rendered != doc:
            print(
                f"render: the tables of {args.doc} differ from {args.results}: run `make bench-docs` "
                "(or `make bench` to measure again)",
                file=sys.stderr,
            )
            return 1
        return 1 if problems else 0
    if rendered != doc:
        args.doc.write_text(rendered, encoding="utf-8")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
