"""The errors of the structured allocator.

    MigdraError                 dra_driver.errors
     └── AllocationError        the scheduling attempt is aborted, as kube-scheduler aborts it: a CEL
          │                     error, an unknown DeviceClass, a gated field with its gate off, ``All``
          │                     over a pool that is being updated, more than 32 devices in one claim.
          │                     Not "does not fit": that is ``None`` from :func:`allocate`.
          └── InvalidPoolsError nothing could be allocated and an invalid pool was seen (Kubernetes'
                                ``ErrFailedAllocationOnNode``): this node is unschedulable for the pod,
                                other nodes may still fit it.

Messages follow the Go allocator's wording so that an admin can search for them.
"""

from __future__ import annotations

from dra_driver.errors import MigdraError


class AllocationError(MigdraError):
    """The allocation attempt cannot proceed; the message names the claim, request or pool."""


class InvalidPoolsError(AllocationError):
    """No allocation was found on this node and at least one of its pools is invalid."""

    on_node_only = True
