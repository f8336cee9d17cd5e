"""Errors of the prepare path: what one claim's prepare or unprepare can fail with, and why.

Every per-claim failure is a :class:`PrepareError`; the service turns it into that claim's
``PrepareResult.error`` / ``UnprepareResult.error`` (kubelet retries, the other claims of the request
are not affected).  :class:`CheckpointError` is different: the node's record of what migdra created is
unusable, so the plugin refuses to start rather than guess.

    MigdraError
     ├── PrepareError                one claim cannot be prepared / unprepared now
     │    ├── ClaimReadError         the claim could not be read from the API server       (retryable)
     │    ├── ClaimMismatchError     UID differs, not allocated, allocated to another pool  (permanent)
     │    ├── DeviceConfigError      an opaque config of this driver is invalid             (permanent)
     │    ├── DeviceResolutionError  unknown device, GPU, profile or illegal placement      (permanent)
     │    ├── DeviceConflictError    placement held by another claim or by an instance
     │    │                          migdra did not create; never resolved by falling back  (permanent*)
     │    ├── RealizeError           NVML failed to create the GPU / compute instance       (retryable)
     │    │    └── CapacityMismatchError  no CI profile covers the GI, or the CI delivers
     │    │                               fewer SMs than the profile advertises            (permanent)
     │    ├── DeviceMetadataError    the claim's names cannot name metadata files (KEP-5304) (permanent)
     │    ├── ReleaseError           an instance could not be destroyed (a process holds it) (retryable)
     │    ├── NodeFileError          a file of the node the claim needs (CDI spec, device
     │    │                          metadata, checkpoint record) could not be written or
     │    │                          removed: read-only file system, no space, permissions  (permanent*)
     │    └── LockTimeoutError       a lock of the claim, its GPU or the checkpoint stayed held by
     │                               another thread or plugin process past the timeout      (retryable)
     └── CheckpointError             checkpoint unreadable, corrupt (checksum) or of an unknown
                                     schema, or its lock stayed held at start-up
                                     (fatal: refuse to start; an admin inspects the file)

*permanent until someone frees the placement (DeviceConflictError) or fixes the file system
(NodeFileError); kubelet's retries succeed once that is done.

Exceptions that are not migdra's become a claim's error in one place, the service's per-claim error
mapping (``ClaimCalls._claim_error``, calls.py): an ``OSError`` of the file system there becomes a
:class:`NodeFileError`, so a read-only CDI directory reads like every other per-claim error.
"""

from __future__ import annotations

import errno
from pathlib import Path

from dra_driver.errors import MigdraError
from dra_driver.mig.catalog import Placement


class PrepareError(MigdraError):
    """One claim failed; ``describe(claim)`` is the message kubelet shows (claim, device, cause).

    ``names_claim``: the message already names the claim (e.g. the UID mismatch), so ``describe``
    does not prefix it again.
    """

    def __init__(self, message: str, *, names_claim: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.names_claim = names_claim

    def describe(self, claim_namespaced_name: str) -> str:
        return self.message if self.names_claim else f"claim {claim_namespaced_name}: {self.message}"


class ClaimReadError(PrepareError):
    """The API server did not answer with the claim (network, 5xx, 404)."""

    retryable = True


class ClaimMismatchError(PrepareError):
    """The claim is not the one kubelet meant, or is not allocated to this node's pool."""


class DeviceConfigError(PrepareError):
    """An opaque configuration entry for this driver does not parse; the message names the field."""


class DeviceResolutionError(PrepareError):
    """A device name does not resolve to a GPU, profile and legal placement on this node."""


class DeviceConflictError(PrepareError):
    """The placement is taken: by another prepared claim, or by an instance migdra did not create."""


class RealizeError(PrepareError):
    """NVML refused or failed to create an instance; what this call created was rolled back."""

    retryable = True


class ComputeInstanceLeftError(RealizeError):
    """A share's compute instance came out elsewhere than asked and could not be destroyed again: it stands
    (its ID, MIG UUID and placement here), and the share's record must name it so a release destroys it,
    and then its GI."""

    def __init__(self, message: str, compute_instance_id: int, mig_uuid: str, placement: Placement) -> None:
        super().__init__(message)
        self.compute_instance_id = compute_instance_id
        self.mig_uuid = mig_uuid
        self.placement = placement


class CapacityMismatchError(RealizeError):
    """The compute instance would not deliver the SMs the device advertises (NVIDIA #1454/#1480)."""

    retryable = False


class DeviceMetadataError(PrepareError):
    """The claim's namespace, name, a request or its pod claim name is not a name the API server accepts,
    so it cannot name a device metadata file (a path outside the metadata directory is never written)."""


class ReleaseError(PrepareError):
    """An instance could not be destroyed, typically because a process still holds it."""

    retryable = True


class NodeFileError(PrepareError):
    """A file of this node that the claim needs could not be written or removed.

    Made from the ``OSError`` (never raised by the file code itself, which raises what the operating
    system says): ``what`` names the file's role (``CDI spec``, ``device metadata``, ``state directory``)
    and ``path`` the file -- for the temporary file of an atomic write, the file it was to replace --
    so the admin knows which mount to fix; then the operating system's reason and errno name, e.g.
    ``CDI spec /var/run/cdi/gpu.migdra.io-claim_<uid>.json: Read-only file system (EROFS)``.
    Whatever this call created was rolled back (prepare) or released (unprepare) as for any failure.
    """

    def __init__(self, what: str, path: Path | None, error: OSError) -> None:
        reason = error.strerror or str(error)
        code = errno.errorcode.get(error.errno) if error.errno is not None else None
        where = f"{what} {path}" if path is not None else what
        super().__init__(f"{where}: {reason}" + (f" ({code})" if code else ""))
        self.path = path
        self.errno = error.errno


def is_file_system_error(error: BaseException) -> bool:
    """An ``OSError`` of a file operation (not a socket's or a process's, which are ``OSError`` too)."""
    return (
        isinstance(error, OSError)
        and error.errno is not None
        and not isinstance(error, ConnectionError | TimeoutError | ChildProcessError | ProcessLookupError)
    )


class LockTimeoutError(PrepareError):
    """A lock file of the state directory (or its in-process lock) stayed held past the timeout.

    The message names the lock file and, where the kernel says, the process holding it: typically the
    other plugin pod of a rolling update that is stuck.  Kubelet retries the claim.
    """

    retryable = True


class CheckpointError(MigdraError):
    """The checkpoint cannot be trusted or owned; the plugin must not start (never silently discard)."""
