"""The DeviceClasses migdra ships, as the Helm chart installs them: package data
(``dra_driver/data/deviceclasses/``; ``deviceclasses/`` of a source checkout and the chart's
``deviceclasses`` link point there), so an installed migdra -- wheel or image -- reads the same files.

Owns reading ``deviceclasses/*.yaml`` and ``deviceclasses/examples/*.yaml`` and putting another driver
name into their CEL selectors, as the chart does for ``driverName``.  ``migdra plan`` and ``migdra bench``
allocate against these classes, and the development cluster installs them; one reader, so the classes a
plan assumes are the classes a cluster gets.

Must never: talk to a cluster, or change a class's name (only its selectors name the driver).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dra_driver.devicemodel.vocabulary import DEFAULT_DRIVER_NAME
from dra_driver.errors import ConfigurationError

# Package data: `migdra plan` and `migdra bench placement` of an installed migdra, the chart (through its
# link) and the development cluster read the same files.
DEVICECLASS_DIR = Path(__file__).resolve().parent / "data" / "deviceclasses"


def substitute_driver(document: dict[str, Any], driver: str) -> dict[str, Any]:
    """A DeviceClass with ``gpu.migdra.io`` replaced by ``driver`` in its CEL selectors (never in its name)."""
    if driver == DEFAULT_DRIVER_NAME:
        return document
    for selector in (document.get("spec") or {}).get("selectors") or []:
        cel = selector.get("cel") or {}
        if "expression" in cel:
            cel["expression"] = cel["expression"].replace(DEFAULT_DRIVER_NAME, driver)
    return document


def deviceclass_documents(directory: Path, driver: str) -> list[dict[str, Any]]:
    """Every DeviceClass under ``directory`` (``*.yaml``, then ``examples/*.yaml``)."""
    if not directory.is_dir():
        raise ConfigurationError(f"DeviceClass directory {directory}: not found")
    documents = []
    for path in sorted(directory.glob("*.yaml")) + sorted(directory.glob("examples/*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(document, dict) and document.get("kind") == "DeviceClass":
                documents.append(substitute_driver(document, driver))
    return documents
