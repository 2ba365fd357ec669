"""End to end: send to inbox-visible latency at a fixed rate, against a no-op round trip.

The baseline is the least any such path costs with this framework and these
Celery settings: a trivial endpoint that publishes one no-op task, the task
recording when it ran. Latencies count from each request's scheduled time
(open loop), to the delivery's ``provider_result_recorded`` time (when the
inbox shows it) or the no-op task's run; all clocks are this machine's.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from bench import loadgen, noop_app
from bench.context import Context
from bench.loadgen import LoadResult, LoadSpec, Request
from bench.population import populate, ring, ring_sends
from bench.procs import NOOP_APP, TRIVIAL_APP, BenchError, Cluster, wait_http, wait_worker
from bench.profile import profiled
from bench.stats import latency, ratio
from bench.verify import SEND_FIELDS, admitted, check_exactly_once, wait_delivered

POLL_S = 0.1


def _measured(load: LoadResult, warmup_s: float) -> int:
    """The first scheduled time (us) of the measured phase."""
    return int(min(a[0] for a in load.answers)) + int(warmup_s * 1e6)


def _spec(url: str, requests: list[Request], ctx: Context, keep: list[str]) -> LoadSpec:
    s = ctx.sizes
    return LoadSpec(url, requests, s.concurrency, s.e2e_s, s.warmup_s,
                    rate_per_s=s.e2e_rate_per_s, keep=keep)


def _baseline(ctx: Context, c: Cluster, url: str, requests: list[Request]) -> dict[str, Any]:
    publish = [Request("POST", "/publish", r.headers, r.body) for r in requests]
    load = loadgen.run(_spec(url, publish, ctx, ["id"]))
    if load.errors or set(load.statuses) != {"201"}:
        raise BenchError(f"trivial publish: {load.statuses}, {load.errors[:1]}")
    with c.redis() as r:
        deadline = time.monotonic() + ctx.sizes.drain_timeout_s
        while r.hlen(noop_app.STAMPS_KEY) < len(load.answers):
            if time.monotonic() > deadline:
                raise BenchError("no-op tasks of the end-to-end baseline did not all run")
            time.sleep(POLL_S)
        ran = r.hgetall(noop_app.STAMPS_KEY)
    start = _measured(load, ctx.sizes.warmup_s)
    lat = [(int(ran[k["id"]]) - t) / 1000 for t, _, k in load.answers if t >= start]
    return {**latency(lat), "http": latency(load.latencies_ms)}


def run(ctx: Context) -> dict[str, Any]:
    """The no-op round trip first, then Courier's send to inbox, at the same rate."""
    s = ctx.sizes
    with ctx.cluster("end_to_end") as c:
        # Both pairs run all along; each idles while the other is measured.
        api, url = c.start_http(wait=False)
        trivial, turl = c.start_http(TRIVIAL_APP, wait=False)
        workers = [c.start_worker(wait=False),
                   c.start_worker(NOOP_APP, noop_app.NOOP_QUEUE, wait=False)]
        for proc, u in ((api, url), (trivial, turl)):
            wait_http(proc, u)
        for worker in workers:
            wait_worker(worker)
        pop = populate(url, c.operator_token, ring())
        requests = ring_sends(pop)
        ctx.say(f"end to end: no-op baseline at {s.e2e_rate_per_s:g}/s for {s.e2e_s:g} s")
        base = _baseline(ctx, c, turl, requests)

        ctx.say(f"end to end: Courier at {s.e2e_rate_per_s:g}/s for {s.e2e_s:g} s")
        with profiled(workers[0], ctx.profile_dir, "end_to_end-worker"), \
                profiled(api, ctx.profile_dir, "end_to_end-api"):
            load = loadgen.run(_spec(url, requests, ctx, SEND_FIELDS))
        sent = admitted(load, "end to end")
        with c.redis() as r:
            wait_delivered(r, pop.project_id, sent, s.drain_timeout_s, "end to end")
            inboxes = Counter(aid for m in sent for _, aid in m.deliveries)
            times = check_exactly_once(r, pop.project_id, sent, "end to end", dict(inboxes))
    start = _measured(load, s.warmup_s)
    measured = [(m, times[did]) for m in sent if m.sent_us >= start for did, _ in m.deliveries]
    e2e = [(int(t["provider_result_recorded_us"]) - m.sent_us) / 1000 for m, t in measured]
    stages = [(int(t["provider_result_recorded_us"]) - int(t["admitted_us"])) / 1000
              for _, t in measured]
    courier = {**latency(e2e), "admitted_to_inbox": latency(stages),
               "http": latency(load.latencies_ms)}
    return {
        "rate_per_s": s.e2e_rate_per_s,
        "duration_s": s.e2e_s,
        "baseline": base,
        "courier": courier,
        "p50_ratio": round(ratio(courier["p50_ms"], base["p50_ms"]), 3),
        "p99_ratio": round(ratio(courier["p99_ms"], base["p99_ms"]), 3),
        "sent": len(sent),
    }
