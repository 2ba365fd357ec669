"""The wire shape of a ``tools/call`` result, as both of Courier's MCP faces send it
(``/mcp`` and ``courier mcp``): the body as compact JSON text and as structured
content, and whether it is a tool error (an error object of the API's shape)."""

from __future__ import annotations

import orjson

from messaging.types import Json


def tool_result(body: Json, *, error: bool = False) -> Json:
    """A ``tools/call`` result carrying ``body``."""
    return {"content": [{"type": "text", "text": orjson.dumps(body).decode()}],
            "structuredContent": body, "isError": error, "resultType": "complete"}
