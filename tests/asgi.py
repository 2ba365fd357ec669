"""ASGI stand-ins for tests that run one of Courier's layers in process."""

from __future__ import annotations

from typing import Any


class StandIn:
    """An app that records each request that reaches it (its scope and whole body) and
    answers ``299`` with ``answer``."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.reached: list[tuple[dict[str, Any], bytes]] = []

    @property
    def bodies(self) -> list[bytes]:
        """The body of each request that reached it."""
        return [body for _, body in self.reached]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.reached.append((scope, body))
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": self.answer})
