"""Delivery: draining a backlog of inbox deliveries, against as many no-op Celery tasks."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from bench import loadgen, noop_app
from bench.context import Context
from bench.loadgen import LoadSpec
from bench.population import populate, ring, ring_sends
from bench.procs import NOOP_APP, BenchError
from bench.profile import profiled
from bench.stats import ratio
from bench.verify import (
    SEND_FIELDS,
    admitted,
    check_exactly_once,
    inbox_total,
    wait_delivered,
)
from messaging.runtime.celeryconf import queue_for

POLL_S = 0.01


def drain_rate(progress: Callable[[], int], total: int, timeout_s: float,
               what: str) -> dict[str, Any]:
    """Poll ``progress`` until it reaches ``total``; the rate from the first progress seen.

    Worker start-up is left out: the clock starts when the first task has finished.

    Raises:
        BenchError: not drained within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    first: tuple[float, int] | None = None
    while True:
        done, now = progress(), time.perf_counter()
        if first is None and done > 0:
            first = (now, done)
        if done >= total:
            break
        if time.monotonic() > deadline:
            raise BenchError(f"{what}: {done} of {total} done after {timeout_s:g} s")
        time.sleep(POLL_S)
    start, before = first or (now, 0)
    elapsed = now - start
    per_s = (total - before) / elapsed if elapsed > 0 else float("nan")
    return {"per_s": round(per_s, 1), "n": total, "elapsed_s": round(elapsed, 3)}


def run(ctx: Context) -> dict[str, Any]:
    """No-op tasks first, then Courier's backlog, each drained by a freshly started worker."""
    n = ctx.sizes.backlog
    with ctx.cluster("delivery") as c, c.redis() as r:
        ctx.say(f"delivery: publishing {n} no-op tasks")
        celery = noop_app.publisher(c.settings())
        for _ in range(n):
            celery.send_task(noop_app.NOOP_TASK, queue=noop_app.NOOP_QUEUE)
        celery.close()
        worker = c.start_worker(NOOP_APP, noop_app.NOOP_QUEUE, wait=False)
        noop = drain_rate(lambda: int(r.get(noop_app.DONE_KEY) or 0), n,
                          ctx.sizes.drain_timeout_s, "no-op tasks")
        c.stop(worker)

        ctx.say(f"delivery: admitting {n} messages with no worker running")
        _, url = c.start_http()
        pop = populate(url, c.operator_token, ring())
        load = loadgen.run(LoadSpec(url, ring_sends(pop), ctx.sizes.concurrency, duration_s=0,
                                    warmup_s=0, count=n, keep=SEND_FIELDS))
        sent = admitted(load, "delivery backlog")
        items = [did for m in sent for did, _ in m.deliveries]
        tasks = int(r.llen(queue_for("inbox")))  # the tickets the API published for them

        ctx.say(f"delivery: draining {len(items)} deliveries in {tasks} tasks")
        worker = c.start_worker(wait=False)
        agent_ids = [a.id for a in pop.agents]
        with profiled(worker, ctx.profile_dir, "delivery-worker"):
            courier = drain_rate(lambda: inbox_total(r, pop.project_id, agent_ids), len(items),
                                 ctx.sizes.drain_timeout_s, "Courier deliveries")
        # The inbox shows a message before its outcome is recorded (the next call).
        wait_delivered(r, pop.project_id, sent, ctx.sizes.drain_timeout_s, "delivery")
        inboxes = Counter(aid for m in sent for _, aid in m.deliveries)
        check_exactly_once(r, pop.project_id, sent, "delivery", dict(inboxes))
    return {
        "backlog": n,
        "noop": noop,
        "courier": {**courier, "tasks": tasks},
        "ratio": round(ratio(courier["per_s"], noop["per_s"]), 3),
    }
