"""Field paths in kube-apiserver's notation: ``spec.devices[3].attributes[gpu.migdra.io/profile]``.

This module owns the notation only (``field.Path.String()`` in apimachinery); it never looks into objects.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FieldPath:
    """An immutable path from an object's root to one of its fields; :data:`ROOT` is the empty path."""

    text: str

    def child(self, *names: str) -> FieldPath:
        """``spec`` -> ``spec.devices`` (several names descend several levels)."""
        text = self.text
        for name in names:
            text = f"{text}.{name}" if text else name
        return FieldPath(text)

    def index(self, position: int) -> FieldPath:
        """``spec.devices`` -> ``spec.devices[3]``."""
        return FieldPath(f"{self.text}[{position}]")

    def key(self, key: str) -> FieldPath:
        """``spec.devices[0].attributes`` -> ``spec.devices[0].attributes[gpu.migdra.io/profile]`` (no quoting)."""
        return FieldPath(f"{self.text}[{key}]")

    def __str__(self) -> str:
        return self.text


ROOT = FieldPath("")
