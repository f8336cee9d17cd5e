"""The MIG device model: what migdra publishes in ResourceSlices, computed purely from an inventory.

Pure and deterministic: no NVML, no Kubernetes client, no gRPC, no I/O.  ``vocabulary`` is the one
place that names every attribute, capacity and counter migdra publishes.

The examples are loaded on first use (PEP 562), so importing ``vocabulary`` alone -- as the CLI does
for its help texts -- does not build the device model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dra_driver.devicemodel.examples import example_inventory, example_slices

__all__ = ["example_inventory", "example_slices"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from dra_driver.devicemodel import examples  # noqa: PLC0415

        return getattr(examples, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
