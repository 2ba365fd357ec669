"""The delivery workers: one Celery worker per installed transport, never listed by hand.

``python -m messaging.launch.workerpool`` (the Procfile's ``workers``) starts
one worker per transport installed under ``courier.transports``, built-in or
a plug-in distribution, and supervises them: output prefixed per worker,
SIGINT/SIGTERM passed on as a warm shutdown, and when one worker dies the
others are stopped and the pool exits 1, so its runner (honcho, Compose,
``courier up``) sees it. Each worker takes its queue, concurrency and
prefetch from its transport's declaration (``COURIER_WORKER_CONCURRENCY``
sets the processes of every worker instead); the sweeper's queue rides with
the inbox worker.

``--lane NAME`` starts the same workers for one lane's queues
(``deliver.<kind>.<NAME>``) and nothing else: the sweeper stays with the
shared workers. ``courier up --lane NAME`` runs it.
"""

from __future__ import annotations

import argparse
import os
import sys

from pydantic import ValidationError

from messaging import transports
from messaging.config import Settings, get_settings
from messaging.models import LaneIn
from messaging.runtime import children, logs
from messaging.runtime.celeryconf import SWEEP_QUEUE
from messaging.transports import policy

CELERY_APP = "workers.app"
LOG_LEVEL = "INFO"
# Cheap, batched work beside the sweeper's short scripts; the webhook worker
# spends its time waiting on receivers and should not hold the sweep back.
SWEEP_TRANSPORT = "inbox"
POOL_NAME = "workers"
PROCESS_PREFIX = "worker-"


class LaneNameError(ValueError):
    """A lane name Courier would refuse (1-32 of a-z, 0-9, -)."""


def check_lane(name: str) -> str:
    """``name`` if it is a valid lane name.

    Raises:
        LaneNameError: it is not.
    """
    try:
        return LaneIn(lane=name).lane
    except ValidationError:
        raise LaneNameError(f"bad lane name {name!r}: use 1-32 of a-z, 0-9, -") from None


def node_name(kind: str, lane: str = "") -> str:
    """The worker's Celery node name: ``inbox@%h``, or ``inbox.<lane>@%h`` on a lane."""
    return f"{kind}.{lane}@%h" if lane else f"{kind}@%h"


def worker_argv(kind: str, lane: str = "", sweep: bool = False,
                concurrency: int | None = None, settings: Settings | None = None) -> list[str]:
    """The command line of the worker of one installed transport (on a lane, the lane's),
    with ``concurrency`` processes or, if None, as many as the kind's policy says."""
    transports.installed()[kind]  # KeyError: not installed
    chosen = policy.policy(kind, settings or get_settings())
    queues = [policy.queue(kind, lane), *([SWEEP_QUEUE] if sweep else [])]
    return [sys.executable, "-m", "celery", "-A", CELERY_APP, "worker", "-E",
            "-Q", ",".join(queues), "-n", node_name(kind, lane),
            "-c", str(concurrency or chosen.concurrency),
            "--prefetch-multiplier", str(chosen.prefetch),
            "--loglevel", LOG_LEVEL]


def commands(lane: str = "", concurrency: int | None = None,
             settings: Settings | None = None) -> dict[str, list[str]]:
    """``worker-<kind>``: its command line, for every installed transport.

    Without a lane one of them also serves the sweeper's queue (the inbox
    worker, or the first one if a deployment had no inbox transport).
    """
    kinds = list(transports.installed())
    sweeper = "" if lane else (SWEEP_TRANSPORT if SWEEP_TRANSPORT in kinds else kinds[0])
    return {PROCESS_PREFIX + kind: worker_argv(kind, lane, kind == sweeper, concurrency, settings)
            for kind in kinds}


def exec_worker(name: str) -> None:
    """Replace this process with one worker of the pool, ``worker-<kind>`` (``courier run``).

    Raises:
        KeyError: no transport of that kind is installed.
    """
    words = commands(concurrency=get_settings().worker_concurrency)[name]
    os.execvp(words[0], words)


def run(lane: str = "") -> int:
    """Run the pool until SIGINT or SIGTERM (0) or one of its workers dies (1)."""
    settings = get_settings()
    table = commands(lane, settings.worker_concurrency, settings)
    out = children.Output([POOL_NAME, *table], settings.log_format == logs.JSON)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    served = ", ".join(q for argv in table.values() for q in argv[argv.index("-Q") + 1].split(","))
    out.line(POOL_NAME, f"serving {served}")
    with children.stop_signals() as stopping:
        return children.supervise(table, env, out, stopping, POOL_NAME)


def main(argv: list[str] | None = None) -> int:
    """``python -m messaging.launch.workerpool [--lane NAME]``."""
    parser = argparse.ArgumentParser(prog="python -m messaging.launch.workerpool",
                                     description="One Celery worker per installed transport.")
    parser.add_argument("--lane", default="", help="serve this lane's queues only")
    args = parser.parse_args(argv)
    try:
        lane = check_lane(args.lane) if args.lane else ""
    except LaneNameError as exc:
        parser.error(str(exc))
    return run(lane)


if __name__ == "__main__":
    sys.exit(main())
