"""Search: query latency with few and with many stored messages, and admission beside it.

The reader first gets ``NEEDLES`` messages through the API and the worker, each
with the word "needle" (so the worker's own indexing runs). The rest are
preloaded in bulk (``bench.preload`` with a vocabulary: each body is four words
of forty, indexed by the worker's indexing function). At the small and
the large point, each query is asked for its first page of 50 again and again
on one keep-alive connection (an httpx client in the harness, the same at both
points), so each figure is one query's own cost.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from bench import loadgen
from bench.context import Context
from bench.loadgen import LoadSpec, Request
from bench.population import Agent, Population, populate, ring, ring_sends
from bench.preload import preload, wait_persisted
from bench.procs import BenchError, Cluster
from bench.stats import latency, ratio
from bench.verify import SEND_FIELDS, Admitted, admitted, check_exactly_once, wait_delivered
from messaging.store import keys

READER = "Reader"
WRITER = "Agent0"
NEEDLES = 200
# Forty words, four per body: each word is in a tenth of the preloaded messages,
# so even the small point fills a page for one common word.
VOCABULARY = tuple(f"term{i}" for i in range(40))
PAGE = 50
INDEX_POLL_S = 0.05
# name -> query string; "two common words" finds few and scans many (no target).
QUERIES: dict[str, dict[str, str]] = {
    "word": {"q": "needle"},
    "prefix": {"q": "needl*"},
    "word + sender": {"q": "needle", "from": WRITER},
    "common word": {"q": "term7"},
    "no words (newest)": {"q": ""},
    "two common words": {"q": "term7 term8"},
}


def _needles(ctx: Context, c: Cluster, url: str, pop: Population) -> str:
    """Send the needles through API and worker; one stored message's JSON."""
    writer = pop.agent(WRITER)
    body = {"to": [READER], "subject": "Status", "body_md": "the needle is here"}
    request = Request("POST", "/v1/messages", {"Authorization": f"Bearer {writer.token}",
                                               "Content-Type": "application/json"},
                      json.dumps(body))
    load = loadgen.run(LoadSpec(url, [request], ctx.sizes.concurrency, duration_s=0,
                                warmup_s=0, count=NEEDLES, keep=SEND_FIELDS))
    sent = admitted(load, "search, real path")
    reader = pop.agent(READER).id
    with c.redis() as r:
        wait_delivered(r, pop.project_id, sent, ctx.sizes.drain_timeout_s, "search, real path")
        check_exactly_once(r, pop.project_id, sent, "search, real path", {reader: NEEDLES})
        posting = keys.search_postings(pop.project_id, "needle")
        for _ in range(600):
            if r.zcard(posting) == NEEDLES:
                break
            time.sleep(INDEX_POLL_S)
        else:
            raise BenchError(f"search: {r.zcard(posting)} of {NEEDLES} needles indexed")
        template = r.hget(keys.message(pop.project_id, sent[0].message_id), "json")
    if template is None:
        raise BenchError("search: the first message is not stored")
    return template


def _grow(ctx: Context, c: Cluster, pop: Population, template: str, to: int) -> int:
    """Preload the reader's mail up to ``to`` messages; how many the project indexes."""
    with c.redis() as r:
        more = to - r.zcard(keys.inbox(pop.project_id, pop.agent(READER).id))
    if more > 0:
        ctx.say(f"search: preloading {more:,} indexed messages")
        preload(c.store.url, pop.project_id, pop.agent(WRITER), pop.agent(READER), template,
                more, VOCABULARY)
    with c.redis() as r:
        wait_persisted(r)
        return int(r.zcard(keys.search_postings(pop.project_id, "*")))


def _queries(url: str, reader: Agent, seconds: float, warmup_s: float) -> dict[str, Any]:
    """Each query asked again and again on one keep-alive connection: its latency."""
    out: dict[str, Any] = {}
    headers = {"Authorization": f"Bearer {reader.token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
        for name, params in QUERIES.items():
            query = {**params, "limit": str(PAGE)}
            took_ms: list[float] = []
            start = time.monotonic()
            while time.monotonic() - start < warmup_s + seconds:
                t0 = time.perf_counter()
                response = http.get("/v1/agents/me/search", params=query)
                if response.status_code != 200:
                    raise BenchError(f"search {name}: {response.status_code} {response.text}")
                if time.monotonic() - start >= warmup_s:
                    took_ms.append((time.perf_counter() - t0) * 1000)
            out[name] = {"per_s": round(len(took_ms) / seconds, 1), **latency(took_ms)}
    return out


def _measure(ctx: Context, url: str, pop: Population, sent: list[Admitted],
             indexed: int) -> dict[str, Any]:
    s = ctx.sizes
    out: dict[str, Any] = {"indexed": indexed,
                           **_queries(url, pop.agent(READER), s.search_query_s, s.warmup_s)}
    sends = loadgen.run(LoadSpec(url, ring_sends(pop, ring()), s.scale_concurrency,
                                 s.scale_load_s, s.warmup_s, keep=SEND_FIELDS))
    sent += admitted(sends, f"search ({indexed} indexed)")
    out["admission"] = {"per_s": round(sends.per_s, 1), **latency(sends.latencies_ms)}
    return out


def run(ctx: Context) -> dict[str, Any]:
    """Needles through the real path, measure small, preload to large, measure, check."""
    s = ctx.sizes
    with ctx.cluster("search") as c:
        url = c.start_api_and_worker()
        pop = populate(url, c.operator_token, [*ring(), READER])
        template = _needles(ctx, c, url, pop)
        sent: list[Admitted] = []
        small = _measure(ctx, url, pop, sent, _grow(ctx, c, pop, template, s.scale_small))
        large = _measure(ctx, url, pop, sent, _grow(ctx, c, pop, template, s.search_large))
        with c.redis() as r:
            wait_delivered(r, pop.project_id, sent, s.drain_timeout_s, "search")
            check_exactly_once(r, pop.project_id, sent, "search")
    return {
        "concurrency": s.scale_concurrency,
        "page": PAGE,
        "small": small,
        "large": large,
        "ratios": {f"{what}_{p}": round(ratio(large[what][p], small[what][p]), 3)
                   for what in [*QUERIES, "admission"] for p in ("p50_ms", "p99_ms")},
    }
