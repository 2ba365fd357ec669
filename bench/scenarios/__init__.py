"""The scenarios, in the order they run; each returns a JSON-able dict of its figures."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.context import Context
from bench.scenarios import (
    admission,
    channel,
    delivery,
    durability,
    end_to_end,
    fairness,
    mcp,
    rendering,
    scale,
    search,
    stack,
    streams,
)

Scenario = Callable[[Context], dict[str, Any]]

SCENARIOS: dict[str, Scenario] = {
    "admission": admission.run,
    "stack": stack.run,
    "delivery": delivery.run,
    "end_to_end": end_to_end.run,
    "mcp": mcp.run,
    "scale": scale.run,
    "search": search.run,
    "fairness": fairness.run,
    "streams": streams.run,
    "rendering": rendering.run,
    "durability": durability.run,
    "channel": channel.run,
}
