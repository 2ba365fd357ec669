"""Where the time goes: py-spy attached to a process while a scenario loads it.

``python -m bench --profile`` records the API under admission load and the
worker draining the backlog. Each profile is written as collapsed stacks
(``<name>.txt``, for flamegraph tools and speedscope) beside a summary of the
functions with the most samples, self and inclusive (``<name>.top.txt``).
Needs ``py-spy`` (the ``bench`` extra) and the right to ptrace the process.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.procs import BenchError, Proc

RATE_HZ = 250
TOP = 25
STOP_TIMEOUT_S = 30.0


def py_spy() -> str:
    """The py-spy command, from this interpreter's environment first.

    Raises:
        BenchError: py-spy is not installed.
    """
    venv_bin = str(Path(sys.executable).parent)
    exe = shutil.which("py-spy", path=os.pathsep.join([venv_bin, os.environ.get("PATH", "")]))
    if exe is None:
        raise BenchError("--profile needs py-spy: pip install -e '.[bench]'")
    return exe


@contextmanager
def profiled(proc: Proc, out_dir: Path | None, name: str) -> Iterator[None]:
    """Record ``proc`` (and its children) with py-spy while inside; nothing if ``out_dir`` is None.

    Raises:
        BenchError: py-spy is not installed.
    """
    if out_dir is None:
        yield
        return
    exe = py_spy()
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = out_dir / f"{name}.txt"
    spy = subprocess.Popen([exe, "record", "--pid", str(proc.pid), "--subprocesses",
                            "--rate", str(RATE_HZ), "--format", "raw", "--output", str(raw),
                            "--nonblocking"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        try:
            spy.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            spy.kill()
    if raw.exists():
        (out_dir / f"{name}.top.txt").write_text(summary(raw))


def summary(raw: Path, top: int = TOP) -> str:
    """The functions with the most samples in collapsed stacks, self and inclusive."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        total += n
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    lines = [f"{total} samples"]
    for title, counter in (("self", own), ("inclusive", inclusive)):
        lines.append(f"\n{title}:")
        lines += [f"{100 * n / max(total, 1):6.1f}%  {frame}" for frame, n in
                  counter.most_common(top)]
    return "\n".join(lines) + "\n"
