"""The table: each figure beside its baseline, the ratio, Courier's target and its verdict."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

Json = dict[str, Any]
# Search queries whose first page must not slow down as history grows.
FLAT_QUERIES = ("word", "prefix", "word + sender", "common word", "no words (newest)")


@dataclass(frozen=True)
class Row:
    """One line of the table."""

    scenario: str
    figure: str
    value: float
    baseline: float | None = None
    baseline_is: str = ""
    ratio: float | None = None
    target: str = ""
    met: bool | None = None


def _at_least(limit: float) -> Callable[[float], bool]:
    return lambda v: v >= limit


def _at_most(limit: float) -> Callable[[float], bool]:
    return lambda v: v <= limit


def _row(scenario: str, figure: str, value: float, baseline: float | None = None,
         baseline_is: str = "", target: str = "",
         check: Callable[[float], bool] | None = None, on_ratio: bool = False) -> Row:
    ratio = value / baseline if baseline else None
    judged = ratio if on_ratio else value
    met = None if check is None or judged is None or math.isnan(judged) else check(judged)
    return Row(scenario, figure, value, baseline, baseline_is, ratio, target, met)


def admission_rows(r: Json) -> list[Row]:
    """Sends/s and latency against the trivial endpoint."""
    c, t = r["courier"], r["trivial"]
    base = f"trivial endpoint, c={r['concurrency']}"
    return [
        _row("admission", "sends/s", c["per_s"], t["per_s"], base, ">= 0.6x",
             _at_least(0.6), on_ratio=True),
        _row("admission", "p50 ms", c["p50_ms"], t["p50_ms"], base),
        _row("admission", "p99 ms", c["p99_ms"], t["p99_ms"], base, "<= 20 ms", _at_most(20)),
        _row("admission", "API CPU ms per send (its processes, publishing included)",
             r.get("api_cpu_ms_per_send", math.nan), r.get("trivial_cpu_ms_per_request"),
             "trivial endpoint, per request"),
        _row("admission", "store CPU ms per send", r.get("store_cpu_ms_per_send", math.nan)),
        _row("admission", "store commands run per send (publishing, scripts' own included)",
             r.get("store_commands_run_per_send", math.nan)),
    ]


def stack_rows(r: Json) -> list[Row]:
    """The whole stack on one machine: admission against the trivial endpoint, delivery lag."""
    c, t, lag = r["courier"], r["trivial"], r["admitted_to_accepted"]
    base = f"trivial endpoint, c={r['concurrency']}"
    return [
        _row("stack", "sends/s, every process on one machine", c["per_s"], t["per_s"], base,
             ">= 0.35x", _at_least(0.35), on_ratio=True),
        _row("stack", "p50 ms", c["p50_ms"], t["p50_ms"], base),
        _row("stack", "p99 ms", c["p99_ms"], t["p99_ms"], base),
        _row("stack", "admitted->accepted p50 ms, under load", lag["p50_ms"]),
        _row("stack", "admitted->accepted p99 ms, under load", lag["p99_ms"], target="<= 100 ms",
             check=_at_most(100)),
        _row("stack", "drain s after the load", r["drain_s"]),
        *_cpu_rows(r),
        _row("stack", "store commands run per send (admitted and delivered)",
             r.get("store_commands_run_per_send", math.nan)),
    ]


def _cpu_rows(r: Json) -> list[Row]:
    """CPU per send of every process of the stack, and their sum beside the trivial
    endpoint's per request (runs before these figures have none)."""
    spent: dict[str, float] = r.get("cpu_ms_per_send", {})
    if not spent:
        return []
    return [
        _row("stack", "CPU ms per send, every process (admitted and delivered)",
             sum(spent.values()), r["trivial_cpu_ms_per_request"],
             "trivial endpoint, per request"),
        *(_row("stack", f"  CPU ms per send: {name}", ms)
          for name, ms in sorted(spent.items(), key=lambda kv: -kv[1])),
    ]


def delivery_rows(r: Json) -> list[Row]:
    """Deliveries/s against no-op tasks/s."""
    return [_row("delivery", f"deliveries/s ({r['backlog']} backlog)", r["courier"]["per_s"],
                 r["noop"]["per_s"], "no-op tasks/s", ">= 1.0x", _at_least(1.0), on_ratio=True)]


def end_to_end_rows(r: Json) -> list[Row]:
    """Send to inbox-visible latency against the no-op round trip."""
    c, b = r["courier"], r["baseline"]
    base = "trivial endpoint + no-op task"
    rate = f"{r['rate_per_s']:g}/s"
    return [
        _row("end to end", f"send->inbox p50 ms @{rate}", c["p50_ms"], b["p50_ms"], base,
             "<= 5 ms", _at_most(5)),
        _row("end to end", f"send->inbox p99 ms @{rate}", c["p99_ms"], b["p99_ms"], base,
             "<= 25 ms", _at_most(25)),
        _row("end to end", "admitted->inbox p50 ms", c["admitted_to_inbox"]["p50_ms"]),
        _row("end to end", "admitted->inbox p99 ms", c["admitted_to_inbox"]["p99_ms"]),
        _row("end to end", f"HTTP answer p99 ms @{rate}", c["http"]["p99_ms"],
             b["http"]["p99_ms"], base),
    ]


def scale_rows(r: Json) -> list[Row]:
    """Large against small stored counts; memory per message against the body's size."""
    small, large = r["small"], r["large"]
    base = f"{small['stored']:,} stored, c={r['concurrency']}"
    rows = []
    for what, label in (("admission", "admission"), ("inbox_page", "inbox page")):
        for p in ("p50_ms", "p99_ms"):
            rows.append(_row("scale", f"{label} {p.replace('_ms', '')} ms @{large['stored']:,}",
                             large[what][p], small[what][p], base, "<= 1.3x", _at_most(1.3),
                             on_ratio=True))
        rows.append(_row("scale", f"{label} req/s @{large['stored']:,}", large[what]["per_s"],
                         small[what]["per_s"], base))
    mem = r["memory"]
    for key, label in (("real_path_bytes_per_message", "bytes/message (API + worker)"),
                       ("preload_bytes_per_message", f"bytes/message (@{large['stored']:,})")):
        if mem[key] is not None:  # no preload when the large point is the small one
            rows.append(_row("scale", label, mem[key], mem["body_bytes"], "1 KiB body",
                             "<= 2.5 KiB/KiB", _at_most(2.5), on_ratio=True))
    return rows


def search_rows(r: Json) -> list[Row]:
    """First-page latency of each query, many stored messages against few; admission beside."""
    small, large = r["small"], r["large"]
    base = f"{small['indexed']:,} stored, c={r['concurrency']}"
    rows = []
    for what in [*(k for k in small if k not in ("indexed", "admission")), "admission"]:
        flat = what in FLAT_QUERIES or what == "admission"
        for p in ("p50_ms", "p99_ms"):
            rows.append(_row("search", f"{what} {p.replace('_ms', '')} ms @{large['indexed']:,}",
                             large[what][p], small[what][p], base,
                             "<= 1.5x" if flat else "", _at_most(1.5) if flat else None,
                             on_ratio=True))
    return rows


def fairness_rows(r: Json) -> list[Row]:
    """B's send->inbox p99 under A's flood, shared queue and lane, against B alone."""
    quiet = r["quiet"]["p99_ms"]
    base = f"B alone @{r['rate_per_s']:g}/s"
    rows = [_row("fairness", "B send->inbox p99 ms, alone", quiet),
            _row("fairness", "B sends, alone", r["quiet"]["n"])]
    lanes = [("lane", f"backlog, A on a lane ({r['lane_processes']} processes)"),
             ("lane_one", "backlog, A on a lane (1 process)")]
    for key, label in [("live", "live, through the API"), ("shared", "backlog, shared queue"),
                       *lanes]:
        f = r[key]
        rows += [
            _row("fairness", f"B p99 ms during A's {r['flood']:,} flood, {label}",
                 f["b"]["p99_ms"], quiet, base, "<= 3x", _at_most(3.0), on_ratio=True),
            _row("fairness", f"B sends during A's drains, {label}", f["b_sent_during"]),
            _row("fairness", f"B p99 ms clear of the store's AOF rewrites, {label}",
                 f["b_clear_of_rewrites"]["p99_ms"], quiet, base, on_ratio=True),
            _row("fairness", f"store AOF rewrites during A's drains, {label}",
                 f["store_rewrites"]),
            _row("fairness", f"A drain s (mean of {f['floods']}), {label}", f["a_drain_s"]),
            _row("fairness", f"A drained and indexed s, {label}", f["a_indexed_s"]),
        ]
    return rows


def streams_rows(r: Json) -> list[Row]:
    """Sends and inbox reads beside many open event streams, against none open."""
    base = "no stream open"
    rows = []
    for what in ("send", "read"):
        quiet, busy = r[what]["quiet"], r[what]["streams"]
        label = f"with {r['streams']} streams"
        rows += [
            _row("streams", f"{what}s/s {label}", busy["per_s"], quiet["per_s"], base),
            _row("streams", f"{what} p99 ms {label}", busy["p99_ms"], quiet["p99_ms"], base),
        ]
    return rows


def rendering_rows(r: Json) -> list[Row]:
    """B's p99 beside A's pathological thread against B alone; A's rendered answer times."""
    base = f"B alone @{r['rate_per_s']:g}/s"
    rows = [_row("rendering", f"B {what} p99 ms beside a pathological thread",
                 r[what]["pathological"]["p99_ms"], r[what]["alone"]["p99_ms"], base,
                 "<= 1.5x", _at_most(1.5), on_ratio=True) for what in ("send", "read")]
    t = r["thread"]
    rows += [
        _row("rendering", "pathological thread, slowest answer ms", t["max_ms"],
             target="<= 2000 ms", check=_at_most(2000)),
        _row("rendering", "pathological thread, p50 answer ms", t["p50_ms"]),
        _row("rendering", "pathological thread, answers", t["answers"]),
        _row("rendering", "pathological thread, answers 304 (unchanged)", t["not_modified"]),
        _row("rendering", "crafted bodies in it", t["crafted_bodies"]),
    ]
    return rows


def mcp_rows(r: Json) -> list[Row]:
    """The API's CPU and the client's time per send over MCP, against the same over HTTP."""
    base = f"HTTP, {r['sends']} sequential sends, one every {r['period_ms']:g} ms"
    h, m = r["http"], r["mcp"]
    return [
        _row("mcp", "API CPU ms per send over MCP", m["api_cpu_ms_per_send"],
             h["api_cpu_ms_per_send"], base, "<= 1.2x", _at_most(1.2), on_ratio=True),
        _row("mcp", "client ms per send over MCP", m["client_ms_per_send"],
             h["client_ms_per_send"], base),
        _row("mcp", "sends slower than the period, of both faces",
             m["sends_over_period"] + h["sends_over_period"]),
    ]


def durability_rows(r: Json) -> list[Row]:
    """Admission at each durability level, beside `local` of the same run."""
    base = f"durability local, c={r['concurrency']}"
    local = r["local"]
    out = []
    for level in ("fsync", "replica", "replica-fsync"):
        d = r[level]
        # `replica`, the level that survives a primary's death, is held to a target.
        aimed = level == "replica"
        out += [_row("durability", f"{level}: sends/s", d["per_s"], local["per_s"], base,
                     ">= 0.5x" if aimed else "", _at_least(0.5) if aimed else None,
                     on_ratio=True),
                _row("durability", f"{level}: p50 ms", d["p50_ms"], local["p50_ms"], base),
                _row("durability", f"{level}: p99 ms", d["p99_ms"], local["p99_ms"], base,
                     "<= 50 ms" if aimed else "", _at_most(50) if aimed else None)]
    fewer, full = r.get("replica-fsync-quarter"), r["replica-fsync"]
    if fewer:  # sends/s grow with the connections: the waits of concurrent ticks overlap
        out.append(_row("durability", f"replica-fsync at c={fewer['connections']}: sends/s",
                        fewer["per_s"], full["per_s"], f"replica-fsync, c={r['concurrency']}",
                        on_ratio=True))
    return out


def channel_rows(r: Json) -> list[Row]:
    """Send to the host's channel notification, beside send to inbox, at each rate."""
    out = []
    for rate in r["rates_per_s"]:
        d = r[f"{rate:g}"]
        base = f"send -> inbox at {rate:g}/s, same run"
        out += [_row("channel", f"send -> channel notification at {rate:g}/s, p50 ms",
                     d["channel"]["p50_ms"], d["inbox"]["p50_ms"], base),
                _row("channel", f"send -> channel notification at {rate:g}/s, p99 ms",
                     d["channel"]["p99_ms"], d["inbox"]["p99_ms"], base)]
    return out


ROWS = {"admission": admission_rows, "stack": stack_rows, "delivery": delivery_rows,
        "end_to_end": end_to_end_rows, "scale": scale_rows, "search": search_rows,
        "fairness": fairness_rows, "streams": streams_rows,
        "rendering": rendering_rows, "mcp": mcp_rows, "durability": durability_rows,
        "channel": channel_rows}


def rows(results: Json) -> list[Row]:
    """Every row of the scenarios that ran."""
    return [row for name, fn in ROWS.items() if name in results for row in fn(results[name])]


def _num(v: float | None, suffix: str = "") -> str:
    if v is None or math.isnan(v):
        return ""
    text = f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"
    return text + suffix


def render(table: list[Row]) -> str:
    """The table as fixed-width text."""
    head = ("scenario", "figure", "value", "baseline", "baseline is", "ratio", "target", "")
    lines = [head]
    for r in table:
        verdict = "" if r.met is None else ("met" if r.met else "MISSED")
        lines.append((r.scenario, r.figure, _num(r.value), _num(r.baseline), r.baseline_is,
                      _num(r.ratio, "x"), r.target, verdict))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    right = {2, 3, 5}
    out = []
    for n, line in enumerate(lines):
        cells = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(line, widths, strict=True))]
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def as_json(table: list[Row]) -> list[Json]:
    """The rows as plain dicts."""
    return [asdict(r) for r in table]
