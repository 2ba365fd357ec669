"""Processes whose wall clock is off by a chosen number of seconds, for real: libfaketime
preloaded (``FAKETIME=+30s``), the monotonic clock left alone, as on a host whose
clock was set wrong. Nothing here skips: without libfaketime or a C compiler, or
if a child's clock does not move, the test fails and says why.

libfaketime 0.9.10 (Debian's) breaks Python 3.11's ``time.sleep`` when it leaves
the monotonic clock alone (fixtures/skewed_clock/monotonic_sleep.c says how), so
a small library compiled here is preloaded before it.
"""

from __future__ import annotations

import glob
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from tests.stack import Proc

LIBFAKETIME = ("/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1",
               "/usr/local/lib/faketime/libfaketime.so.1")
SHIM = Path(__file__).resolve().parent / "fixtures" / "skewed_clock" / "monotonic_sleep.c"
# A child's clock, or a worker's read off its log, may differ from the shift by this much.
TOLERANCE_S = 1.5
# What a child started with the shift runs: a sleep (which must work), then its clock.
PROBE = "import time; time.sleep(0.05); print(time.time())"
# Celery's line when a worker is up: "[2026-12-06 21:55:01,123: INFO/MainProcess] ... ready."
READY = re.compile(r"^\[(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): \w+/MainProcess\] "
                   r".* ready\.$", re.MULTILINE)


def _libfaketime() -> str:
    found = sorted(path for pattern in LIBFAKETIME for path in glob.glob(pattern))
    if not found:
        pytest.fail("libfaketime is not installed (apt-get install faketime): a worker's "
                    "clock cannot be shifted")
    return found[0]


def _shim(out_dir: Path) -> str:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.fail("no C compiler (apt-get install gcc): the library that keeps "
                    "time.sleep working under libfaketime cannot be built")
    built = out_dir / "monotonic_sleep.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(built), str(SHIM), "-ldl"],
                   check=True, capture_output=True, text=True)
    return str(built)


class SkewedClocks:
    """Environments that shift a process's wall clock, checked to work before use."""

    def __init__(self, work_dir: Path) -> None:
        self.preload = f"{_shim(work_dir)}:{_libfaketime()}"

    def env(self, shift_s: int) -> dict[str, str]:
        """What shifts a process's wall clock by ``shift_s`` (its children's too)."""
        return {"LD_PRELOAD": self.preload, "FAKETIME": f"{shift_s:+d}s",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1"}

    def check(self, base_env: dict[str, str], shift_s: int) -> float:
        """Start a Python child with the shift; fail the test unless it sleeps and its
        clock is off by ``shift_s``. Returns how far off it was."""
        done = subprocess.run([sys.executable, "-c", PROBE], env={**base_env, **self.env(shift_s)},
                              capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            pytest.fail(f"a Python child with its clock shifted {shift_s:+d} s failed:\n"
                        f"{done.stderr}")
        offset = float(done.stdout) - time.time()
        if abs(offset - shift_s) > TOLERANCE_S:
            pytest.fail(f"libfaketime did not shift a child's clock by {shift_s:+d} s (it is "
                        f"{offset:+.3f} s off): a skew test would prove nothing")
        return offset


def worker_offset_s(proc: Proc) -> float:
    """How far a Celery worker's clock is from ours, by the time its log stamped "ready."
    (call it as soon as the line appeared: it is then at most a poll old)."""
    return log_offset_s(proc.log.read_text(errors="replace"), proc.tail)


def log_offset_s(log: str, tail: Callable[[], str] = str) -> float:
    """``worker_offset_s`` of a worker's log text."""
    now = time.time()
    found = READY.search(log)
    assert found, f"no ready line in the worker's log:\n{tail()}"
    return datetime.strptime(found["at"], "%Y-%m-%d %H:%M:%S,%f").timestamp() - now
