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
  admitted; B's worker runs all along. Two ways, flood by flood in turn: the
  lane worker as ``courier up --lane`` starts it (the processes the
  transport declares), and with one process (``--concurrency 1``).

Each way, B's figure counts what B sent during A's drains and nothing after; a
drain ends once A's last message is delivered and indexed for search (the
index is written after the deliveries, when none wait), so what indexing A's
flood costs B is in B's figure.
A drain of 20,000 can be over in a few seconds, when B has sent a few dozen:
a p99 of those would be their worst. So A floods again, a new project A each
time (up to ``fairness_floods``), until B has sent during A's drains as many
as it sent alone, and the p99 of all of them is B's figure beside B alone's.

Beside B's p99, the p99 of B's sends clear of the store's AOF rewrites (none
under way between the send and its delivery), from the store's log: on one
small machine a rewrite's child shares the cores with everything else (the
embedded store runs it on idle CPU only, which takes most of its cost off the
server), and that, not the order of the queues, is where B's worst waits fell.

Every message of A and B must be delivered exactly once, or the run is void.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import loadgen
from bench.context import Context
from bench.loadgen import LoadResult, LoadSpec, Request
from bench.population import Population, populate, ring, ring_sends
from bench.procs import BenchError, Cluster, Proc
from bench.stats import latency, ratio
from bench.verify import SEND_FIELDS, Admitted, admitted, check_exactly_once, wait_delivered
from messaging.client import CourierClient
from messaging.config import Settings
from messaging.searchtext import EVERY
from messaging.store import keys
from messaging.transports import policy

LANE = "bulk"
PARKED = "parked"  # a lane no worker serves: A's flood waits there
B_CONCURRENCY = 4
# The store's log lines that open and close an AOF rewrite (child forked; new base in place).
REWRITE_START = "Background append only file rewriting started"
REWRITE_END = "Background AOF rewrite finished"
LOG_TIME = re.compile(r"^\d+:\w (\d\d \w{3} \d{4} \d\d:\d\d:\d\d\.\d{3}) ")

Window = tuple[int, int]  # start, end: us since the epoch


def rewrites(log: Path) -> list[Window]:
    """The store's AOF rewrites, from its log (one still under way ends now)."""
    windows: list[Window] = []
    start = None
    for line in log.read_text(errors="replace").splitlines():
        if not (m := LOG_TIME.match(line)):
            continue
        # The server logs local time, as naive datetimes are read.
        at_us = int(datetime.strptime(m.group(1), "%d %b %Y %H:%M:%S.%f").timestamp() * 1e6)
        if REWRITE_START in line:
            start = at_us
        elif REWRITE_END in line and start is not None:
            windows.append((start, at_us))
            start = None
    if start is not None:
        windows.append((start, time.time_ns() // 1000))
    return windows


def _trickle(url: str, requests: list[Request], ctx: Context, duration_s: float) -> LoadResult:
    spec = LoadSpec(url, requests, B_CONCURRENCY, duration_s, 0.0,
                    rate_per_s=ctx.sizes.fairness_rate_per_s, keep=SEND_FIELDS)
    return loadgen.run(spec)


def _recorded(c: Cluster, pop: Population, sent: list[Admitted], ctx: Context,
              what: str) -> dict[str, dict[str, str]]:
    with c.redis() as r:
        wait_delivered(r, pop.project_id, sent, ctx.sizes.drain_timeout_s, what)
        return check_exactly_once(r, pop.project_id, sent, what)


def _overlaps(since_us: int, until_us: int, windows: Sequence[Window]) -> bool:
    return any(start <= until_us and since_us <= end for start, end in windows)


def _latencies(sent: list[Admitted], times: dict[str, dict[str, str]],
               since_us: int = 0, until_us: int = 2**63,
               clear_of: Sequence[Window] = ()) -> list[float]:
    """Send -> inbox latencies of what was sent in [since, until], less any that
    a window of ``clear_of`` overlapped (from the send to its delivery)."""
    out = []
    for m in sent:
        if not since_us <= m.sent_us <= until_us:
            continue
        for did, _ in m.deliveries:
            done_us = int(times[did]["provider_result_recorded_us"])
            if not _overlaps(m.sent_us, done_us, clear_of):
                out.append((done_us - m.sent_us) / 1000)
    return out


# Where B's time goes: send -> admitted (the API), admitted -> dispatch started
# (ticket, broker, a worker's turn), dispatch started -> recorded (the delivery).
SEGMENTS = (("api", "", "admitted_us"), ("to_worker", "admitted_us", "dispatch_started_us"),
            ("delivery", "dispatch_started_us", "provider_result_recorded_us"))


def _segments(sent: list[Admitted], times: dict[str, dict[str, str]],
              since_us: int, until_us: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for name, start, end in SEGMENTS:
        out[name] = [
            (int(times[did][end]) - (int(times[did][start]) if start else m.sent_us)) / 1000
            for m in sent if since_us <= m.sent_us <= until_us for did, _ in m.deliveries]
    return out


def _worst(sent: list[Admitted], times: dict[str, dict[str, str]], since_us: int,
           until_us: int, windows: list[Window], n: int = 5) -> list[dict[str, Any]]:
    """B's slowest deliveries: when (s after the drain started), where the time went,
    and whether a store rewrite was under way."""
    rows = []
    for m in sent:
        if not since_us <= m.sent_us <= until_us:
            continue
        for did, _ in m.deliveries:
            t = {k: int(v) for k, v in times[did].items()}
            done_us = t["provider_result_recorded_us"]
            rows.append({"at_s": round((m.sent_us - since_us) / 1e6, 2),
                         "total_ms": (done_us - m.sent_us) / 1000,
                         **{name: (t[end] - (t[start] if start else m.sent_us)) / 1000
                            for name, start, end in SEGMENTS},
                         "store_rewrite": _overlaps(m.sent_us, done_us, windows)})
    return sorted(rows, key=lambda r: -r["total_ms"])[:n]


@dataclass
class Flood:
    """One flood of A's while B trickled: what B sent, when, and A's drain."""

    b_sent: list[Admitted]
    b_times: dict[str, dict[str, str]]
    start_us: int  # A's first send (live) or the moment A's backlog was let go
    delivered_us: int  # A's last delivery recorded
    end_us: int  # then A's flood seen indexed for search, or delivered_us if later
    a_sent: int
    a_admission_per_s: float

    def during(self) -> list[float]:
        """B's send -> inbox latencies of what B sent during A's drain."""
        return _latencies(self.b_sent, self.b_times, self.start_us, self.end_us)


def _flood(ctx: Context, c: Cluster, url: str, a: Population, b: Population, what: str,
           serve_a: Callable[[], object] | None = None) -> Flood:
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

    def drained() -> bool:  # delivered and indexed
        with c.redis() as r:
            done = int(r.hget(keys.stats(a.project_id), "outcome:accepted") or 0)
            indexed = int(r.zcard(keys.search_postings(a.project_id, EVERY)))
        return not thread.is_alive() and min(done, indexed) >= s.fairness_flood

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
    indexed_us = time.time_ns() // 1000
    b_stop.set()
    b_thread.join()
    thread.join()
    a_sent = admitted(flood["a"], f"{what}: A")
    a_times = _recorded(c, a, a_sent, ctx, f"{what}: A")
    b_sent = [m for load in b_loads for m in admitted(load, f"{what}: B")]
    delivered_us = max(int(t["provider_result_recorded_us"]) for t in a_times.values())
    return Flood(b_sent, _recorded(c, b, b_sent, ctx, f"{what}: B"),
                 drain_start_us if serve_a else min(m.sent_us for m in a_sent),
                 delivered_us, max(delivered_us, indexed_us), len(a_sent),
                 round(flood["a"].per_s, 1))


def _floods(ctx: Context, b_sends: int, cases: dict[str, Callable[[], Flood]],
            store_log: Path) -> dict[str, dict[str, Any]]:
    """Floods of A's, the cases taking turns flood by flood (``cases[what]`` runs
    that case's next one), until B sent ``b_sends`` during each case's drains.

    Each flood is a new project A of its own; at most ``fairness_floods`` per case.
    Taking turns, the cases share the store's growth over the run alike.
    """
    floods: dict[str, list[Flood]] = {what: [] for what in cases}

    def sent(what: str) -> int:
        return sum(len(f.during()) for f in floods[what])

    while todo := [what for what, done in floods.items()
                   if not done or (sent(what) < b_sends
                                   and len(done) < ctx.sizes.fairness_floods)]:
        for what in todo:
            if floods[what]:
                ctx.say(f"fairness: {what}: B sent {sent(what)} during A's drains, "
                        f"{b_sends} wanted: A floods again")
            floods[what].append(cases[what]())
    windows = rewrites(store_log)
    return {what: _summary(what, done, windows) for what, done in floods.items()}


def _summary(what: str, floods: list[Flood], windows: Sequence[Window]) -> dict[str, Any]:
    """B's latencies over one case's floods, and A's drains."""
    during = [ms for f in floods for ms in f.during()]
    if not during:
        raise BenchError(f"{what}: B sent nothing during A's drain")
    segments: dict[str, list[float]] = {}
    worst: list[dict[str, Any]] = []
    clear: list[float] = []
    for f in floods:
        for name, values in _segments(f.b_sent, f.b_times, f.start_us, f.end_us).items():
            segments.setdefault(name, []).extend(values)
        worst += _worst(f.b_sent, f.b_times, f.start_us, f.end_us, windows)
        clear += _latencies(f.b_sent, f.b_times, f.start_us, f.end_us, windows)
    drains = [round((f.delivered_us - f.start_us) / 1e6, 2) for f in floods]
    indexed = [round((f.end_us - f.start_us) / 1e6, 2) for f in floods]
    in_drains = [w for w in windows if any(_overlaps(f.start_us, f.end_us, [w]) for f in floods)]
    return {"b": latency(during), "b_sent_during": len(during),
            "b_clear_of_rewrites": latency(clear), "store_rewrites": len(in_drains),
            "b_segments": {name: latency(values) for name, values in segments.items()},
            "b_worst": sorted(worst, key=lambda r: -r["total_ms"])[:5],
            "floods": len(floods), "a_sent": sum(f.a_sent for f in floods),
            "a_drain_s": round(sum(drains) / len(drains), 2), "a_drain_s_each": drains,
            "a_indexed_s": round(sum(indexed) / len(indexed), 2), "a_indexed_s_each": indexed,
            "a_admission_per_s": round(sum(f.a_admission_per_s for f in floods)
                                       / len(floods), 1)}


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
        quiet_ms = _latencies(quiet_sent, quiet_times)
        quiet = latency(quiet_ms)
        quiet_segments = {name: latency(values) for name, values
                          in _segments(quiet_sent, quiet_times, 0, 2**63).items()}
        wanted = len(quiet_ms)

        def live_flood() -> Flood:
            a = populate(url, c.operator_token, ring())
            return _flood(ctx, c, url, a, b, "live")

        ctx.say(f"fairness: A floods {s.fairness_flood:,} through the API, B trickles")
        live = _floods(ctx, wanted, {"live": live_flood}, c.store.log_path)["live"]

        with CourierClient(url, c.operator_token) as op:
            def shared_flood() -> Flood:
                a = populate(url, c.operator_token, ring())
                op.set_lane(a.project_id, PARKED)
                return _flood(ctx, c, url, a, b, "shared",
                              lambda: op.set_lane(a.project_id, None))

            ctx.say(f"fairness: A's {s.fairness_flood:,} wait, then join the shared queue")
            shared = _floods(ctx, wanted, {"shared": shared_flood},
                             c.store.log_path)["shared"]
            lane_workers: list[Proc] = []

            def lane_flood(what: str, processes: int | None) -> Flood:
                for worker in lane_workers:  # the last flood's: A's backlog waits again
                    c.stop(worker)
                lane_workers.clear()
                a = populate(url, c.operator_token, ring())
                op.set_lane(a.project_id, LANE)
                return _flood(ctx, c, url, a, b, what, lambda: lane_workers.append(
                    c.start_worker(queues=f"deliver.inbox.{LANE}", concurrency=processes)))

            declared = policy.policy("inbox", Settings()).concurrency
            one = "lane, one process"
            ctx.say(f"fairness: A's {s.fairness_flood:,} wait on lane {LANE}, then its own "
                    f"worker: {declared} processes (as its kind's policy says) and one, "
                    "flood by flood")
            lanes = _floods(ctx, wanted, {"lane": lambda: lane_flood("lane", None),
                                          one: lambda: lane_flood(one, 1)}, c.store.log_path)
            laned, laned_one = lanes["lane"], lanes[one]
    return {
        "rate_per_s": s.fairness_rate_per_s,
        "flood": s.fairness_flood,
        "quiet": quiet,
        "quiet_segments": quiet_segments,
        "live": live,
        "shared": shared,
        "lane": laned,
        "lane_processes": declared,
        "lane_one": laned_one,
        "live_p99_ratio": round(ratio(live["b"]["p99_ms"], quiet["p99_ms"]), 3),
        "shared_p99_ratio": round(ratio(shared["b"]["p99_ms"], quiet["p99_ms"]), 3),
        "lane_p99_ratio": round(ratio(laned["b"]["p99_ms"], quiet["p99_ms"]), 3),
        "lane_one_p99_ratio": round(ratio(laned_one["b"]["p99_ms"], quiet["p99_ms"]), 3),
    }
