"""What the control plane's Kubernetes version means for what the node plugin publishes.

The API server's ``gitVersion`` stands for the control plane's (kube-scheduler has no API to ask); it is
read once, when the plugin first publishes.  A version that does not parse is taken as new enough -- a
distribution's own numbering -- rather than turning a feature off on a guess.  Three facts follow from it:

- **shared GPU-instance devices** need 1.36.2 (kubernetes/kubernetes#139040: before it kube-scheduler may
  allocate an exclusive device overlapping a shared one, docs/sharing.md);
- **interleaving** the ``dynamic`` placement policy's profiles needs 1.36: from 1.36 kube-scheduler
  visits a pool's slices in name order, so the best device of every profile, listed first across
  slices, is visited first; on 1.35 slices come in no fixed order and only the order inside a slice holds, so the policy
  keeps each profile in one slice there (docs/placement.md);
- **scale**: kube-scheduler before 1.37 counts every node's counter slice as relevant to every node
  (kubernetes/kubernetes#138917, fixed in 1.37.0 and not backported), so its cost per pod grows with the
  square of the nodes; beyond a few dozen nodes of partitionable devices that is seconds per pod
  (docs/benchmarks.md, "kube-scheduler at scale").  The plugin says so once in its log and in the
  ``migdra_control_plane_scale_limited`` gauge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SHARED_DEVICES_SINCE = (1, 36, 2)
"""The oldest Kubernetes whose kube-scheduler counts committed shares when it rebuilds shared counters
(kubernetes/kubernetes#139040): before it, an exclusive device overlapping a shared one may be allocated
in a later scheduling cycle (docs/sharing.md, "Kubernetes versions and feature gates")."""
SLICES_IN_NAME_ORDER_SINCE = (1, 36, 0)
"""The oldest Kubernetes whose allocator visits a pool's slices sorted by name (docs/allocation.md)."""
SCALES_SINCE = (1, 37, 0)
"""The oldest Kubernetes whose kube-scheduler gathers only the node's own counter slices
(kubernetes/kubernetes#138917)."""
_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


def _since(version: tuple[int, int, int]) -> str:
    return ".".join(str(part) for part in version)


@dataclass(frozen=True)
class ControlPlaneVersion:
    """The control plane's version and what migdra publishes for it."""

    git_version: str
    parsed: tuple[int, int, int] | None

    @classmethod
    def parse(cls, git_version: str) -> ControlPlaneVersion:
        match = _VERSION.match(git_version.strip())
        parsed = (int(match[1]), int(match[2]), int(match[3])) if match else None
        return cls(git_version, parsed)

    def _at_least(self, version: tuple[int, int, int]) -> bool:
        return self.parsed is None or self.parsed >= version

    @property
    def slices_in_name_order(self) -> bool:
        return self._at_least(SLICES_IN_NAME_ORDER_SINCE)

    def shared_devices_problem(self) -> str | None:
        """Why shared devices must not be published to this control plane, or None."""
        if self._at_least(SHARED_DEVICES_SINCE):
            return None
        since = _since(SHARED_DEVICES_SINCE)
        return (
            f"the API server is {self.git_version}: before {since} kube-scheduler may allocate an exclusive device "
            "overlapping a shared one (kubernetes/kubernetes#139040), so shared GPU-instance devices are not "
            f"published; upgrade the control plane to {since} or later, or set sharedDevices: false to say so"
        )

    def scale_problem(self) -> str | None:
        """Why kube-scheduler of this control plane slows down with every node added, or None."""
        if self._at_least(SCALES_SINCE):
            return None
        return (
            f"the API server is {self.git_version}: before {_since(SCALES_SINCE)} kube-scheduler gathers every "
            "node's counter slice for every node it filters (kubernetes/kubernetes#138917), so each pod with a "
            "claim costs it time in proportion to the nodes squared: about 1 s per pod at 64 nodes of 8 GPUs "
            f"(docs/benchmarks.md); clusters beyond a few dozen nodes need Kubernetes {_since(SCALES_SINCE)} or later"
        )


def shared_devices_problem(git_version: str) -> str | None:
    """Why shared devices must not be published to an API server of ``git_version``, or None."""
    return ControlPlaneVersion.parse(git_version).shared_devices_problem()
