"""NodePrepareResources / NodeUnprepareResources for migdra: NVML, CDI, checkpoint, claim status.

Modules, one job each: ``claims`` (read the claim, extract this driver's allocation), ``config``
(opaque config schema and precedence, pure), ``devices`` (device name → GPU, profile, placement),
``realize`` (create exactly that GI + full CI; destroy only what a record names), ``cdi`` (per-claim
CDI specs), ``checkpoint`` (the versioned, checksummed record), ``recovery`` (start-up
reconciliation), ``status`` (claim status and Events), ``service`` (:class:`PrepareService`, the
:class:`~kubeletplugin.draservice.DraService` implementation), plus ``errors``, ``locks`` (per claim and
per GPU, in this process and across plugin processes), ``leftovers`` (temporary files of interrupted
writes), ``crashpoints`` and ``settings``.  This package never imports ``grpc``.
"""

from kubeletplugin.prepare.crashpoints import CrashPoint
from kubeletplugin.prepare.errors import CheckpointError, PrepareError
from kubeletplugin.prepare.service import PrepareService
from kubeletplugin.prepare.settings import PrepareSettings

__all__ = ["CheckpointError", "CrashPoint", "PrepareError", "PrepareService", "PrepareSettings"]
