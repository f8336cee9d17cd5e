"""``migdra checkpoint-downgrade STATE_DIR``: the checkpoint back to one file, before a downgrade.

Before a downgrade to a migdra that reads only the single ``checkpoint.json`` (schema version 1),
with no plugin running on the node: :meth:`CheckpointStore.downgrade_to_single_file
<kubeletplugin.prepare.checkpoint.CheckpointStore.downgrade_to_single_file>` says what it does and
why it is crash-safe; docs/operations.md, "Downgrades", says when to run it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kubeletplugin.prepare.checkpoint import CheckpointStore, read_node_boot_id


def downgrade_checkpoint(state_dir: Path, read_boot_id: Callable[[], str] = read_node_boot_id) -> int:
    """Write this boot's records in ``state_dir`` as one ``checkpoint.json`` and remove ``claims/``.

    Returns how many claims it wrote; raises :class:`~kubeletplugin.prepare.errors.CheckpointError`
    (a directory without the marker, an unreadable record) and changes nothing then.
    """
    return CheckpointStore(state_dir, read_boot_id()).downgrade_to_single_file()
