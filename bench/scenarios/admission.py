"""Admission: sends/s and latency at fixed concurrency, against a trivial endpoint."""

from __future__ import annotations

from collections import Counter
from typing import Any

from bench import loadgen
from bench.context import Context
from bench.loadgen import LoadSpec
from bench.population import populate, ring, ring_sends
from bench.procs import (
    TRIVIAL_APP,
    BenchError,
    commands_per_send,
    store_commands,
    tree_cpu_s,
)
from bench.profile import profiled
from bench.stats import latency, ratio
from bench.verify import SEND_FIELDS, admitted, check_exactly_once, wait_delivered


def run(ctx: Context) -> dict[str, Any]:
    """The trivial endpoint, then Courier's API, with the same requests and connections."""
    s = ctx.sizes
    with ctx.cluster("admission") as c:
        # The API idles (its publisher thread wakes twice a second) while the trivial app runs.
        api, url = c.start_http()
        pop = populate(url, c.operator_token, ring())
        requests = ring_sends(pop)

        ctx.say(f"admission: trivial endpoint, {s.concurrency} connections, {s.admission_s:g} s")
        trivial, turl = c.start_http(TRIVIAL_APP)
        with c.redis() as r:
            store_pid = int(r.info("server")["process_id"])
        cpu_s = tree_cpu_s(trivial.pid)
        base = loadgen.run(LoadSpec(turl, requests, s.concurrency, s.admission_s, s.warmup_s))
        base_cpu_ms = 1000 * (tree_cpu_s(trivial.pid) - cpu_s) / base.sent
        c.stop(trivial)
        if base.errors or set(base.statuses) != {"201"}:
            raise BenchError(f"trivial endpoint: {base.statuses}, {base.errors[:1]}")

        ctx.say("admission: Courier API (publisher on, no worker)")
        with c.redis() as r:
            before = store_commands(r)
        cpu_s, store_cpu_s = tree_cpu_s(api.pid), tree_cpu_s(store_pid)
        with profiled(api, ctx.profile_dir, "admission-api"):
            load = loadgen.run(LoadSpec(url, requests, s.concurrency, s.admission_s,
                                        s.warmup_s, keep=SEND_FIELDS))
        api_cpu_ms = 1000 * (tree_cpu_s(api.pid) - cpu_s) / load.sent
        store_cpu_ms = 1000 * (tree_cpu_s(store_pid) - store_cpu_s) / load.sent
        sent = admitted(load, "admission")
        with c.redis() as r:
            after = store_commands(r)

        ctx.say(f"admission: delivering the {len(sent)} admitted messages")
        c.start_worker()
        with c.redis() as r:
            wait_delivered(r, pop.project_id, sent, s.drain_timeout_s, "admission")
            inboxes = Counter(aid for m in sent for _, aid in m.deliveries)
            check_exactly_once(r, pop.project_id, sent, "admission", dict(inboxes))
    return {
        "concurrency": s.concurrency,
        "duration_s": s.admission_s,
        "trivial": {"per_s": round(base.per_s, 1), **latency(base.latencies_ms)},
        "courier": {"per_s": round(load.per_s, 1), **latency(load.latencies_ms)},
        "throughput_ratio": round(ratio(load.per_s, base.per_s), 3),
        # CPU of the server's processes per request answered, warm-up included (with
        # --profile, py-spy's sampling is in the API's figure).
        "trivial_cpu_ms_per_request": round(base_cpu_ms, 3),
        "api_cpu_ms_per_send": round(api_cpu_ms, 3),
        "store_cpu_ms_per_send": round(store_cpu_ms, 3),
        "sent": len(sent),
        # What the store (which is the broker here too) ran per send, warm-up and the
        # commands inside scripts included (a script call counts as one more).
        **commands_per_send(before, after, len(sent)),
    }
