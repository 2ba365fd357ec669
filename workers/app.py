"""The Celery app: ``celery -A workers.app worker -Q deliver.inbox,deliver.webhook``."""

from __future__ import annotations

import gc
import logging
import os
import sys
import warnings
from typing import Any

from celery import Celery, signals
from celery.apps import worker as celery_worker
from celery.exceptions import CPendingDeprecationWarning

from messaging.config import OperatorTokenMissing, SettingsError, get_settings
from messaging.runtime import logs
from messaging.runtime.celeryconf import celery_config
from messaging.runtime.dataversion import check_at_start
from messaging.store.durability import Durability, shortfalls

# Whatever a worker, beat or Flower writes (beat's schedule, the archive) is
# its owner's alone, like the rest of the data dir.
os.umask(0o077)
app = Celery("courier", include=["workers.tasks", "workers.retention"])
try:
    app.conf.update(celery_config(get_settings()))
except SettingsError as exc:  # say why in one line, not with a traceback
    sys.exit(f"courier worker cannot start: {exc}")
# Beat keeps its schedule in the data dir (the Procfile's `beat -s`): under a
# Procfile runner nothing else may have created it yet.
get_settings().data_dir.mkdir(parents=True, exist_ok=True)


def process_name(argv: list[str]) -> str:
    """How this Celery process names itself in its logs: beat, or worker-<node's kind>."""
    if "beat" in argv:
        return "beat"
    node = argv[argv.index("-n") + 1] if "-n" in argv[:-1] else ""
    return f"worker-{node.partition('@')[0]}" if node else "worker"


def _setup_logs(**_: Any) -> None:
    """The deployment's log format and outage lines; per-task lines only with
    COURIER_LOG_TASKS (workers and beat alike)."""
    logs.setup(process_name(sys.argv), get_settings())


signals.after_setup_logger.connect(_setup_logs, weak=False)
signals.after_setup_task_logger.connect(_setup_logs, weak=False)


def _worker_set_up(sender: Any = None, instance: Any = None, **_: Any) -> None:
    """Once the worker's logging is set up: no text banner with JSON logs, and no
    warning per lost broker connection."""
    if get_settings().log_format == logs.JSON and instance is not None:
        instance.quiet = True
    # Written at every lost connection, about a default Courier keeps on purpose:
    # a running task goes on, and one whose ack was lost runs again, harmlessly
    # (its dispatch lease). Celery's log setup lets it through: filtered after it.
    warnings.filterwarnings("ignore", message=r"\s*In Celery 5.1 we introduced",
                            category=CPendingDeprecationWarning)


signals.celeryd_after_setup.connect(_worker_set_up, weak=False)


def _beat_started(sender: Any = None, **_: Any) -> None:
    """One line that beat runs (its banner is left out with JSON logs)."""
    settings = get_settings()
    logging.getLogger("courier.beat").info(
        "beat started: the sweeper every %g s, retention every %g s",
        settings.sweep_interval_s, settings.retention_interval_s)


signals.beat_init.connect(_beat_started, weak=False)
if get_settings().log_format == logs.JSON:
    # Until Celery sets up its own handlers (replacing this one), what is said
    # early, warnings included, is JSON too.
    logging.captureWarnings(True)
    logs.setup(process_name(sys.argv), get_settings())
    # The worker's shutdown lines, written from its signal handlers.
    celery_worker.safe_say = logs.json_say(process_name(sys.argv), "celery.worker")
    _beat = app.Beat

    def _quiet_beat(*args: Any, **kwargs: Any) -> Any:
        """Beat without its text banner: with JSON logs every line is an object."""
        return _beat(*args, **{**kwargs, "quiet": True})

    app.Beat = _quiet_beat


def _beat_needs_the_token(**_: Any) -> None:
    """Beat, like every server process, starts only where the deployment's operator
    token is (``courier init`` or ``courier up`` made it)."""
    try:
        get_settings().require_operator_token()
    except OperatorTokenMissing as exc:
        sys.exit(f"courier beat cannot start: {exc}")


signals.beat_init.connect(_beat_needs_the_token, weak=False)


def _freeze_loaded(**_: Any) -> None:
    """Keep what is loaded by now out of every later collection.

    Once before the pool forks (its processes inherit it, and their collections
    skip it) and again once the worker is ready. Without it a full collection
    in the worker's main process walks everything loaded at start, and tickets
    wait meanwhile.
    """
    gc.collect()
    gc.freeze()


def _check_worker(**_: Any) -> None:
    """A worker starts only on data of a layout this code knows, and says so when
    the store cannot keep the outcomes it records at their durability level."""
    settings = get_settings()
    check_at_start(settings.store_url, "worker")
    for shortfall in shortfalls(settings.store_url, Durability.of(settings)):
        logging.getLogger("courier.worker").warning("%s", shortfall)


def _check_beat(**_: Any) -> None:
    """Beat starts only on data of a layout this code knows."""
    check_at_start(get_settings().store_url, "beat")


signals.worker_init.connect(_check_worker, weak=False)
signals.beat_init.connect(_check_beat, weak=False)
signals.celeryd_after_setup.connect(_freeze_loaded, weak=False)
signals.worker_ready.connect(_freeze_loaded, weak=False)
