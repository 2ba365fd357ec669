"""A hostile client in a process of its own: sockets that send part of a request line.

``python -m tests.flood HOST PORT --sockets N [--sources A,B,...]`` keeps N
connections open, each sending ``GET /healthz HT`` and nothing more, and opens
another as soon as the server closes one, until it is sent SIGTERM; then it
prints what it saw as one JSON line: connections opened, the status of each
answer the server gave before closing, and connections that failed.
A file named by ``--ready`` is written once every socket has been opened once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections import Counter
from pathlib import Path

PARTIAL = b"GET /healthz HT"
# After a refused connect (the listen queue full, the server gone), wait this long.
RETRY_S = 0.01


async def hold(host: str, port: int, source: str, seen: Counter[str], opened: asyncio.Event,
               stop: asyncio.Event) -> None:
    """One socket, reopened each time the server closes it, until ``stop``."""
    first = True
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
        except OSError:
            seen["connect_failed"] += 1
            await asyncio.sleep(RETRY_S)
            continue
        seen["opened"] += 1
        if first:
            first = False
            opened.set()
        try:
            writer.write(PARTIAL)
            answer = await reader.read()
            status = answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/") else ""
            seen[f"status_{status or 'none'}"] += 1
        except OSError:
            seen["reset"] += 1
        finally:
            writer.close()


async def flood(args: argparse.Namespace) -> Counter[str]:
    seen: Counter[str] = Counter()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    sources = args.sources.split(",")
    opened = [asyncio.Event() for _ in range(args.sockets)]
    tasks = [asyncio.create_task(hold(args.host, args.port, sources[i % len(sources)], seen,
                                      opened[i], stop))
             for i in range(args.sockets)]
    await asyncio.gather(*(event.wait() for event in opened))
    if args.ready:
        Path(args.ready).write_text("ready\n")
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return seen


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.flood")
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("--sockets", type=int, default=300)
    parser.add_argument("--sources", default="127.0.0.1",
                        help="source addresses, comma separated, used in turn")
    parser.add_argument("--ready", default="")
    seen = asyncio.run(flood(parser.parse_args(argv)))
    print(json.dumps(dict(seen)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
