"""Aliases shared across Courier's packages."""

from __future__ import annotations

from typing import Any

# A JSON object as Courier reads and writes it: records, views, request bodies.
Json = dict[str, Any]
