"""Fairness: one project's flood against another's steady trickle, shared queue and lane.

Project B sends at a fixed rate (open loop) throughout. First alone: its
send -> inbox p99 with no flood is the baseline. Then project A admits a flood
of inbox messages as fast as it can (closed loop) while B goes on, three ways:

- live: the worker runs all along, so A's flood is delivered as fast as it is
  admitted (no backlog forms: delivery outruns admission); B's p99 from A's
  first send to A's last delivery. This measures the API and CPU A takes.
- shared: A's whole flood waits while A admits (on a lane no worker serves),
  then the operator moves A back to the shared queue, where the worker has
  served B all along. B's p99 over what B sent during A's drain (the move to
  A's last delivery): what a backlog costs another project.
- lane: A is on a lane of its own, its worker started only after A's flood is
  admitted; B's worker runs all along.

Every message of A and B must be delivered exactly once, or the run is void.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from bench import loadgen
from bench.context import Context
from bench.loadgen import LoadResult, LoadSpec, Request
from bench.population import Population, populate, ring, ring_sends
from bench.procs import BenchError, Cluster
from bench.stats import latency, ratio
from bench.verify import SEND_FIELDS, Admitted, admitted, check_exactly_once, wait_delivered
from messaging.client import CourierClient
from messaging.store import keys

LANE = "bulk"
PARKED = "parked"  # a lane no worker serves: A's flood waits there
B_CONCURRENCY = 4


def _trickle(url: str, requests: list[Request], ctx: Context, duration_s: float) -> LoadResult:
    spec = LoadSpec(url, requests, B_CONCURRENCY, duration_s, 0.0,
                    rate_per_s=ctx.sizes.fairness_rate_per_s, keep=SEND_FIELDS)
    return loadgen.run(spec)


def _recorded(c: Cluster, pop: Population, sent: list[Admitted], ctx: Context,
              what: str) -> dict[str, dict[str, str]]:
    with c.redis() as r:
        wait_delivered(r, pop.project_id, sent, ctx.sizes.drain_timeout_s, what)
        return check_exactly_once(r, pop.project_id, sent, what)


def _latencies(sent: list[Admitted], times: dict[str, dict[str, str]],
               since_us: int = 0, until_us: int = 2**63) -> list[float]:
    return [(int(times[did]["provider_result_recorded_us"]) - m.sent_us) / 1000
            for m in sent if since_us <= m.sent_us <= until_us for did, _ in m.deliveries]


# Where B's time goes: send -> admitted (the API), admitted -> dispatch started
# (ticket, broker, a worker's turn), dispatch started -> recorded (the delivery).
SEGMENTS = (("api", "", "admitted_us"), ("to_worker", "admitted_us", "dispatch_started_us"),
            ("delivery", "dispatch_started_us", "provider_result_recorded_us"))


def _segments(sent: list[Admitted], times: dict[str, dict[str, str]],
              since_us: int, until_us: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, start, end in SEGMENTS:
        out[name] = latency([
            (int(times[did][end]) - (int(times[did][start]) if start else m.sent_us)) / 1000
            for m in sent if since_us <= m.sent_us <= until_us for did, _ in m.deliveries])
    return out


def _worst(sent: list[Admitted], times: dict[str, dict[str, str]], since_us: int,
           until_us: int, n: int = 5) -> list[dict[str, float]]:
    """B's slowest deliveries: when (s after the drain started) and where the time went."""
    rows = []
    for m in sent:
        if not since_us <= m.sent_us <= until_us:
            continue
        for did, _ in m.deliveries:
            t = {k: int(v) for k, v in times[did].items()}
            rows.append({"at_s": round((m.sent_us - since_us) / 1e6, 2),
                         "total_ms": (t["provider_result_recorded_us"] - m.sent_us) / 1000,
                         **{name: (t[end] - (t[start] if start else m.sent_us)) / 1000
                            for name, start, end in SEGMENTS}})
    return sorted(rows, key=lambda r: -r["total_ms"])[:n]


def _flood(ctx: Context, c: Cluster, url: str, a: Population, b: Population, what: str,
           serve_a: Callable[[], object] | None = None) -> dict[str, Any]:
    """A floods while B trickles, until A's flood is drained.

    With ``serve_a``, nothing serves A's queue while A admits: A's whole flood
    waits as a backlog, then ``serve_a`` has it served and the drain is
    measured from there. Without it, A's flood is delivered as it is admitted.
    """
    s = ctx.sizes
    flood: dict[str, LoadResult] = {}

    def send_flood() -> None:
        spec = LoadSpec(url, ring_sends(a), s.concurrency, 3600.0, 0.0,
                        count=s.fairness_flood, keep=SEND_FIELDS)
        flood["a"] = loadgen.run(spec)

    def drained() -> bool:
        with c.redis() as r:
            done = int(r.hget(keys.stats(a.project_id), "outcome:accepted") or 0)
        return not thread.is_alive() and done >= s.fairness_flood

    b_loads: list[LoadResult] = []
    b_stop = threading.Event()

    def trickle() -> None:  # B sends all along, window after window
        while not b_stop.is_set():
            b_loads.append(_trickle(url, ring_sends(b), ctx, s.fairness_window_s))

    thread = threading.Thread(target=send_flood, name="flood")
    b_thread = threading.Thread(target=trickle, name="trickle")
    b_thread.start()
    thread.start()
    deadline = time.monotonic() + s.drain_timeout_s
    if serve_a is not None:
        thread.join()  # A's whole flood is admitted and waits
        serve_a()
    drain_start_us = time.time_ns() // 1000
    while not drained():
        if time.monotonic() > deadline:
            b_stop.set()
            raise BenchError(f"{what}: A's flood was not drained in {s.drain_timeout_s:g} s")
        time.sleep(0.05)
    # B's figure covers at least two windows after the drain started.
    time.sleep(max(0.0, drain_start_us / 1e6 + 2 * s.fairness_window_s - time.time()))
    b_stop.set()
    b_thread.join()
    thread.join()
    a_sent = admitted(flood["a"], f"{what}: A")
    a_times = _recorded(c, a, a_sent, ctx, f"{what}: A")
    drain_end_us = max(int(t["provider_result_recorded_us"]) for t in a_times.values())
    b_sent = [m for load in b_loads for m in admitted(load, f"{what}: B")]
    b_times = _recorded(c, b, b_sent, ctx, f"{what}: B")
    start_us = drain_start_us if serve_a else min(m.sent_us for m in a_sent)
    until_us = max(drain_end_us, start_us + int(2 * s.fairness_window_s * 1e6))
    during = _latencies(b_sent, b_times, start_us, until_us)
    if not during:
        raise BenchError(f"{what}: B sent nothing during A's drain")
    return {"b": latency(during), "b_sent_during": len(during),
            "b_segments": _segments(b_sent, b_times, start_us, until_us),
            "b_worst": _worst(b_sent, b_times, start_us, until_us),
            "a_sent": len(a_sent), "a_drain_s": round((drain_end_us - start_us) / 1e6, 2),
            "a_admission_per_s": round(flood["a"].per_s, 1)}


def run(ctx: Context) -> dict[str, Any]:
    """B alone; A's flood on the shared queue, live and as a backlog; A's backlog on a lane."""
    s = ctx.sizes
    with ctx.cluster("fairness") as c:
        _, url = c.start_http()
        c.start_worker()
        b = populate(url, c.operator_token, ["B0", "B1"])
        ctx.say(f"fairness: B alone at {s.fairness_rate_per_s:g}/s for {s.fairness_quiet_s:g} s")
        quiet_load = _trickle(url, ring_sends(b), ctx, s.fairness_quiet_s)
        quiet_sent = admitted(quiet_load, "fairness: B alone")
        quiet_times = _recorded(c, b, quiet_sent, ctx, "B alone")
        quiet = latency(_latencies(quiet_sent, quiet_times))
        quiet_segments = _segments(quiet_sent, quiet_times, 0, 2**63)

        ctx.say(f"fairness: A floods {s.fairness_flood:,} through the API, B trickles")
        live = _flood(ctx, c, url, populate(url, c.operator_token, ring()), b, "live")

        ctx.say(f"fairness: A's {s.fairness_flood:,} wait, then join the shared queue")
        with CourierClient(url, c.operator_token) as op:
            a = populate(url, c.operator_token, ring())
            op.set_lane(a.project_id, PARKED)
            shared = _flood(ctx, c, url, a, b, "shared",
                            lambda: op.set_lane(a.project_id, None))
            ctx.say(f"fairness: A's {s.fairness_flood:,} wait on lane {LANE}, "
                    "then its own worker")
            a = populate(url, c.operator_token, ring())
            op.set_lane(a.project_id, LANE)
            laned = _flood(ctx, c, url, a, b, "lane",
                           lambda: c.start_worker(queues=f"deliver.inbox.{LANE}"))
    return {
        "rate_per_s": s.fairness_rate_per_s,
        "flood": s.fairness_flood,
        "quiet": quiet,
        "quiet_segments": quiet_segments,
        "live": live,
        "shared": shared,
        "lane": laned,
        "live_p99_ratio": round(ratio(live["b"]["p99_ms"], quiet["p99_ms"]), 3),
        "shared_p99_ratio": round(ratio(shared["b"]["p99_ms"], quiet["p99_ms"]), 3),
        "lane_p99_ratio": round(ratio(laned["b"]["p99_ms"], quiet["p99_ms"]), 3),
    }
