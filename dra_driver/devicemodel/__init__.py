"""The MIG device model: what migdra publishes in ResourceSlices, computed purely from an inventory.

Pure and deterministic: no NVML, no Kubernetes client, no gRPC, no I/O.  ``vocabulary`` is the one
place that names every attribute, capacity and counter migdra publishes.
"""
