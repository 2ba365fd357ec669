"""Percentiles and ratios."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank) of values sorted ascending; NaN when empty."""
    if not values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(values)))
    return float(values[min(rank, len(values)) - 1])


def latency(values_ms: Sequence[float]) -> dict[str, Any]:
    """p50, p99 and count of latencies (ms), sorted or not."""
    ordered = sorted(values_ms)
    return {"p50_ms": round(percentile(ordered, 50), 3),
            "p99_ms": round(percentile(ordered, 99), 3), "n": len(ordered)}


def ratio(value: float, baseline: float) -> float:
    """value / baseline, NaN when the baseline is 0."""
    return value / baseline if baseline else math.nan
