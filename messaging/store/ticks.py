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

A call made ``durable`` is confirmed at the store's durability level before its
caller gets its reply: the batch's pipeline ends with one ``WAITAOF`` (or
``WAIT``) on the same connection, which every durable call of the batch
shares; a wait that falls short raises ``NotDurable`` to those calls.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import redis.asyncio
from redis.exceptions import NoScriptError, ResponseError

from messaging.config import Level
from messaging.store.durability import Durability, NotDurable, lacks_waitaof


@dataclass
class _Call:
    script: Any  # redis-py's AsyncScript
    keys: list[Any]
    args: list[Any]
    reply: asyncio.Future[Any]
    durable: bool = False


class TickBatch:
    """Script calls on one client, sent together once per event-loop tick."""

    def __init__(self, client: Any, durability: Durability | None = None) -> None:
        self.client = client
        self.durability = durability or Durability()
        # A cluster pipeline splits by slot into several; its callers are sent one by one.
        self.pipelines = isinstance(client, redis.asyncio.Redis)
        self._calls: list[_Call] = []
        self._wait: tuple[Any, ...] | None = None  # the wait command, once known

    async def run(self, script: Any, keys: list[Any], args: list[Any],
                  durable: bool = False) -> Any:
        """The reply of ``script`` run on ``keys`` and ``args``, sent with this tick's
        others; with ``durable``, once the store confirms it at its durability level.

        Raises:
            NotDurable: a durable call the store did not confirm within the wait.
        """
        durable = durable and self.durability.waits
        if durable and not self.pipelines:
            raise NotDurable(self.durability.level, "durability waits need a single store "
                             "server (one primary with replicas), not a cluster")
        if not self.pipelines:
            return await script(keys=keys, args=args)
        loop = asyncio.get_running_loop()
        call = _Call(script, keys, args, loop.create_future(), durable)
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
        waits = any(call.durable for call in calls)
        if len(calls) == 1 and not waits:
            await self._alone(calls[0])
            return
        wait: tuple[Any, ...] | None = await self._wait_command() if waits else None
        pipe = self.client.pipeline(transaction=False)
        for call in calls:
            pipe.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)
        if wait is not None:
            pipe.execute_command(*wait)
        try:
            replies = await pipe.execute(raise_on_error=False)
        except BaseException as exc:  # the connection: every caller meets it
            for call in calls:
                _settle(call, exc=exc)
            if not isinstance(exc, Exception):
                raise
            return
        waited = replies.pop() if wait is not None else None
        await self._answer(calls, replies, wait, waited)

    async def _answer(self, calls: list[_Call], replies: list[Any],
                      wait: tuple[Any, ...] | None, waited: Any) -> None:
        for call, reply in zip(calls, replies, strict=True):
            if isinstance(reply, NoScriptError):
                await self._reload(call)  # loads the script, then runs it
            elif isinstance(reply, Exception):
                _settle(call, exc=reply)
            elif call.durable:
                self._confirmed(call, reply, wait, waited)
            else:
                _settle(call, reply=reply)

    def _confirmed(self, call: _Call, reply: Any, wait: tuple[Any, ...] | None,
                   waited: Any) -> None:
        """Settle a durable call by what the batch's wait answered."""
        try:
            if wait is None:
                raise NotDurable(self.durability.level, "the store has no WAITAOF "
                                 "(Redis or Valkey 7.2 and later): the level cannot be kept")
            if wait[0] == "WAIT":
                self.durability.check_wait(waited)
            else:
                self.durability.check(waited)
        except NotDurable as exc:
            _settle(call, exc=exc)
        else:
            _settle(call, reply=reply)

    async def _wait_command(self) -> tuple[Any, ...] | None:
        """WAITAOF, or WAIT on a server without it where replicas are all the level
        needs; None when the level cannot be kept. Asked of the server once."""
        if self._wait is None:
            try:
                await self.client.execute_command("WAITAOF", 0, 0, 0)
                self._wait = self.durability.command()
            except ResponseError as e:
                if not lacks_waitaof(e):
                    raise
                self._wait = (("WAIT", self.durability.needed_replicas,
                               self.durability.timeout_ms)
                              if self.durability.level is Level.REPLICA else ())
        return self._wait or None

    async def _reload(self, call: _Call) -> None:
        """A call whose script the server did not know: loaded, then run again."""
        if not call.durable:
            await self._alone(call)
            return
        try:
            await self.client.script_load(call.script.script)
        except BaseException as exc:
            _settle(call, exc=exc)
            if not isinstance(exc, Exception):
                raise
            return
        await self._send([call])

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
