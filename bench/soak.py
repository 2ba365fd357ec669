"""``python -m bench.soak``: a fixed send rate for N minutes; is every process flat after warm-up?

A fixed send rate for N minutes against every process of the Procfile (API,
inbox and webhook workers, beat, Flower) on an embedded store, under a
retention of minutes, while agents page their inboxes, five event streams
stay open and idle subscriptions come and go. Every ``--sample-s`` it records
each process's resident memory (its whole process tree) and the store's used
memory and stored messages. It reports, per minute, send and inbox-page
latency, and after warm-up (two retention periods), each process's RSS slope
and the store's: flat means bounded. ``--quick`` is the short run the test
suite does.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

from bench import loadgen
from bench.loadgen import LoadSpec, Request
from bench.population import Agent, body_md
from bench.procs import BenchError, Cluster, free_port, wait_worker
from bench.profile import py_spy
from bench.stats import latency
from messaging.client import CourierClient
from messaging.launch.supervisor import process_table
from messaging.store import keys

RESULTS_DIR = Path(os.path.abspath(__file__)).parent / "results"
INBOX_AGENTS = 6
WEBHOOK_AGENTS = 2
STREAMS = 5
PAGE_LIMIT = 100
CHUNK_S = 60.0
CONCURRENCY = 16
SECONDS_PER_DAY = 86_400
# Processes of the Procfile the soak runs beside the API (the store is the cluster's).
PROCESSES = ("worker-inbox", "worker-webhook", "beat", "flower")
PAGE_SIZE_B = os.sysconf("SC_PAGE_SIZE")


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--rate", type=float, default=100.0, help="sends per second")
    p.add_argument("--retention-s", type=float, default=300.0)
    p.add_argument("--sample-s", type=float, default=15.0)
    p.add_argument("--flower-max-tasks", type=int, default=None,
                   help="Flower's task limit [default: Courier's]")
    p.add_argument("--quick", action="store_true", help="1 minute at 20/s, 15 s retention")
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    p.add_argument("--keep", action="store_true", help="keep the temp dir with process logs")
    p.add_argument("--profile", action="store_true",
                   help="py-spy the API and the inbox worker in the second and the last minute")
    args = p.parse_args(argv)
    if args.quick:
        args.minutes, args.rate, args.retention_s, args.sample_s = 1.0, 20.0, 15.0, 3.0
    return args


def tree_rss_bytes(session: int) -> int:
    """The resident memory of every process in one session (a server and its children)."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            statm = Path(entry.path, "statm").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == session:  # field 6 of stat: the session id
            total += int(statm.split()[1]) * PAGE_SIZE_B
    return total


class Hook(BaseHTTPRequestHandler):
    """A webhook receiver that accepts everything."""

    count = 0
    lock = threading.Lock()

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with Hook.lock:
            Hook.count += 1
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")


@dataclass
class World:
    """The project, its agents and the figures the side activities gather."""

    url: str
    project_id: str
    inbox: list[Agent]
    hooks: list[Agent]
    stop: threading.Event = field(default_factory=threading.Event)
    pages: list[tuple[float, float, int]] = field(default_factory=list)  # (t, ms, items)
    events: int = 0
    notices: int = 0
    errors: list[str] = field(default_factory=list)


def populate(url: str, operator_token: str, hook_url: str) -> World:
    """A project with inbox agents and webhook agents."""
    with CourierClient(url, operator_token) as op:
        project = op.create_project(f"/srv/soak/{time.time_ns()}")
    pid = project["project_id"]
    made: list[list[Agent]] = [[], []]
    with CourierClient(url, project["token"]) as admin:
        for i in range(INBOX_AGENTS + WEBHOOK_AGENTS):
            hook = i >= INBOX_AGENTS
            name = f"Hook{i}" if hook else f"Agent{i}"
            transport = {"kind": "webhook", "url": hook_url} if hook else None
            row = admin.register_agent(pid, name, transport)
            made[hook].append(Agent(row["agent_id"], name, row["label"], row["token"]))
    return World(url, pid, made[0], made[1])


def sends(w: World) -> list[Request]:
    """Sends from the inbox agents to one to three others, some of them webhooks."""
    rng = random.Random(7)
    out = []
    everyone = w.inbox + w.hooks
    for i in range(240):
        sender = w.inbox[i % len(w.inbox)]
        others = [a for a in everyone if a is not sender]
        to = [a.name for a in rng.sample(others, rng.randint(1, 3))]
        body = {"to": to, "subject": f"Soak {i}", "body_md": body_md(rng.randint(300, 1500))}
        out.append(Request("POST", "/v1/messages", {"Authorization": f"Bearer {sender.token}",
                                                    "Content-Type": "application/json"},
                           json.dumps(body)))
    return out


def read_inboxes(w: World, every_s: float) -> None:
    """Page three agents' inboxes with their cursors, timing each page."""
    clients = [CourierClient(w.url, a.token) for a in w.inbox[:3]]
    cursors = [""] * len(clients)
    while not w.stop.wait(every_s):
        for i, c in enumerate(clients):
            try:
                started = time.perf_counter()
                page = c.inbox(cursor=cursors[i] or None, limit=PAGE_LIMIT)
                w.pages.append((time.monotonic(), (time.perf_counter() - started) * 1000,
                                len(page["messages"])))
                cursors[i] = page["next_cursor"]
            except Exception as exc:  # noqa: BLE001 - counted and reported, the soak goes on
                w.errors.append(f"inbox: {exc}")
    for c in clients:
        c.close()


def follow_stream(w: World, agent: Agent) -> None:
    """Keep one event stream open, counting its events, reconnecting if it drops."""
    while not w.stop.is_set():
        try:
            with httpx.stream("GET", w.url + "/v1/agents/me/events",
                              headers={"Authorization": f"Bearer {agent.token}"},
                              timeout=httpx.Timeout(5.0, read=30.0)) as r:
                for line in r.iter_lines():
                    if line.startswith("event:"):
                        w.events += 1
                    if w.stop.is_set():
                        return
        except httpx.HTTPError as exc:
            if not w.stop.is_set():
                w.errors.append(f"stream: {exc}")
                time.sleep(1)


def subscriptions(w: World, every_s: float) -> None:
    """One agent watches another, which goes busy and idle in turn: a notice each time."""
    watcher, target = (CourierClient(w.url, a.token) for a in w.inbox[-2:])
    with watcher, target:
        while not w.stop.wait(every_s):
            try:
                target.set_presence("busy")
                watcher.subscribe_idle(w.inbox[-1].name, ttl_s=60)
                target.set_presence("idle")
                w.notices += 1
            except Exception as exc:  # noqa: BLE001 - counted and reported
                w.errors.append(f"subscription: {exc}")


def slope_per_h(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per hour (0 with fewer than 2)."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    den = sum((t - mx) ** 2 for t, _ in points)
    return 0.0 if den == 0 else sum((t - mx) * (v - my) for t, v in points) / den * 3600


def sample(c: Cluster, procs: dict[str, int], w: World, started: float,
           samples: list[dict[str, Any]], retention_s: float) -> None:
    """One row: every process's RSS, the store's memory, stored messages and how many
    of them a retention round may look at now (their last activity is old enough)."""
    cutoff_ms = int((time.time() - retention_s) * 1000)
    with c.redis() as r:
        mem = r.info("memory")
        stored = r.zcard(keys.retention(w.project_id))
        due = r.zcount(keys.retention(w.project_id), 0, cutoff_ms)
    row = {"t_s": round(time.monotonic() - started, 1), "stored_messages": stored,
           "due_for_retention": due, "store_used_bytes": int(mem["used_memory"]),
           "rss_bytes": {name: tree_rss_bytes(pid) for name, pid in procs.items()}}
    samples.append(row)


def family(key: str) -> str:
    """What kind of record a store key is: its name with the project and ids left out."""
    prefix, _, rest = key.partition(":")
    if prefix != keys.PREFIX:
        return "(not Courier's)"
    if rest.startswith("{p:"):
        parts = rest.partition("}:")[2].split(":")
        if parts[0] == "sx":
            return "sx:project" if parts[1:2] == ["project"] else "sx:agent"
        return parts[0]
    return rest.partition(":")[0]


def families(c: Cluster) -> dict[str, list[int]]:
    """Every kind of record in the store: [keys, bytes] (``MEMORY USAGE`` of each key)."""
    out: dict[str, list[int]] = {}
    with c.redis() as r:
        names = [str(k) for k in r.scan_iter(count=2000)]
        for i in range(0, len(names), 1000):
            chunk = names[i:i + 1000]
            pipe = r.pipeline(transaction=False)
            for k in chunk:
                pipe.memory_usage(k, samples=0)
            for k, used in zip(chunk, pipe.execute(), strict=True):
                row = out.setdefault(family(k), [0, 0])
                row[0] += 1
                row[1] += int(used or 0)
    return dict(sorted(out.items(), key=lambda kv: -kv[1][1]))


def report(args: argparse.Namespace, samples: list[dict[str, Any]], minutes: list[dict[str, Any]],
           w: World, sent: int, warm_s: float,
           kinds: dict[str, dict[str, list[int]]]) -> dict[str, Any]:
    """The figures: per-minute latencies, slopes after warm-up, bytes per stored message."""
    after = [s for s in samples if s["t_s"] >= warm_s] or samples[-2:]
    slopes = {name: round(slope_per_h([(s["t_s"], s["rss_bytes"][name] / 2**20) for s in after]),
                          1) for name in samples[0]["rss_bytes"]}
    store_slope = slope_per_h([(s["t_s"], s["store_used_bytes"] / 2**20) for s in after])
    # Bytes per stored message: the store's growth over the stored messages' growth
    # while nothing was old enough to be removed yet.
    filling = [s for s in samples if s["t_s"] <= (args.retention_s or math.inf)] or samples[:2]
    first, last = filling[0], filling[-1]
    grown = last["stored_messages"] - first["stored_messages"]
    per_message = ((last["store_used_bytes"] - first["store_used_bytes"]) / grown
                   if grown > 0 else 0.0)
    return {
        "rate_per_s": args.rate, "minutes": args.minutes, "retention_s": args.retention_s,
        "sent": sent, "webhook_posts": Hook.count, "events_streamed": w.events,
        "idle_notices": w.notices, "errors": w.errors[:20], "error_count": len(w.errors),
        "warm_up_s": warm_s,
        "rss_mb_per_h_after_warm_up": slopes,
        "rss_mb_start_end": {n: [round(after[0]["rss_bytes"][n] / 2**20, 1),
                                 round(after[-1]["rss_bytes"][n] / 2**20, 1)] for n in slopes},
        "store_mb_per_h_after_warm_up": round(store_slope, 1),
        "store_mb_start_end": [round(after[0]["store_used_bytes"] / 2**20, 1),
                               round(after[-1]["store_used_bytes"] / 2**20, 1)],
        "stored_messages_end": samples[-1]["stored_messages"],
        "store_bytes_per_stored_message": round(per_message),
        # Per kind of record: [keys, MB] after warm-up and at the end.
        "store_by_kind": {
            name: {when: [kinds[when].get(name, [0, 0])[0],
                          round(kinds[when].get(name, [0, 0])[1] / 2**20, 1)]
                   for when in kinds}
            for name in kinds.get("end", {})},
        "per_minute": minutes,
        "samples": samples,
    }


def start(c: Cluster, args: argparse.Namespace) -> tuple[str, dict[str, int]]:
    """The API and the Procfile's other processes on the cluster; the URL and every pid."""
    overrides: dict[str, object] = {"retention_days": args.retention_s / SECONDS_PER_DAY,
                                    "retention_interval_s": max(1.0, args.retention_s / 10),
                                    "flower_port": free_port()}
    if args.flower_max_tasks:
        overrides["flower_max_tasks"] = args.flower_max_tasks
    api, url = c.start_http(**overrides)
    settings = c.settings(**overrides)
    table = process_table(settings)
    procs = {"api": api.pid, "store": c.store.pid or 0}
    for name in PROCESSES:
        proc = c.spawn(name, table[name], settings)
        procs[name] = proc.pid
        if name.startswith("worker"):
            wait_worker(proc)
    return url, procs


def drive(args: argparse.Namespace, workdir: Path, url: str, procs: dict[str, int], w: World,
          samples: list[dict[str, Any]], started: float) -> tuple[list[dict[str, Any]], int]:
    """The sends, minute by minute at the fixed rate; per-minute figures and sends admitted."""
    requests = sends(w)
    minutes: list[dict[str, Any]] = []
    sent, left = 0, args.minutes * 60
    while left > 0:
        chunk = min(CHUNK_S, left)
        t0 = time.monotonic()
        if args.profile and (len(minutes) == 1 or left <= CHUNK_S):
            profile(workdir, procs, f"minute{len(minutes) + 1}", chunk * 0.8)
        load = loadgen.run(LoadSpec(url, requests, CONCURRENCY, chunk, 0.0,
                                    rate_per_s=args.rate))
        sent += load.statuses.get("201", 0)
        pages = [ms for t, ms, _ in w.pages if t >= t0]
        minutes.append({"minute": len(minutes) + 1, "send": latency(load.latencies_ms),
                        "statuses": load.statuses, "load_errors": load.errors[:3],
                        "inbox_page": latency(pages) if pages else None,
                        "stored_messages": samples[-1]["stored_messages"],
                        "store_mb": round(samples[-1]["store_used_bytes"] / 2**20, 1)})
        print(f"[{time.monotonic() - started:7.1f}s] minute {len(minutes)}: send p50/p99 "
              f"{minutes[-1]['send']['p50_ms']}/{minutes[-1]['send']['p99_ms']} ms, store "
              f"{minutes[-1]['store_mb']} MB, {minutes[-1]['stored_messages']} stored, "
              f"{samples[-1]['due_for_retention']} of them due for retention",
              file=sys.stderr, flush=True)
        left -= chunk
    return minutes, sent


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Start everything, drive the load, sample, stop; the report."""
    hook_server = ThreadingHTTPServer(("127.0.0.1", free_port()), Hook)
    threading.Thread(target=hook_server.serve_forever, daemon=True).start()
    hook_url = f"http://127.0.0.1:{hook_server.server_address[1]}/hook"
    with Cluster(workdir, keep=args.keep or args.profile) as c:
        url, procs = start(c, args)
        w = populate(url, c.operator_token, hook_url)
        started = time.monotonic()
        samples: list[dict[str, Any]] = []
        side = [threading.Thread(target=read_inboxes, args=(w, 3.0), daemon=True),
                threading.Thread(target=subscriptions, args=(w, 5.0), daemon=True)]
        side += [threading.Thread(target=follow_stream, args=(w, a), daemon=True)
                 for a in w.inbox[:STREAMS]]

        warm_s = min(2 * args.retention_s + 60, args.minutes * 30)
        kinds: dict[str, dict[str, list[int]]] = {}

        def sampler() -> None:
            while not w.stop.wait(args.sample_s):
                try:
                    sample(c, procs, w, started, samples, args.retention_s)
                    if "after_warm_up" not in kinds and samples[-1]["t_s"] >= warm_s:
                        kinds["after_warm_up"] = families(c)
                except Exception as exc:  # noqa: BLE001 - reported
                    w.errors.append(f"sample: {exc}")

        side.append(threading.Thread(target=sampler, daemon=True))
        sample(c, procs, w, started, samples, args.retention_s)
        for t in side:
            t.start()
        minutes, sent = drive(args, workdir, url, procs, w, samples, started)
        sample(c, procs, w, started, samples, args.retention_s)
        w.stop.set()
        kinds["end"] = families(c)
        for proc in c.procs:
            if not proc.alive():
                raise BenchError(f"{proc.name} died:\n{proc.tail()}")
    hook_server.shutdown()
    return report(args, samples, minutes, w, sent, warm_s, kinds)


def profile(workdir: Path, procs: dict[str, int], label: str, seconds: float) -> None:
    """Start py-spy on the API and the inbox worker for ``seconds`` (collapsed stacks)."""
    for name in ("api", "worker-inbox"):
        out = workdir / f"profile-{name}-{label}.txt"
        subprocess.Popen([py_spy(), "record", "--pid", str(procs[name]), "--subprocesses",
                          "--duration", str(int(seconds)), "--format", "raw", "--nonblocking",
                          "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise BenchError("stopped by SIGTERM")


def main(argv: list[str] | None = None) -> int:
    """Run the soak; print the summary and write the JSON."""
    args = parse(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, _terminated)
    stamp = datetime.now(tz=UTC).strftime("%Y%m%dT%H%M%SZ")
    workdir = Path(tempfile.mkdtemp(prefix=f"courier-soak-{stamp}-"))
    try:
        result = run(args, workdir)
    except BenchError as exc:
        print(f"soak failed: {exc}\nlogs in {workdir}", file=sys.stderr)
        return 2
    summary = {k: v for k, v in result.items() if k not in ("samples", "per_minute")}
    print(json.dumps(summary, indent=2))
    args.results_dir.mkdir(parents=True, exist_ok=True)
    out = args.results_dir / f"soak-{stamp}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
