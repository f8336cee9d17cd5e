"""Persisting the store to one JSON file: loaded at start, written atomically on change and at stop.

The file holds the global resourceVersion and every object; event history is not kept, so a watch
from a version before the restart gets 410 Expired, exactly as after an etcd compaction.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

from dra_driver.durable import write_file_atomically
from dra_driver.errors import ConfigurationError
from migdra_devcluster.apiserver.store import Store

log = logging.getLogger(__name__)
FORMAT = "migdra.apiserver.snapshot/v1"


def load_snapshot(store: Store, path: Path) -> bool:
    """Fill ``store`` from ``path`` if it exists; False if there was no file."""
    if not path.exists():
        return False
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            found = data.get("format") if isinstance(data, dict) else f"a JSON {type(data).__name__}"
            raise ValueError(f"not a snapshot: format is {found!r}, expected {FORMAT!r}")
        objects = [(str(entry["resource"]), dict(entry["object"])) for entry in data["objects"]]
        for resource, obj in objects:
            if not isinstance(obj.get("metadata"), dict) or not {"name", "uid"} <= obj["metadata"].keys():
                raise ValueError(f"an object of {resource} has no metadata.name and metadata.uid")
        store.restore(int(data["resourceVersion"]), objects)
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"snapshot {path} cannot be loaded: not a JSON text file ({exc.reason})") from exc
    except OSError as exc:
        raise ConfigurationError(f"snapshot {path} cannot be read: {exc.strerror or exc}") from exc
    except KeyError as exc:
        raise ConfigurationError(f"snapshot {path} cannot be loaded: missing {exc.args[0]!r}") from exc
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(f"snapshot {path} cannot be loaded: {exc}") from exc
    return True


def write_snapshot(store: Store, path: Path) -> None:
    """Write every object atomically (temporary file, fsync, rename)."""
    with store.lock:
        data: dict[str, Any] = {
            "format": FORMAT,
            "resourceVersion": store.resource_version,
            "objects": [{"resource": key, "object": obj} for key, obj in store.all_objects()],
        }
        text = json.dumps(data, separators=(",", ":"))
    write_file_atomically(path, text.encode())


class SnapshotWriter:
    """A thread that writes the snapshot every ``interval`` seconds when the store has changed."""

    def __init__(self, store: Store, path: Path, interval: float) -> None:
        self.store = store
        self.path = path
        self.interval = interval
        self._stopping = threading.Event()
        self._written_at = store.writes
        self._thread = threading.Thread(target=self._run, name="apiserver-snapshot", daemon=True)

    def start(self) -> None:
        """Start the periodic writer."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the writer and write a final snapshot."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()
        self.flush()

    def flush(self) -> None:
        """Write now if anything changed since the last write."""
        writes = self.store.writes
        if writes != self._written_at:
            write_snapshot(self.store, self.path)
            self._written_at = writes

    def _run(self) -> None:
        while not self._stopping.wait(self.interval):
            try:
                self.flush()
            except OSError:  # a full disk must not stop the server; the final write at stop will report it
                log.exception("writing the API server snapshot to %s failed", self.path)
