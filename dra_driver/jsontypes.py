"""The JSON type aliases, defined once: API objects travel as decoded JSON between the client, the
allocator port, the controller and the tools, and one name for them keeps their signatures comparable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

JSON = Mapping[str, Any]
"""A JSON object as read (an API object, decoded): read, never changed in place."""

MutableJSON = dict[str, Any]
"""A JSON object being built or edited (a request body, a copy being rewritten)."""
