"""A prepared claim's files on this node: its CDI spec and its device metadata, kept together.

The prepare path writes them after the claim's instances exist and before its record says
``PrepareCompleted``; unprepare deletes them after the record is dropped; start-up recovery writes
them again for a record it adopts.  :class:`ClaimFiles` is that one interface: the format of each file
is its own module's (:mod:`~kubeletplugin.prepare.cdi`, :mod:`~kubeletplugin.prepare.metadata`), where
they go and in which order is decided here:

- the device metadata files first, then the spec that bind-mounts them (a runtime that reads the spec
  finds the files it names);
- removal of the spec, then of the metadata -- the metadata also when the spec cannot go (a read-only
  CDI directory): it is another mount, and its files would otherwise wait for the next start-up;
- :meth:`ClaimFiles.describe_file` names a file an ``OSError`` mentions by its role (CDI spec, device
  metadata, state directory), for the claim's error.

Callers hold the claim's lock around every write and removal of that claim's files (in every plugin
process of the node), so this module takes none.  It never talks to NVML or the API server beyond
reading the attributes a device publishes (:class:`~kubeletplugin.prepare.metadata.DeviceAttributeReader`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dra_driver.durable import parse_temporary_name
from kubeletplugin.prepare.cdi import (
    CommonEdits,
    claim_uid_of_spec,
    delete_cdi_spec,
    ensure_claim_spec,
    write_claim_spec,
)
from kubeletplugin.prepare.errors import PrepareError
from kubeletplugin.prepare.metadata import (
    METADATA_DIR,
    DeviceAttribute,
    DeviceAttributeReader,
    RequestMetadata,
    build_claim_metadata,
    build_metadata_mounts,
    list_metadata_claims,
    read_metadata_missing,
    remove_claim_metadata,
    write_claim_metadata,
)
from kubeletplugin.prepare.records import ClaimRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClaimFiles:
    """Where a node's claims' files go, and how they are written, checked and removed together.

    ``metadata_root``: the directory under which the KEP-5304 device metadata is written (swept even
    when ``device_metadata`` is off); ``common_edits``: driver files and device nodes, the same in every
    claim's spec; ``state_dir`` only names files in errors.
    """

    cdi_dir: Path
    proc_root: Path
    driver_name: str
    pool_name: str
    metadata_root: Path
    device_metadata: bool
    common_edits: CommonEdits
    attributes: DeviceAttributeReader
    state_dir: Path

    def write(self, record: ClaimRecord) -> None:
        """The claim's device metadata files (device attributes read through NVML), then its spec."""
        mounts = None
        if self.device_metadata:
            mounts = build_metadata_mounts(record, self.driver_name, self.metadata_root)  # names checked first
            files = self._metadata(record, self.attributes.read(record))
            write_claim_metadata(self.metadata_root, files, record.claim_uid)
        write_claim_spec(self.cdi_dir, self.proc_root, self.driver_name, record, mounts, self.common_edits)

    def ensure(self, record: ClaimRecord, *, strict: bool = True) -> None:
        """Write the metadata files and the spec again where missing.  ``strict=False`` (start-up): a
        metadata failure is logged, not raised -- the next prepare of the claim writes them again."""
        mounts = None
        if self.device_metadata:
            try:
                mounts = build_metadata_mounts(record, self.driver_name, self.metadata_root)
                if record.devices and read_metadata_missing(self._metadata(record, attributes={})):
                    log.warning(
                        "device metadata of claim %s (UID %s) is missing; writing it again",
                        record.label,
                        record.claim_uid,
                    )
                    files = self._metadata(record, self.attributes.read(record))
                    write_claim_metadata(self.metadata_root, files, record.claim_uid)
            except (PrepareError, OSError) as e:
                if strict:
                    raise
                log.error(
                    "device metadata of claim %s (UID %s) could not be written: %s", record.label, record.claim_uid, e
                )
        ensure_claim_spec(self.cdi_dir, self.proc_root, self.driver_name, record, mounts, self.common_edits)

    def delete(self, claim_uid: str, claim: tuple[str, str] | None = None) -> bool:
        """Delete the claim's spec (True if there was one) and its device metadata files; ``claim``
        (namespace, name) says where they are, else every metadata directory is looked at."""
        where = (
            [claim]
            if claim is not None
            else [(d.namespace, d.name) for d in list_metadata_claims(self.metadata_root) if claim_uid in d.claim_uids]
        )
        try:
            return delete_cdi_spec(self.cdi_dir, self.driver_name, claim_uid)
        finally:
            # Also when the spec cannot go (a read-only CDI directory): the metadata directory is
            # another mount, and its files would otherwise wait for the next start-up's sweep.
            for namespace, name in where:
                remove_claim_metadata(self.metadata_root, namespace, name, claim_uid)

    def describe_file(self, filename: object) -> tuple[str, Path | None]:
        """(role, path) of a file an ``OSError`` names: the temporary file of an atomic write stands
        for the file it was to replace, and the role says which of the claim's files it is."""
        if not isinstance(filename, str | Path):
            return "a file of this node", None
        path = Path(filename)
        temporary = parse_temporary_name(path.name)
        if temporary is not None:
            path = path.with_name(temporary[0])
        if path.is_relative_to(self.cdi_dir):
            if claim_uid_of_spec(path, self.driver_name) is not None:
                return "CDI spec", path
            return "CDI directory", path
        if path.is_relative_to(self.metadata_root / METADATA_DIR):
            return "device metadata", path
        if path.is_relative_to(self.state_dir):
            return "state directory", path
        return "file", path

    def _metadata(
        self, record: ClaimRecord, attributes: Mapping[str, Mapping[str, DeviceAttribute]]
    ) -> list[RequestMetadata]:
        return build_claim_metadata(record, self.driver_name, self.pool_name, self.metadata_root, attributes)
