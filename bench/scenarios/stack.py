"""The whole stack on one machine, as users run it: every process of the Procfile.

The store, the API, the delivery workers, beat and Flower all run on this
machine with their default settings (the per-token rate limit included: the
load comes from ``STACK_AGENTS`` agents, each well under its limit). A closed
loop at the run's concurrency sends for the run's admission time; beside it,
the trivial endpoint with the same requests and connections. Reported: sends/s
and answer latency against the trivial endpoint, each delivery's admitted ->
accepted time for what was sent while the load ran (deliveries keeping up, or
not), and how long delivery went on after the load stopped.
"""

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
    free_port,
    store_commands,
    tree_cpu_s,
    wait_http,
    wait_worker,
)
from bench.profile import profiled
from bench.stats import latency, ratio
from bench.verify import SEND_FIELDS, admitted, check_exactly_once, wait_delivered
from messaging.config import Settings
from messaging.launch.supervisor import process_table

# Senders: 32 agents at ~2,000 sends/s are ~60/s each, under the default limit.
STACK_AGENTS = 32
DEFAULT_RATE_LIMIT = Settings.model_fields["rate_limit_per_s"].default


def run(ctx: Context) -> dict[str, Any]:
    """The trivial endpoint alone; then every Procfile process and the same load."""
    s = ctx.sizes
    with ctx.cluster("stack") as c:
        trivial, turl = c.start_http(TRIVIAL_APP)
        port = free_port()
        settings = c.settings(host="127.0.0.1", port=port, flower_port=free_port(),
                              rate_limit_per_s=DEFAULT_RATE_LIMIT)
        table = process_table(settings)
        # The API answers first, so the population exists before the load.
        procs = {name: c.spawn(name, command, settings) for name, command in table.items()}
        url = f"http://127.0.0.1:{port}"
        wait_http(procs["api"], url)
        for name, proc in procs.items():
            if "worker" in name:
                wait_worker(proc)
        pop = populate(url, c.operator_token, ring(STACK_AGENTS))
        requests = ring_sends(pop)

        ctx.say(f"stack: trivial endpoint, {s.concurrency} connections, {s.admission_s:g} s")
        cpu_s = tree_cpu_s(trivial.pid)
        base = loadgen.run(LoadSpec(turl, requests, s.concurrency, s.admission_s, s.warmup_s))
        base_cpu_ms = 1000 * (tree_cpu_s(trivial.pid) - cpu_s) / base.sent
        c.stop(trivial)
        if base.errors or set(base.statuses) != {"201"}:
            raise BenchError(f"trivial endpoint: {base.statuses}, {base.errors[:1]}")

        ctx.say(f"stack: Courier as `courier up` runs it ({', '.join(table)})")
        with c.redis() as r:
            pids = {"store": int(r.info("server")["process_id"]),
                    **{name: proc.pid for name, proc in procs.items()}}
            commands_before = store_commands(r)
        cpu_before = {name: tree_cpu_s(pid) for name, pid in pids.items()}
        with profiled(procs["api"], ctx.profile_dir, "stack-api"), \
                profiled(procs["worker-inbox"], ctx.profile_dir, "stack-worker-inbox"):
            load = loadgen.run(LoadSpec(url, requests, s.concurrency, s.admission_s,
                                        s.warmup_s, keep=SEND_FIELDS))
        sent = admitted(load, "stack")
        with c.redis() as r:
            wait_delivered(r, pop.project_id, sent, s.drain_timeout_s, "stack")
            inboxes = Counter(aid for m in sent for _, aid in m.deliveries)
            times = check_exactly_once(r, pop.project_id, sent, "stack", dict(inboxes))
            commands_after = store_commands(r)
        # Each process's CPU per send, from the load's start until every send was
        # delivered (what the workers did after the load is the load's too).
        cpu_ms = {name: round(1000 * (tree_cpu_s(pid) - cpu_before[name]) / load.sent, 3)
                  for name, pid in pids.items()}
        for proc in procs.values():
            proc.check()
    start_us = min(m.sent_us for m in sent) + int(s.warmup_s * 1e6)
    load_end_us = max(m.sent_us for m in sent)
    during = [t for m in sent if start_us <= m.sent_us for did, _ in m.deliveries
              for t in [times[did]]]
    lag = [(int(t["provider_result_recorded_us"]) - int(t["admitted_us"])) / 1000
           for t in during]
    last_us = max(int(t["provider_result_recorded_us"]) for t in times.values())
    return {
        "concurrency": s.concurrency,
        "duration_s": s.admission_s,
        "processes": list(table),
        "trivial": {"per_s": round(base.per_s, 1), **latency(base.latencies_ms)},
        "courier": {"per_s": round(load.per_s, 1), **latency(load.latencies_ms)},
        "admitted_to_accepted": latency(lag),
        "drain_s": round(max(0, last_us - load_end_us) / 1e6, 3),
        "throughput_ratio": round(ratio(load.per_s, base.per_s), 3),
        "sent": len(sent),
        "trivial_cpu_ms_per_request": round(base_cpu_ms, 3),
        "cpu_ms_per_send": cpu_ms,
        # Admitted and delivered, the broker's and Flower's events' included (and the
        # exactly-once check's reads, a few per send).
        **commands_per_send(commands_before, commands_after, load.sent),
    }
