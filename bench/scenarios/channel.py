"""Channel: send to the channel notification in the agent's host, beside send to inbox.

One agent's host is `courier mcp` over stdio, spoken to as Claude Code does:
initialize, then `notifications/initialized`, then every
`notifications/claude/channel` it writes is stamped as it is read. Sends to that
agent at a fixed rate (open loop, from each request's scheduled time); each one
counts twice: until the inbox showed it (`provider_result_recorded`), and until
the host read its channel notification. All clocks are this machine's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any

from bench import loadgen
from bench.context import Context
from bench.loadgen import LoadSpec
from bench.population import populate, ring, sends_to
from bench.procs import BenchError, Cluster
from bench.stats import latency, ratio
from bench.verify import SEND_FIELDS, admitted, check_exactly_once, wait_delivered

RATES = (10.0, 200.0)
RATE_S_MAX = 10.0
NOTIFIED_WITHIN_S = 30.0


class Host:
    """``courier mcp`` for one agent, and when each channel notification came."""

    def __init__(self, c: Cluster, url: str, token: str) -> None:
        env = {**c.env(c.settings()), "COURIER_URL": url, "COURIER_TOKEN": token}
        self.proc = subprocess.Popen([sys.executable, "-m", "messaging.cli", "mcp"], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
        self.notified: dict[str, int] = {}  # message id -> when read, us
        self.answers: dict[int, Any] = {}
        self.seen = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self._call(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                     "clientInfo": {"name": "bench", "version": "1"}})
        self._write({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _write(self, frame: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(frame).encode() + b"\n")
        self.proc.stdin.flush()

    def _call(self, n: int, method: str, params: dict[str, Any]) -> Any:
        self._write({"jsonrpc": "2.0", "id": n, "method": method, "params": params})
        with self.seen:
            if not self.seen.wait_for(lambda: n in self.answers, timeout=30):
                raise BenchError("courier mcp did not answer initialize")
            return self.answers[n]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            at = time.time_ns() // 1000
            frame = json.loads(line)
            with self.seen:
                if frame.get("method") == "notifications/claude/channel":
                    self.notified[frame["params"]["meta"]["message_id"]] = at
                elif "id" in frame:
                    self.answers[frame["id"]] = frame
                self.seen.notify_all()

    def wait_for(self, ids: list[str], timeout_s: float) -> None:
        with self.seen:
            if not self.seen.wait_for(lambda: all(i in self.notified for i in ids), timeout_s):
                missing = [i for i in ids if i not in self.notified]
                raise BenchError(f"{len(missing)} channel notifications never came")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def run(ctx: Context) -> dict[str, Any]:
    """Sends to one agent at each rate; its host's notifications beside its inbox."""
    s = ctx.sizes
    out: dict[str, Any] = {}
    seconds = min(s.e2e_s, RATE_S_MAX)
    with ctx.cluster("channel") as c:
        url = c.start_api_and_worker()
        pop = populate(url, c.operator_token, ring())
        host_agent = pop.agents[0]
        requests = sends_to(pop, host_agent.name)
        host = Host(c, url, host_agent.token)
        try:
            # The first message joins the agent's stream to its project's reader.
            warm = loadgen.run(LoadSpec(url, requests[:1], 1, 0.5, 0, rate_per_s=2,
                                        keep=SEND_FIELDS))
            warmed = admitted(warm, "channel warm-up")
            host.wait_for([m.message_id for m in warmed], NOTIFIED_WITHIN_S)
            # Every inbox entry of the run so far, so that the check sees any extra one.
            inboxes = Counter(aid for m in warmed for _, aid in m.deliveries)
            for rate in RATES:
                ctx.say(f"channel: {rate:g}/s for {seconds:g} s")
                load = loadgen.run(LoadSpec(url, requests, s.concurrency, seconds,
                                            s.warmup_s, rate_per_s=rate, keep=SEND_FIELDS))
                sent = admitted(load, f"channel at {rate:g}/s")
                with c.redis() as r:
                    wait_delivered(r, pop.project_id, sent, s.drain_timeout_s, "channel")
                    inboxes.update(aid for m in sent for _, aid in m.deliveries)
                    times = check_exactly_once(r, pop.project_id, sent, "channel", dict(inboxes))
                host.wait_for([m.message_id for m in sent], NOTIFIED_WITHIN_S)
                start = min(m.sent_us for m in sent) + int(s.warmup_s * 1e6)
                measured = [m for m in sent if m.sent_us >= start]
                inbox = [(int(times[m.deliveries[0][0]]["provider_result_recorded_us"])
                          - m.sent_us) / 1000 for m in measured]
                channel = [(host.notified[m.message_id] - m.sent_us) / 1000 for m in measured]
                out[f"{rate:g}"] = {"inbox": latency(inbox), "channel": latency(channel),
                                    "p99_ratio": round(ratio(latency(channel)["p99_ms"],
                                                             latency(inbox)["p99_ms"]), 3)}
        finally:
            host.close()
    return {"rates_per_s": list(RATES), "duration_s": seconds, **out}
