#!/usr/bin/env python3
"""``make bench``: run every benchmark, collect their reports in ``docs/benchmarks.json``, render the doc.

Each benchmark runs as its own process (one does not warm caches or leave threads for the next),
one after the other (two at once would measure each other).  ``--only NAME`` re-runs some and keeps
the other reports already in the results file, so one slow benchmark need not be repeated to refresh
another; the doc's tables are then rendered from the whole file (``hack/bench/render.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import REPO
from render import DOC, RESULTS, render

BENCH_DIR = Path(__file__).resolve().parent

# name -> extra arguments; every one also gets --runs, --busy-loops and --json.
BENCHES: dict[str, list[str]] = {
    "startup": [],
    "plugin": [],
    "prepare": [],
    "devicemodel": [],
    "scale": [],
    "cel": [],
    "allocator": [],
    "placement": [],
    "sharing": [],
    "share_prepare": [],
    "controlplane": [],
    "scheduler": [],
    "schedlayout": [],
    "components": ["--write-qps", "1000", "--write-burst", "1000"],  # the controller's own pace, not its rate limit
}
# Also run with every CPU taken (``--busy-loops``): the node paths whose latency a loaded node changes most.
LOADED = ("startup", "plugin", "prepare")


def settle(limit: float, most: float) -> None:
    """Wait (at most ``most`` seconds) until the 1-minute load average is under ``limit``.

    Why: the load average lags by about a minute, so a benchmark that starts right after a busy one
    (the API server's has over 40 threads runnable) would record that one's load as its own, and run
    on a machine still catching up.
    """
    deadline = time.monotonic() + most
    while os.getloadavg()[0] >= limit and time.monotonic() < deadline:
        time.sleep(5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=sorted(BENCHES), help="run only these (repeatable)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--busy-loops", type=int, default=2, help=f"CPU-spinning processes for the loaded runs of {', '.join(LOADED)}"
    )
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument(
        "--settle", type=float, default=120.0, help="seconds to wait at most for the load to fall before each"
    )
    args = parser.parse_args()
    results: dict[str, Any] = {"reports": {}}
    if args.results.exists():
        results = json.loads(args.results.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="migdra-bench-") as scratch:
        chosen = args.only or list(BENCHES)
        plan = [(name, 0) for name in chosen]
        if args.busy_loops:
            plan += [(name, args.busy_loops) for name in chosen if name in LOADED]
        for name, loops in plan:
            script = BENCH_DIR / f"{name}_bench.py"
            if not script.exists():
                print(f"bench: {script.relative_to(REPO)} does not exist yet, skipped", file=sys.stderr)
                continue
            settle(limit=max(1.0, (os.cpu_count() or 1) / 2), most=args.settle)
            out = Path(scratch) / f"{name}-{loops}.json"
            argv = [sys.executable, str(script), *BENCHES[name], "--runs", str(args.runs)]
            argv += ["--busy-loops", str(loops), "--json", str(out)]
            print(f"bench: {' '.join(argv[1:])}", file=sys.stderr, flush=True)
            done = subprocess.run(argv, cwd=REPO, check=False)
            if done.returncode != 0:
                print(f"bench: {name} failed (exit {done.returncode}); its old report is kept", file=sys.stderr)
                continue
            report = json.loads(out.read_text(encoding="utf-8"))
            results["reports"][report["bench"]] = report
    args.results.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    rendered, problems = render(DOC.read_text(encoding="utf-8"), results)
    DOC.write_text(rendered, encoding="utf-8")
    for problem in problems:
        print(f"bench: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
