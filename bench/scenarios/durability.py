"""Durability: admission at each COURIER_DURABILITY level, beside `local`, in one run.

One store with one replica (both Valkey, AOF fsynced once a second, as the
embedded store runs); one API at a time, each with its level, the same load
against each: `local`, `fsync` (the primary's disk), `replica` (the primary's
disk and the replica's memory) and `replica-fsync` (both disks: it waits for the
replica's report of its fsync), then `replica-fsync` again at a quarter of the
connections: its wait is the same ~2 s whatever the load, so what it admits
shows the group commit (one wait a tick, the ticks' waits overlapping) as
sends/s growing with the connections. Every send of every run is then
delivered and checked once.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from bench import loadgen
from bench.context import Context
from bench.loadgen import LoadSpec
from bench.population import populate, ring, ring_sends
from bench.procs import BenchError, free_port
from bench.stats import latency, ratio
from bench.verify import SEND_FIELDS, admitted, check_exactly_once, wait_delivered
from messaging.launch.embedded import EmbeddedStore
from messaging.store import connect

LEVELS = ("local", "fsync", "replica", "replica-fsync")
# The run at fewer connections: (its name in the results, level, share of connections).
FEWER = ("replica-fsync-quarter", "replica-fsync", 4)
IN_SYNC_S = 10.0


def _replica_of(primary: EmbeddedStore, replica: EmbeddedStore) -> None:
    with connect.sync_client(replica.url) as r:
        r.config_set("masterauth", primary.password)  # type: ignore[union-attr]
        r.execute_command("REPLICAOF", "127.0.0.1", str(primary.port))  # type: ignore[union-attr]
        until = time.monotonic() + IN_SYNC_S
        while r.info("replication").get("master_link_status") != "up":  # type: ignore[union-attr]
            if time.monotonic() > until:
                raise BenchError("the replica did not come in sync")
            time.sleep(0.1)


def run(ctx: Context) -> dict[str, Any]:
    """The same load against the API at each level, one level at a time."""
    s = ctx.sizes
    out: dict[str, Any] = {"concurrency": s.concurrency, "duration_s": s.admission_s}
    with ctx.cluster("durability") as c:
        replica = EmbeddedStore(c.root / "replica", port=free_port())
        replica.start()
        try:
            _replica_of(c.store, replica)
            checks = []
            runs = [(level, level, s.concurrency) for level in LEVELS]
            runs.append((FEWER[0], FEWER[1], max(1, s.concurrency // FEWER[2])))
            for name, level, connections in runs:
                api, url = c.start_http(durability=level)
                pop = populate(url, c.operator_token, ring())
                ctx.say(f"durability: {level}, {connections} connections, "
                        f"{s.admission_s:g} s")
                load = loadgen.run(LoadSpec(url, ring_sends(pop), connections,
                                            s.admission_s, s.warmup_s, keep=SEND_FIELDS))
                checks.append((pop, admitted(load, f"durability {name}")))
                out[name] = {"per_s": round(load.per_s, 1), "connections": connections,
                             **latency(load.latencies_ms)}
                c.stop(api)
            ctx.say("durability: delivering every level's sends")
            c.start_worker()
            with c.redis() as r:
                for (pop, sent), (level, _, _) in zip(checks, runs, strict=True):
                    wait_delivered(r, pop.project_id, sent, s.drain_timeout_s, level)
                    inboxes = Counter(aid for m in sent for _, aid in m.deliveries)
                    check_exactly_once(r, pop.project_id, sent, level, dict(inboxes))
        finally:
            replica.stop()
    for level in LEVELS[1:]:
        out[level]["ratio"] = round(ratio(out[level]["per_s"], out["local"]["per_s"]), 3)
    return out
