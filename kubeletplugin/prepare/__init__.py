"""NodePrepareResources / NodeUnprepareResources for migdra: NVML, CDI, checkpoint, claim status.

Start at ``service``: :class:`~kubeletplugin.prepare.service.PrepareService` is the
:class:`~dra_driver.kubelet.calls.DraService` the gRPC layer calls, and a claim's prepare and unprepare
each read top to bottom there.  What it calls, one job per module:

- the claim: ``claims`` (read it, this driver's results in this node's pool), ``config`` (opaque config
  schema and precedence, pure), ``devices`` (device name → GPU, GI profile, placement, checked against
  NVML);
- the hardware: ``mig_instances`` (create exactly that GI + full CI; destroy only what a record names;
  does NVML still show a record's instances?);
- the node's record: ``records`` (the versioned, checksummed schema), ``checkpoint`` (its store, one
  file per claim, shared by the plugin processes of the node), ``locks`` (per claim and per GPU, in this
  process and across plugin processes);
- the claim's files: ``claim_files`` (CDI spec and device metadata together), ``cdi``, ``metadata``
  (KEP-5304), ``driver_files`` (the driver's files every spec mounts);
- ``reporter`` (the plugin's part of the claim's status and its Events, written in the background);
- ``recovery`` (what runs once at start-up: records reconciled with NVML, leftovers swept);
- ``errors`` (the per-claim error hierarchy).

Its settings are :class:`kubeletplugin.settings.PrepareSettings`.  This package never imports ``grpc``.
"""
