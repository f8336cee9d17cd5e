"""NodePrepareResources / NodeUnprepareResources for migdra: NVML, CDI, checkpoint, claim status.

Start at ``service``: :class:`~kubeletplugin.prepare.service.PrepareService` is the
:class:`~dra_driver.kubelet.calls.DraService` the gRPC layer calls; ``claim_path`` is one claim's
prepare and unprepare, top to bottom; ``kinds`` holds one module per kind of device, each with the
same steps (plan, create, undo, release).  What they call, one job per module:

- the call: ``calls`` (the worker pool, one wrapper per claim: log context, metric, the claim's error);
- the claim: ``claims`` (read it, this driver's results in this node's pool), ``config`` (opaque config
  schema and precedence, pure), ``devices`` (device name → GPU, GI profile, placement, checked against
  NVML), ``plan`` (every device's intent, every problem at once, placements free);
- the hardware: ``kinds`` (``exclusive_mig``, ``shared_gpu_instance``, ``whole_gpu``, ``admin_access``;
  ``gpu_instances`` the one place a GPU instance is created, found from a record and destroyed;
  ``share_instances`` a shared GI's NVML steps), ``conflicts`` (is a placement taken, by whom; pure),
  ``release`` (a record's devices taken down, a failed prepare undone), ``verification`` (does NVML
  still show a record's instances?);
- the node's record: ``records`` (the versioned, checksummed schema and each record's typed steps),
  ``checkpoint`` (its store, one file per claim, shared by the plugin processes of the node), ``locks``
  (per claim and per GPU, in this process and across plugin processes);
- the claim's files: ``claim_files`` (CDI spec and device metadata together), ``cdi``, ``metadata``
  (KEP-5304), ``driver_files`` (the driver's files every spec mounts);
- ``reporter`` (the plugin's part of the claim's status and its Events, written in the background);
- ``recovery`` (what runs once at start-up: records reconciled with NVML, leftovers swept);
- ``errors`` (the per-claim error hierarchy).

Its settings are :class:`kubeletplugin.settings.PrepareSettings`.  This package never imports ``grpc``.
"""
