"""``python -m kubeletplugin.prepare.checkpoint_downgrade STATE_DIR``: the checkpoint back to one file.

Before a downgrade to a migdra that reads only the single ``checkpoint.json`` (schema version 1),
with no plugin running on the node: :meth:`CheckpointStore.downgrade_to_single_file
<kubeletplugin.prepare.checkpoint.CheckpointStore.downgrade_to_single_file>` says what it does and
why it is crash-safe; docs/operations.md, "Downgrades", says when to run it.  A module of its own, so
that ``python -m`` runs it without importing it twice.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kubeletplugin.prepare.checkpoint import CHECKPOINT_FILE, CheckpointStore, read_node_boot_id
from kubeletplugin.prepare.errors import CheckpointError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kubeletplugin.prepare.checkpoint_downgrade",
        description="Write this boot's checkpoint records as one checkpoint.json (schema version 1) for a migdra "
        "before one file per claim, and remove the record files. Stop the plugin on the node first.",
    )
    parser.add_argument("state_dir", type=Path, help="the plugin's state directory (MIGDRA_STATE_DIR)")
    arguments = parser.parse_args(argv)
    try:
        count = CheckpointStore(arguments.state_dir, read_node_boot_id()).downgrade_to_single_file()
    except CheckpointError as e:
        print(f"migdra: error: {e}", file=sys.stderr, flush=True)
        return 1
    print(f"wrote {count} claim(s) to {arguments.state_dir / CHECKPOINT_FILE} (schema version 1), removed claims/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
