"""The MIG device model: what migdra publishes in ResourceSlices, computed purely from an inventory.

Pure and deterministic: no NVML, no Kubernetes client, no gRPC, no I/O.  ``vocabulary`` is the one
place that names every attribute, capacity and counter migdra publishes.
"""

from dra_driver.devicemodel.examples import example_inventory, example_slices

__all__ = ["example_inventory", "example_slices"]
