"""Scale: admission and inbox-page latency with few and with many stored messages; memory.

The first messages are sent through the API and delivered by the worker: the
memory they take is the real path's. The rest are preloaded in bulk (see
``bench.preload``), all into one agent's inbox, the hardest case for its pages.
Figures are taken on one connection, so each is one operation's own cost, with
the worker running, after any AOF rewrite has finished.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from typing import Any

from bench import loadgen
from bench.context import Context
from bench.loadgen import LoadSpec
from bench.population import Population, inbox_request, populate, ring, ring_sends, sends_to
from bench.preload import preload, wait_persisted
from bench.procs import BenchError, Cluster
from bench.stats import latency, ratio
from bench.verify import SEND_FIELDS, Admitted, admitted, check_exactly_once, wait_delivered
from messaging.store import keys

READER = "Reader"
KIB = 1024
SETTLE_S = 0.5


# What used_memory counts that is not stored data: connections' buffers, the AOF buffer.
NOT_DATA = ("mem_clients_normal", "mem_clients_slaves", "mem_aof_buffer",
            "mem_replication_backlog")


def _used_memory(c: Cluster) -> int:
    """Bytes the store's data takes: used_memory less buffers that come and go."""
    with c.redis() as r:
        info = r.info("memory")
    return int(info["used_memory"]) - sum(int(info.get(k, 0)) for k in NOT_DATA)


def _cursors(c: Cluster, pop: Population, count: int, limit: int) -> tuple[int, list[int]]:
    """How many entries the reader's inbox holds, and cursors spread all over it."""
    with c.redis() as r:
        wait_persisted(r)
        inbox_key = keys.inbox(pop.project_id, pop.agent(READER).id)
        stored = r.zcard(inbox_key)
        ranks = random.Random(5).sample(range(max(1, stored - limit)), min(count, stored))
        pipe = r.pipeline(transaction=False)
        for rank in sorted(ranks):
            pipe.zrange(inbox_key, rank, rank, withscores=True)
        return stored, [int(rows[0][1]) - 1 for rows in pipe.execute()]


def _measure(ctx: Context, c: Cluster, url: str, pop: Population,
             sent: list[Admitted]) -> dict[str, Any]:
    """Inbox pages at cursors all over the reader's inbox, then sends among the ring."""
    s = ctx.sizes
    stored, cursors = _cursors(c, pop, s.inbox_cursors, s.inbox_limit)
    reader = pop.agent(READER)
    pages = loadgen.run(LoadSpec(url, [inbox_request(reader, cur, s.inbox_limit)
                                       for cur in cursors],
                                 s.scale_concurrency, s.scale_load_s, s.warmup_s))
    if pages.errors or set(pages.statuses) != {"200"}:
        raise BenchError(f"inbox pages: {pages.statuses}, {pages.errors[:1]}")
    sends = loadgen.run(LoadSpec(url, ring_sends(pop, ring()), s.scale_concurrency,
                                 s.scale_load_s, s.warmup_s, keep=SEND_FIELDS))
    sent += admitted(sends, f"scale ({stored} stored)")
    return {
        "stored": stored,
        "inbox_page": {"per_s": round(pages.per_s, 1), **latency(pages.latencies_ms)},
        "admission": {"per_s": round(sends.per_s, 1), **latency(sends.latencies_ms)},
    }


def _real_path(ctx: Context, c: Cluster, url: str, pop: Population) -> tuple[float, str]:
    """Send the first messages to the reader through API and worker; bytes per message
    and one stored message's JSON (the preload's template)."""
    n = ctx.sizes.memory_sample
    before = _used_memory(c)
    load = loadgen.run(LoadSpec(url, sends_to(pop, READER), ctx.sizes.concurrency,
                                duration_s=0, warmup_s=0, count=n, keep=SEND_FIELDS))
    sent = admitted(load, "scale, real path")
    with c.redis() as r:
        wait_delivered(r, pop.project_id, sent, ctx.sizes.drain_timeout_s, "scale, real path")
        check_exactly_once(r, pop.project_id, sent, "scale, real path",
                           {pop.agent(READER).id: n})
        time.sleep(SETTLE_S)  # the broker's bookkeeping of the last tasks
        template = r.hget(keys.message(pop.project_id, sent[0].message_id), "json")
    if template is None:
        raise BenchError("scale: the first message is not stored")
    return (_used_memory(c) - before) / n, template


def _grow(ctx: Context, c: Cluster, pop: Population, template: str, to: int) -> dict[str, Any]:
    """Preload the reader's inbox up to ``to`` entries; seconds and bytes per message."""
    with c.redis() as r:
        more = to - r.zcard(keys.inbox(pop.project_id, pop.agent(READER).id))
    if more <= 0:
        return {"count": 0, "s": 0.0, "aof_rewrite_s": 0.0, "bytes_per_message": None}
    ctx.say(f"scale: preloading {more:,} messages")
    before, start = _used_memory(c), time.monotonic()
    preload(c.store.url, pop.project_id, pop.agents[0], pop.agent(READER), template, more)
    elapsed_s = time.monotonic() - start
    with c.redis() as r:
        aof_s = wait_persisted(r)
    ctx.say(f"scale: preloaded in {elapsed_s:.0f} s (and {aof_s:.0f} s of AOF rewrite)")
    return {"count": more, "s": round(elapsed_s, 1), "aof_rewrite_s": round(aof_s, 1),
            "bytes_per_message": round((_used_memory(c) - before) / max(more, 1))}


def run(ctx: Context) -> dict[str, Any]:
    """Few stored messages, measure; preload up to many, measure; check every send."""
    s = ctx.sizes
    with ctx.cluster("scale") as c:
        url = c.start_api_and_worker()
        pop = populate(url, c.operator_token, [*ring(), READER])
        ctx.say(f"scale: {s.memory_sample} messages through the API and the worker")
        real_bytes, template = _real_path(ctx, c, url, pop)
        _grow(ctx, c, pop, template, s.scale_small)
        sent: list[Admitted] = []
        small = _measure(ctx, c, url, pop, sent)
        grown = _grow(ctx, c, pop, template, s.scale_large)
        large = _measure(ctx, c, url, pop, sent)

        with c.redis() as r:
            wait_delivered(r, pop.project_id, sent, s.drain_timeout_s, "scale")
            inboxes = Counter(aid for m in sent for _, aid in m.deliveries)
            check_exactly_once(r, pop.project_id, sent, "scale", dict(inboxes))
            held = r.zcard(keys.inbox(pop.project_id, pop.agent(READER).id))
        if held != s.scale_large:
            raise BenchError(f"scale: the reader's inbox holds {held}, not {s.scale_large}")
    return {
        "concurrency": s.scale_concurrency,
        "small": small,
        "large": large,
        "preload": grown,
        "memory": {
            "body_bytes": KIB,
            "real_path_bytes_per_message": round(real_bytes),
            "preload_bytes_per_message": grown["bytes_per_message"],
        },
        "ratios": {
            f"{what}_{p}": round(ratio(large[what][p], small[what][p]), 3)
            for what in ("admission", "inbox_page") for p in ("p50_ms", "p99_ms")
        },
    }
