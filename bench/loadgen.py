"""The HTTP load generator: keep-alive HTTP/1.1 connections on one event loop, in its own process.

:func:`run` starts ``python -m bench.loadgen SPEC OUT`` and reads its answer,
so the load never shares a process (or a GIL) with what it measures. It speaks
raw HTTP/1.1 over asyncio (uvloop and httptools, which uvicorn already
brings), a few microseconds per request, so the ceiling it reports is the
server's, not its own.

Closed loop: ``concurrency`` connections each send their next request as soon
as the last one is answered, for ``duration_s`` (after ``warmup_s``) or until
``count`` requests. Open loop: requests leave at ``rate_per_s`` whatever the
answers, on a pool of ``concurrency`` connections, and each latency counts
from the request's scheduled time, so a stalled server cannot hide its stall.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httptools

from bench.procs import ROOT, BenchError

Json = dict[str, Any]
CONNECT_TIMEOUT_S = 5.0
# How long the parent waits for a run beyond its planned length.
RUN_SLACK_S = 120.0


@dataclass
class Request:
    """One request to send: a method, a path, headers, a body."""

    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""


@dataclass
class LoadSpec:
    """What to send, how hard and for how long."""

    url: str
    requests: list[Request]
    concurrency: int = 32
    duration_s: float = 10.0
    warmup_s: float = 1.0
    count: int = 0  # closed loop: stop after this many requests (0: no limit)
    rate_per_s: float = 0.0  # > 0: open loop at this rate
    keep: list[str] = field(default_factory=list)  # top-level JSON fields kept per answer


@dataclass
class LoadResult:
    """What came back: counts, latencies of the measured phase, kept answers."""

    sent: int
    statuses: dict[str, int]
    measured: int
    elapsed_s: float
    latencies_ms: list[float]
    # Per request (warm-up included): [scheduled or sent wall time in us, status, kept fields].
    answers: list[list[Any]]
    errors: list[str]

    @property
    def per_s(self) -> float:
        """Answers per second in the measured phase."""
        return self.measured / self.elapsed_s if self.elapsed_s > 0 else 0.0


def run(spec: LoadSpec) -> LoadResult:
    """Run the load in a child process and return its result.

    Raises:
        BenchError: the load generator failed.
    """
    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        spec_path.write_text(json.dumps(asdict(spec)))
        planned_s = spec.warmup_s + spec.duration_s
        done = subprocess.run([sys.executable, "-m", "bench.loadgen", str(spec_path),
                               str(out_path)], cwd=ROOT, capture_output=True, text=True,
                              timeout=planned_s + RUN_SLACK_S, check=False)
        if done.returncode != 0:
            raise BenchError(f"load generator failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return LoadResult(**json.loads(out_path.read_text()))


# The child's side.


class Connection(asyncio.Protocol):
    """One keep-alive connection: one request in flight at a time."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.chunks: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionResetError("closed by the server"))

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        body, self.chunks = b"".join(self.chunks), []
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result((self.parser.get_status_code(), body))

    def _fail(self, exc: Exception) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)

    @property
    def usable(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    async def exchange(self, raw: bytes) -> tuple[int, bytes]:
        """Send one request, wait for its whole answer."""
        if self.transport is None:
            raise ConnectionError("not connected")
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(raw)
        return await self.waiter


class Generator:
    """The child's run: connections, the loop of requests, the record of answers."""

    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec
        parts = urlsplit(spec.url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.raws = [self._raw(r) for r in spec.requests]
        self.statuses: dict[str, int] = {}
        self.latencies: list[float] = []
        self.answers: list[tuple[int, int, bytes]] = []
        self.errors: list[str] = []
        self.sent = 0

    def _raw(self, r: Request) -> bytes:
        body = r.body.encode()
        head = [f"{r.method} {r.path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        head += [f"{k}: {v}" for k, v in r.headers.items()]
        if body or r.method in ("POST", "PUT"):
            head.append(f"Content-Length: {len(body)}")
        return ("\r\n".join(head) + "\r\n\r\n").encode() + body

    async def connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(
            loop.create_connection(Connection, self.host, self.port), CONNECT_TIMEOUT_S)
        return conn

    async def send(self, conn: Connection, i: int, wall_us: int) -> tuple[Connection, bool]:
        """Request ``i`` on ``conn`` (reconnecting a closed one); the connection, success."""
        self.sent += 1
        try:
            if not conn.usable:
                conn = await self.connect()
            status, body = await conn.exchange(self.raws[i % len(self.raws)])
        except (TimeoutError, OSError, httptools.HttpParserError) as exc:
            self.errors.append(f"request {i}: {type(exc).__name__}: {exc}")
            return await self.connect(), False
        self.statuses[str(status)] = self.statuses.get(str(status), 0) + 1
        self.answers.append((wall_us, status, body))
        return conn, True

    async def closed_loop(self) -> tuple[int, float]:
        spec = self.spec
        conns = [await self.connect() for _ in range(spec.concurrency)]
        start = time.perf_counter()
        measure_from = start + spec.warmup_s
        end = measure_from + spec.duration_s if spec.duration_s > 0 else float("inf")
        limit = spec.count or float("inf")
        counter = iter(range(10**12))
        last_done = measure_from

        async def user(conn: Connection) -> None:
            nonlocal last_done
            while True:
                t0 = time.perf_counter()
                if t0 >= end:
                    return
                i = next(counter)
                if i >= limit:
                    return
                conn, ok = await self.send(conn, i, time.time_ns() // 1000)
                t1 = time.perf_counter()
                if ok and t0 >= measure_from:
                    self.latencies.append((t1 - t0) * 1000)
                    last_done = max(last_done, t1)

        await asyncio.gather(*(user(c) for c in conns))
        return len(self.latencies), last_done - measure_from

    async def open_loop(self) -> tuple[int, float]:
        spec = self.spec
        pool: asyncio.Queue[Connection] = asyncio.Queue()
        for _ in range(spec.concurrency):
            pool.put_nowait(await self.connect())
        total = int(spec.rate_per_s * (spec.warmup_s + spec.duration_s))
        interval = 1.0 / spec.rate_per_s
        start = time.perf_counter() + 0.01
        wall0_us = time.time_ns() // 1000 + int((start - time.perf_counter()) * 1e6)
        measure_from = start + spec.warmup_s
        last_done = measure_from

        async def one(i: int, due: float) -> None:
            nonlocal last_done
            conn = await pool.get()
            conn, ok = await self.send(conn, i, wall0_us + int((due - start) * 1e6))
            pool.put_nowait(conn)
            done = time.perf_counter()
            if ok and due >= measure_from:
                self.latencies.append((done - due) * 1000)
                last_done = max(last_done, done)

        tasks = []
        for i in range(total):
            due = start + i * interval
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i, due)))
        await asyncio.gather(*tasks)
        return len(self.latencies), last_done - measure_from

    def result(self, measured: int, elapsed_s: float) -> LoadResult:
        answers = []
        for wall_us, status, body in self.answers:
            kept: Json = {}
            if self.spec.keep and body:
                try:
                    parsed = json.loads(body)
                    kept = {k: parsed.get(k) for k in self.spec.keep}
                except ValueError:
                    kept = {"unparsed": body[:200].decode(errors="replace")}
            answers.append([wall_us, status, kept])
        return LoadResult(self.sent, self.statuses, measured, elapsed_s,
                          sorted(self.latencies), answers, self.errors[:50])


def main(spec_path: str, out_path: str) -> int:
    """Run the spec in ``spec_path``; write the result to ``out_path``."""
    raw = json.loads(Path(spec_path).read_text())
    raw["requests"] = [Request(**r) for r in raw["requests"]]
    gen = Generator(LoadSpec(**raw))
    run_loop = gen.open_loop if gen.spec.rate_per_s > 0 else gen.closed_loop
    try:
        import uvloop
    except ImportError:  # plain asyncio still measures, a little less sharply
        measured, elapsed_s = asyncio.run(run_loop())
    else:
        measured, elapsed_s = uvloop.run(run_loop())
    Path(out_path).write_text(json.dumps(asdict(gen.result(measured, elapsed_s))))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
