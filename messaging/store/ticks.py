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
caller gets its reply: the batch's pipeline ends with the level's waits
(``WAITAOF``, and ``WAIT`` at ``replica``) on the same connection, which every
durable call of the batch shares; a wait that falls short, or a connection that
fails under it, raises ``NotDurable`` to those calls (their scripts may have
run). This is group commit: one wait per tick, whatever the number of sends in
it, and since each tick's pipeline goes out on a connection of its own while
the waits of earlier ticks are still under way, the waits of concurrent ticks
overlap.

On a Redis Cluster a wait confirms the writes of its own connection on its own
node, so the durable calls of a tick are grouped by the node that serves their
keys' slot (a call's keys share its project's hash tag), and each node's go as
one pipeline on one connection of that node, with that node's wait at its end.
They are sent to the node itself, not through the cluster client's pipeline,
which on a redirect or a failed connection sends a call again elsewhere,
behind the wait's back. A redirect (the slot moved in a failover: the script
did not run) fails its call as the store unavailable; in both cases the cluster
client is left to find the slot's node again by its own handling of one read
routed to it, and the caller's retry with its idempotency key goes there. The
other calls on a cluster go one by one through the client, which follows
redirects itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio
from redis.asyncio.cluster import PipelineCommand
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.exceptions import (
    AskError,
    ClusterError,
    NoScriptError,
    RedisClusterException,
    RedisError,
    ResponseError,
)

from messaging.store.durability import Durability, NotDurable

# Runs one command on the store and returns its reply.
Execute = Callable[..., Awaitable[Any]]


@dataclass
class _Call:
    script: Any  # redis-py's AsyncScript
    keys: list[Any]
    args: list[Any]
    reply: asyncio.Future[Any]
    durable: bool = False
    reloaded: bool = False  # its script was loaded once for it already


class TickBatch:
    """Script calls on one client, sent together once per event-loop tick."""

    def __init__(self, client: Any, durability: Durability | None = None) -> None:
        self.client = client
        self.durability = durability or Durability()
        # One server's calls share a pipeline; a cluster's durable ones, one per node.
        self.pipelines = isinstance(client, redis.asyncio.Redis)
        self.cluster = isinstance(client, AsyncRedisCluster)
        self._calls: list[_Call] = []
        # Reads that have the cluster client find a key's node again, by key.
        self._finding: dict[str, asyncio.Task[None]] = {}

    async def run(self, script: Any, keys: list[Any], args: list[Any],
                  durable: bool = False) -> Any:
        """The reply of ``script`` run on ``keys`` and ``args``, sent with this tick's
        others; with ``durable``, once the store confirms it at its durability level.

        Raises:
            NotDurable: a durable call the store did not confirm within the wait.
        """
        durable = durable and self.durability.waits
        if not self.pipelines and not (durable and self.cluster):
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
        if self.cluster:
            await self._send_by_node(calls)
            return
        waits = any(call.durable for call in calls)
        if len(calls) == 1 and not waits:
            await self._alone(calls[0])
            return
        pipe = self.client.pipeline(transaction=False)
        wait = self.durability.commands() if waits else []
        try:
            for call in calls:
                pipe.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)
            for command in wait:
                pipe.execute_command(*command)
            replies = await pipe.execute(raise_on_error=False)
        except BaseException as exc:  # the connection: every caller meets it
            self._fail(calls, exc)
            return
        await self._answer(calls, replies[:len(calls)], replies[len(calls):],
                           self.client.script_load)

    async def _send_by_node(self, calls: list[_Call]) -> None:
        """Each node's calls on one connection of that node, with its wait."""
        try:
            await self.client.initialize()  # runs a refresh the client asked for, once due
        except BaseException as exc:
            self._fail(calls, exc)
            return
        groups: dict[str, tuple[Any, list[_Call]]] = {}
        for call in calls:
            try:
                node = self.client.get_node_from_key(call.keys[0])
            except RedisClusterException as exc:  # a slot no node serves now
                _settle(call, exc=exc)
                continue
            groups.setdefault(node.name, (node, []))[1].append(call)
        await asyncio.gather(*(self._send_to(node, group) for node, group in groups.values()))

    async def _send_to(self, node: Any, calls: list[_Call]) -> None:
        """``calls`` as one pipeline on one connection of the cluster node ``node``,
        the wait at its end."""
        commands = [PipelineCommand(i, "EVALSHA", call.script.sha, len(call.keys),
                                    *call.keys, *call.args) for i, call in enumerate(calls)]
        commands += [PipelineCommand(len(commands) + i, *command)
                     for i, command in enumerate(self.durability.commands())]
        try:
            await node.execute_pipeline(commands)
        except BaseException as exc:  # the node's connection: every caller meets it
            self._find_again(calls[0].keys[0])
            self._fail(calls, exc)
            return
        replies = [command.result for command in commands]
        await self._answer(calls, replies[:len(calls)], replies[len(calls):],
                           functools.partial(node.execute_command, "SCRIPT", "LOAD"))

    async def _answer(self, calls: list[_Call], replies: list[Any], waited: list[Any],
                      load: Execute) -> None:
        unknown = []  # calls whose script the server did not know
        for call, reply in zip(calls, replies, strict=True):
            if isinstance(reply, NoScriptError) and not call.reloaded:
                unknown.append(call)
            elif isinstance(reply, Exception):
                _settle(call, exc=self._refusal(call, reply))
            elif call.durable:
                self._confirmed(call, reply, waited)
            else:
                _settle(call, reply=reply)
        if unknown:
            await self._reload(unknown, load)

    def _refusal(self, call: _Call, reply: Exception) -> BaseException:
        """What the caller of ``call`` meets for its error reply ``reply``."""
        if isinstance(reply, AskError):  # MOVED or ASK: the script did not run there
            self._find_again(call.keys[0])
            return ClusterError(f"the store node no longer serves this project's slot "
                                f"({reply}): nothing was run")
        if isinstance(reply, RedisError) and not isinstance(reply, ResponseError):
            self._find_again(call.keys[0])  # the connection failed after the send
            return self._unsure(call, reply)
        return reply

    def _unsure(self, call: _Call, exc: BaseException) -> BaseException:
        """``exc`` as the caller of ``call`` meets it once its script may have run: a
        durable call as NotDurable (the store may hold its write, unconfirmed)."""
        if call.durable and isinstance(exc, RedisError):
            return NotDurable(self.durability.level, f"the store failed under the write: {exc}")
        return exc

    def _fail(self, calls: list[_Call], exc: BaseException) -> None:
        """Fail every call of a batch whose connection failed; a cancellation goes on."""
        for call in calls:
            _settle(call, exc=self._unsure(call, exc))
        if not isinstance(exc, Exception):
            raise exc

    def _confirmed(self, call: _Call, reply: Any, waited: list[Any]) -> None:
        """Settle a durable call by what the batch's waits answered."""
        try:
            self.durability.check(waited)
        except NotDurable as exc:
            _settle(call, exc=exc)
        else:
            _settle(call, reply=reply)

    async def _reload(self, calls: list[_Call], load: Execute) -> None:
        """Calls whose script the server did not know: each script loaded once, then
        the calls sent again together."""
        for call in calls:
            call.reloaded = True
        try:
            for text in {call.script.script for call in calls}:
                await load(text)
        except BaseException as exc:
            self._fail(calls, exc)
            return
        await self._send(calls)

    async def _alone(self, call: _Call) -> None:
        try:
            reply = await call.script(keys=call.keys, args=call.args)
        except BaseException as exc:
            self._fail([call], exc)
        else:
            _settle(call, reply=reply)

    def _find_again(self, key: str) -> None:
        """Have the cluster client find the node of ``key``'s slot again, in the
        background: a read of the key routed as any command makes it follow a
        redirect, or refresh its map of the slots after a node failed."""
        if not self.cluster or key in self._finding:
            return
        self._finding[key] = asyncio.get_running_loop().create_task(self._routed_read(key))

    async def _routed_read(self, key: str) -> None:
        try:
            with contextlib.suppress(RedisError):  # its callers were answered already
                await self.client.exists(key)
        finally:
            self._finding.pop(key, None)


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
