"""HEAD on every GET route: the GET's status and headers, and no body.

The request goes on as the GET it stands for; the answer ends as soon as its
headers are sent, so a HEAD on an event stream ends at once too (the route
then hears that its client is gone, and stops).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAsGet:
    """Answers HEAD with what GET would, without the body."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        ended = False

        async def headers_only(message: Message) -> None:
            nonlocal ended
            if ended or message["type"] != "http.response.start":
                return
            ended = True
            await send(message)
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        async def gone_once_answered() -> Message:
            if ended:
                return {"type": "http.disconnect"}
            return await receive()

        await self.app({**scope, "method": "GET"}, gone_once_answered, headers_only)
