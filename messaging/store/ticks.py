"""Group commit: the script calls of one event-loop tick go to the store together.

Concurrent requests of an API process each run a script or two (a rate
check, an admission). Sent one by one, every call pays the client's own
overhead and a round trip; ``TickBatch`` gathers the calls made during one
turn of the event loop and sends them as one pipeline on the next, each
caller awaiting its own reply. The pipeline is not a transaction: each
script is atomic on its own, as it was alone, and the store runs them in the
order they were made. A lone call is sent as it is.

A reply that is an error goes to its own caller only (a full store refusing
one admission refuses that one); a connection that fails fails every caller of
the batch, as it would have failed each of them. A script the server does not
know yet (a restarted store) is loaded and run again for the callers that met it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import redis.asyncio
from redis.exceptions import NoScriptError


@dataclass
class _Call:
    script: Any  # redis-py's AsyncScript
    keys: list[Any]
    args: list[Any]
    reply: asyncio.Future[Any]


class TickBatch:
    """Script calls on one client, sent together once per event-loop tick."""

    def __init__(self, client: Any) -> None:
        self.client = client
        # A cluster pipeline splits by slot into several; its callers are sent one by one.
        self.pipelines = isinstance(client, redis.asyncio.Redis)
        self._calls: list[_Call] = []

    async def run(self, script: Any, keys: list[Any], args: list[Any]) -> Any:
        """The reply of ``script`` run on ``keys`` and ``args``, sent with this tick's others."""
        if not self.pipelines:
            return await script(keys=keys, args=args)
        loop = asyncio.get_running_loop()
        call = _Call(script, keys, args, loop.create_future())
        self._calls.append(call)
        if len(self._calls) == 1:
            # Runs after every callback ready now: the calls they make join this batch.
            loop.call_soon(self._flush)
        return await call.reply

    def _flush(self) -> None:
        calls, self._calls = self._calls, []
        task = asyncio.get_running_loop().create_task(self._send(calls))
        task.add_done_callback(_retrieved)

    async def _send(self, calls: list[_Call]) -> None:
        if len(calls) == 1:
            await self._alone(calls[0])
            return
        pipe = self.client.pipeline(transaction=False)
        for call in calls:
            pipe.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)
        try:
            replies = await pipe.execute(raise_on_error=False)
        except BaseException as exc:  # the connection: every caller meets it
            for call in calls:
                _settle(call, exc=exc)
            if not isinstance(exc, Exception):
                raise
            return
        for call, reply in zip(calls, replies, strict=True):
            if isinstance(reply, NoScriptError):
                await self._alone(call)  # loads the script, then runs it
            elif isinstance(reply, Exception):
                _settle(call, exc=reply)
            else:
                _settle(call, reply=reply)

    async def _alone(self, call: _Call) -> None:
        try:
            reply = await call.script(keys=call.keys, args=call.args)
        except BaseException as exc:
            _settle(call, exc=exc)
            if not isinstance(exc, Exception):
                raise
        else:
            _settle(call, reply=reply)


def _settle(call: _Call, *, reply: Any = None, exc: BaseException | None = None) -> None:
    if call.reply.done():  # its caller was cancelled
        return
    if exc is None:
        call.reply.set_result(reply)
    elif isinstance(exc, asyncio.CancelledError):
        call.reply.cancel()
    else:
        call.reply.set_exception(exc)


def _retrieved(task: asyncio.Task[None]) -> None:
    """Nothing is left unobserved: every failure was handed to the callers."""
    if not task.cancelled():
        task.exception()
