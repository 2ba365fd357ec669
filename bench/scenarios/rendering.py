"""Rendering: a thread of pathological Markdown bodies, viewed again and again, beside B.

Project B sends and reads its inbox at a steady rate (two open-loop load
generators) in windows that take turns: one with nothing else running, one
while project A's thread of crafted bodies (``![``, ``[``, ``*_``, nested
lists, a long table: each costs a backtracking parser seconds) is asked for rendered by
two viewers, each every second (four consoles' worth: the console refreshes a
thread every two seconds, sending the ``ETag`` of the thread it shows, so an
unchanged thread answers 304), and A posts a new crafted body
into it every two seconds, so the render budget is spent throughout. Turns,
because on a shared machine the background load drifts: both sides see the
same drift. Figures: B's send and read p99 beside the pathological thread
against alone, and every answer time of A's rendered thread. Every message of
both projects is checked exactly once.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from itertools import cycle
from typing import Any

import httpx

from bench import loadgen
from bench.context import Context
from bench.loadgen import LoadResult, LoadSpec
from bench.population import Population, inbox_request, populate, ring, ring_sends
from bench.stats import latency, ratio
from bench.verify import (
    SEND_FIELDS,
    Admitted,
    RunVoid,
    admitted,
    admitted_answer,
    check_exactly_once,
    wait_delivered,
)
from messaging.client import CourierClient

B_AGENTS = 4
B_CONNECTIONS = 8
VIEWERS = 2
VIEW_EVERY_S = 1.0
POST_EVERY_S = 2.0
# Each crafted body's size: every shape costs a backtracking parser seconds at this size.
CRAFTED_CHARS = 50_000
# A body the budget could not render, as it starts in the JSON answer.
UNRENDERED_JSON = b'<pre class=\\"unrendered\\">'


def crafted(shape: str, chars: int = CRAFTED_CHARS) -> str:
    """A body of about ``chars`` characters that is slow to parse, of one shape."""
    if shape == "nested lists":
        out: list[str] = []
        size = depth = 0
        while size < chars:
            out.append("  " * (depth % 400) + "- x\n")
            size, depth = size + len(out[-1]), depth + 1
        return "".join(out)
    if shape == "long table":
        columns = 1000
        row = "|" + "b|" * columns + "\n"
        head = "|" + "a|" * columns + "\n|" + "-|" * columns + "\n"
        return head + row * max(1, (chars - len(head)) // len(row))
    unit = {"images": "![", "links": "[", "emphasis": "*_"}[shape]
    return unit * (chars // len(unit))


SHAPES = ("images", "links", "emphasis", "nested lists", "long table")


class Viewers:
    """Console viewers asking for one thread rendered, and A posting crafted bodies into it."""

    def __init__(self, url: str, pop: Population, thread_id: str, numbered_from: int) -> None:
        self.url, self.pop, self.thread_id = url, pop, thread_id
        self.numbered_from = numbered_from
        self.answers_s: list[float] = []
        self.unrendered = 0
        self.not_modified = 0  # answers 304: the thread had not changed since the last view
        self.posted: list[Admitted] = []
        self.failures: list[str] = []
        self.stopping = threading.Event()
        self._threads = [threading.Thread(target=self._view, daemon=True)
                         for _ in range(VIEWERS)]
        self._threads.append(threading.Thread(target=self._post, daemon=True))

    def __enter__(self) -> Viewers:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for t in self._threads:
            t.join(30)

    def _view(self) -> None:
        headers = {"Authorization": f"Bearer {self.pop.agent('Bob').token}"}
        etag = ""  # as the console does: the thread it shows is sent again only if changed
        with httpx.Client(base_url=self.url, headers=headers, timeout=60) as client:
            while not self.stopping.is_set():
                started = time.monotonic()
                try:
                    r = client.get(f"/v1/threads/{self.thread_id}/rendered",
                                   headers={"If-None-Match": etag} if etag else {})
                except httpx.HTTPError as e:
                    self.failures.append(f"rendered thread: {type(e).__name__}")
                    return
                took_s = time.monotonic() - started
                if r.status_code == 304:
                    self.not_modified += 1
                elif r.status_code == 200:
                    etag = r.headers.get("ETag", "")
                    # Counted in the raw answer: parsing megabytes here would take the CPU
                    # this machine's API needs.
                    self.unrendered = r.content.count(UNRENDERED_JSON)
                else:
                    self.failures.append(f"rendered thread answered {r.status_code}")
                    return
                self.answers_s.append(took_s)
                self.stopping.wait(max(0.0, VIEW_EVERY_S - took_s))

    def _post(self) -> None:
        with CourierClient(self.url, self.pop.agent("Alice").token) as alice:
            for n, shape in enumerate(cycle(SHAPES), start=self.numbered_from):
                if self.stopping.wait(POST_EVERY_S):
                    return
                # Each new body differs, so none is already rendered.
                body = crafted(shape) + f"\n\n{n}"
                sent = alice.send(["Bob"], f"crafted {shape} {n}", body,
                                  thread_id=self.thread_id)
                self.posted.append(admitted_answer(sent))


def _b_load(url: str, pop: Population, ctx: Context, what: str) -> tuple[LoadResult, LoadResult]:
    """B's sends and inbox reads for one turn, both at once, each open loop at the rate."""
    s = ctx.sizes
    ctx.say(f"rendering: B sends and reads, {what}")
    turn_s = s.render_s / s.render_turns
    specs = [LoadSpec(url, ring_sends(pop), B_CONNECTIONS, turn_s, s.warmup_s,
                      rate_per_s=s.render_rate_per_s, keep=SEND_FIELDS),
             LoadSpec(url, [inbox_request(a, 0, 10) for a in pop.agents], B_CONNECTIONS,
                      turn_s, s.warmup_s, rate_per_s=s.render_rate_per_s)]
    results: dict[int, LoadResult] = {}
    failed: list[BaseException] = []

    def one(i: int) -> None:
        try:
            results[i] = loadgen.run(specs[i])
        except BaseException as e:  # noqa: BLE001 - raised below, in the caller's thread
            failed.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        raise failed[0]
    sent, read = results[0], results[1]
    if read.errors or any(not st.startswith("2") for st in read.statuses):
        raise RunVoid(f"rendering: B's reads {what}: {read.statuses}, {read.errors[:1]}")
    return sent, read


def run(ctx: Context) -> dict[str, Any]:
    """B's p99 without and with A's pathological thread; A's rendered answer times."""
    s = ctx.sizes
    with ctx.cluster("rendering") as c:
        url = c.start_api_and_worker()
        b = populate(url, c.operator_token, ring(B_AGENTS))
        a = populate(url, c.operator_token, ["Alice", "Bob"])
        with CourierClient(url, a.agent("Alice").token) as alice:
            first = alice.send(["Bob"], "crafted bodies follow", "Bodies follow.")
            a_sent = [admitted_answer(first)]
            for shape in SHAPES:
                sent = alice.send(["Bob"], f"crafted {shape}", crafted(shape),
                                  thread_id=first["thread_id"])
                a_sent.append(admitted_answer(sent))
        loads: dict[str, list[tuple[LoadResult, LoadResult]]] = {"alone": [], "beside": []}
        answers_s: list[float] = []
        unrendered = not_modified = 0
        for turn in range(s.render_turns):
            loads["alone"].append(_b_load(url, b, ctx, f"alone ({turn + 1})"))
            with Viewers(url, a, first["thread_id"], len(a_sent)) as viewers:
                loads["beside"].append(_b_load(url, b, ctx, f"beside the pathological "
                                                            f"thread ({turn + 1})"))
            if viewers.failures:
                raise RunVoid(f"rendering: {viewers.failures[:3]}")
            a_sent += viewers.posted
            answers_s += viewers.answers_s
            unrendered = viewers.unrendered
            not_modified += viewers.not_modified
        b_sent = [m for side in loads.values() for sent, _ in side
                  for m in admitted(sent, "rendering")]
        with c.redis() as r:
            for pop, sent in ((b, b_sent), (a, a_sent)):
                wait_delivered(r, pop.project_id, sent, s.drain_timeout_s, "rendering")
                inboxes = Counter(aid for m in sent for _, aid in m.deliveries)
                check_exactly_once(r, pop.project_id, sent, "rendering", dict(inboxes))
    answers_ms = [t * 1000 for t in answers_s]
    out: dict[str, Any] = {"rate_per_s": s.render_rate_per_s, "turns": s.render_turns}
    for i, what in enumerate(("send", "read")):
        alone = [ms for pair in loads["alone"] for ms in pair[i].latencies_ms]
        beside = [ms for pair in loads["beside"] for ms in pair[i].latencies_ms]
        out[what] = {"alone": latency(alone), "pathological": latency(beside)}
        out[what]["p99_ratio"] = round(ratio(out[what]["pathological"]["p99_ms"],
                                             out[what]["alone"]["p99_ms"]), 3)
    out["thread"] = {"answers": len(answers_ms), "not_modified": not_modified,
                     **latency(answers_ms),
                     "max_ms": round(max(answers_ms, default=0.0), 1),
                     "crafted_bodies": len(a_sent) - 1,
                     "shown_as_text_at_the_end": unrendered}
    return out
