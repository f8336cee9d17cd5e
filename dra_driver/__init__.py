"""migdra: a Kubernetes DRA driver that turns NVIDIA MIG placements into schedulable devices.

``dra_driver`` is the library: the MIG catalog, the NVML boundary (and its simulator), the device
model, the CEL environment, settings and the CLI.  It never starts processes on import.
"""

__version__ = "0.1.0"
