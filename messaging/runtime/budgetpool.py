"""A few child processes that run one function on text, each call with a time budget.

A thread cannot be stopped, so work whose cost an untrusted input sets (a
Markdown parser fed a crafted body) runs in a child process instead: a call
that outlives its budget gets ``None`` and its process is killed and replaced.
The children run at a lower priority than the API, so the CPU they burn is
what the API leaves. Calls wait their turn in one queue; a queue already
``max_waiting`` long refuses more at once, so waiting work holds bounded
memory.

The children are forked from a fork server that imported the function's
module once, so a replacement is ready in milliseconds. A child whose parent
died sees its pipe close and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

# The children's niceness: the lowest priority, so they get only the CPU nothing else wants.
CHILD_NICENESS = 19  # os.nice adds it to the parent's, up to 19
STOP_TIMEOUT_S = 2.0

Work = Callable[[str], str]


class PoolBusy(RuntimeError):
    """The pool takes no more work now: not started, stopped, or its queue is full."""


def _serve(conn: Connection, work: Work) -> None:
    """A child's loop: text in, ``work(text)`` out (``None`` if it raised), until EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is for the parent
    with contextlib.suppress(OSError):
        os.nice(CHILD_NICENESS)
    with contextlib.suppress(OSError, AttributeError):  # Linux only
        # Idle scheduling: any runnable task of normal priority takes the core at once.
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    while True:
        try:
            text = conn.recv()
        except (EOFError, OSError):
            return
        try:
            result: str | None = work(text)
        except Exception:  # noqa: BLE001 - a bad input is the caller's None, not our crash
            result = None
        conn.send(result)


class _Child:
    """One child process and our end of its pipe."""

    def __init__(self, ctx: multiprocessing.context.ForkServerContext, work: Work) -> None:
        self.conn, theirs = ctx.Pipe()
        self.proc: BaseProcess = ctx.Process(target=_serve, args=(theirs, work), daemon=True)
        self.proc.start()
        theirs.close()

    def call(self, text: str, budget_s: float) -> tuple[bool, str | None]:
        """(finished in time, its result); blocks up to ``budget_s`` once the text is sent."""
        try:
            self.conn.send(text)
            if not self.conn.poll(budget_s):
                return False, None
            result: str | None = self.conn.recv()
            return True, result
        except (EOFError, OSError):
            return False, None

    def kill(self) -> None:
        """Stop the child now and wait for it."""
        self.conn.close()
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(STOP_TIMEOUT_S)


class BudgetPool:
    """``processes`` children running ``work``, each call cut off at ``budget_s``."""

    def __init__(self, work: Work, processes: int, budget_s: float, max_waiting: int) -> None:
        self.work, self.processes, self.budget_s = work, processes, budget_s
        self.max_waiting = max_waiting
        self.killed = 0  # calls cut off by the budget, since start
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload([work.__module__])
        self._queue: asyncio.Queue[tuple[str, asyncio.Future[str | None]]] = asyncio.Queue()
        self._slots: list[asyncio.Task[None]] = []
        # Each child's calls block a thread of their own while they run.
        self._threads = ThreadPoolExecutor(processes, thread_name_prefix="budgetpool")

    async def start(self) -> None:
        """Start the children (returns once the first is ready)."""
        loop = asyncio.get_running_loop()
        children = await asyncio.gather(*(loop.run_in_executor(self._threads, self._spawn)
                                          for _ in range(self.processes)))
        self._slots = [asyncio.create_task(self._slot(child)) for child in children]

    async def stop(self) -> None:
        """Stop the children; calls still waiting get ``None``."""
        for task in self._slots:
            task.cancel()
        await asyncio.gather(*self._slots, return_exceptions=True)
        self._slots = []
        while not self._queue.empty():
            _, future = self._queue.get_nowait()
            if not future.done():
                future.set_result(None)
        self._threads.shutdown(wait=False, cancel_futures=True)

    async def run(self, text: str) -> str | None:
        """``work(text)``, or ``None`` when it ran out of budget or raised.

        Raises:
            PoolBusy: not started, or ``max_waiting`` calls wait already.
        """
        if not self._slots or self._queue.qsize() >= self.max_waiting:
            raise PoolBusy("no room for more work")
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((text, future))
        return await future

    def _spawn(self) -> _Child:
        return _Child(self._ctx, self.work)

    async def _slot(self, child: _Child) -> None:
        """Feed one child calls from the queue, replacing it when a call runs out of budget."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[str | None] | None = None
        try:
            while True:
                text, future = await self._queue.get()
                finished, result = await loop.run_in_executor(
                    self._threads, child.call, text, self.budget_s)
                if not future.done():
                    future.set_result(result)
                if not finished:
                    self.killed += 1
                    await loop.run_in_executor(self._threads, child.kill)
                    child = await loop.run_in_executor(self._threads, self._spawn)
        finally:
            if future is not None and not future.done():
                future.set_result(None)  # stopped mid-call: its caller is not left waiting
            child.kill()
