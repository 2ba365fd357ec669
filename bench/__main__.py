"""``python -m bench [--quick] [--only a,b] [--keep]``: run, print the table, write the JSON.

Exit codes: 0 the run is valid (targets may be missed; the table says so),
2 the harness itself failed (a process died, a timeout), 3 the run is void (a
message was not delivered exactly once: no figures are printed or written).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from bench.context import Context
from bench.procs import ROOT, BenchError
from bench.profile import py_spy
from bench.report import as_json, render, rows
from bench.scenarios import SCENARIOS
from bench.sizes import FULL, QUICK
from bench.verify import RunVoid

EXIT_HARNESS = 2
EXIT_VOID = 3
RESULTS_DIR = Path(os.path.abspath(__file__)).parent / "results"


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke sizes: seconds, not minutes")
    p.add_argument("--only", default="", help=f"comma list of {', '.join(SCENARIOS)}")
    p.add_argument("--scale-large", type=int, help="stored messages of the large scale point")
    p.add_argument("--backlog", type=int, help="deliveries of the delivery scenario")
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    p.add_argument("--keep", action="store_true", help="keep the temp dir with process logs")
    p.add_argument("--api-processes", type=int, default=None,
                   help="API processes of each server, Courier's and the baseline's "
                        "(default: the machine's cores, as COURIER_API_PROCESSES)")
    p.add_argument("--profile", action="store_true",
                   help="py-spy the API under admission load and the worker draining")
    return p.parse_args(argv)


def revision() -> dict[str, Any]:
    """The commit measured, and whether the tree had changes (None outside a checkout)."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                                  timeout=10, check=False)
        except OSError:
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--", "messaging", "workers")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise BenchError("stopped by SIGTERM")


def main(argv: list[str] | None = None) -> int:
    """Run the scenarios; print and write the results."""
    args = parse(sys.argv[1:] if argv is None else argv)
    sizes = QUICK if args.quick else FULL
    if args.scale_large:
        sizes = replace(sizes, scale_large=args.scale_large)
    if args.backlog:
        sizes = replace(sizes, backlog=args.backlog)
    names = [n for n in args.only.split(",") if n] or list(SCENARIOS)
    unknown = set(names) - set(SCENARIOS)
    if unknown:
        print(f"unknown scenarios: {', '.join(sorted(unknown))}", file=sys.stderr)
        return EXIT_HARNESS
    # A SIGTERM unwinds like an error, so every cluster stops its processes and store.
    signal.signal(signal.SIGTERM, _terminated)
    stamp = datetime.now(tz=UTC).strftime("%Y%m%dT%H%M%SZ")
    workdir = Path(tempfile.mkdtemp(prefix=f"courier-bench-{stamp}-"))
    profile_dir = args.results_dir / f"{stamp}-profiles" if args.profile else None
    if args.profile:
        try:
            py_spy()
        except BenchError as exc:
            print(exc, file=sys.stderr)
            return EXIT_HARNESS
    ctx = Context(sizes, workdir, keep=args.keep, profile_dir=profile_dir,
                  api_processes=args.api_processes)
    results: dict[str, Any] = {}
    try:
        for name in names:
            results[name] = SCENARIOS[name](ctx)
    except RunVoid as exc:
        print(f"RUN VOID, no figures: {exc}", file=sys.stderr)
        print(f"process logs kept in {workdir}", file=sys.stderr)
        return EXIT_VOID
    except BenchError as exc:
        print(f"harness failed: {exc}", file=sys.stderr)
        print(f"process logs kept in {workdir}", file=sys.stderr)
        return EXIT_HARNESS
    table = rows(results)
    print(render(table))
    doc = {
        "started_at": stamp,
        "elapsed_s": round(time.monotonic() - ctx.started, 1),
        "quick": args.quick,
        "api_processes": args.api_processes or os.cpu_count(),
        "revision": revision(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "sizes": asdict(sizes),
        "scenarios": results,
        "table": as_json(table),
    }
    args.results_dir.mkdir(parents=True, exist_ok=True)
    out = args.results_dir / f"{stamp}.json"
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nwritten to {out}")
    if args.keep:
        print(f"process logs kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
