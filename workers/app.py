"""The Celery app: ``celery -A workers.app worker -Q deliver.inbox,deliver.webhook``."""

from __future__ import annotations

import gc
import sys
from typing import Any

from celery import Celery, signals

from messaging.config import OperatorTokenMissing, SettingsError, get_settings
from messaging.runtime.celeryconf import celery_config
from messaging.runtime.dataversion import check_at_start
from messaging.runtime.logs import quiet_per_event_logs

app = Celery("courier", include=["workers.tasks", "workers.retention"])
try:
    app.conf.update(celery_config(get_settings()))
except SettingsError as exc:  # say why in one line, not with a traceback
    sys.exit(f"courier worker cannot start: {exc}")
# Beat keeps its schedule in the data dir (the Procfile's `beat -s`): under a
# Procfile runner nothing else may have created it yet.
get_settings().data_dir.mkdir(parents=True, exist_ok=True)


def _quiet_logs(**_: Any) -> None:
    """Per-task lines only with COURIER_LOG_TASKS (workers and beat alike)."""
    quiet_per_event_logs(get_settings())


signals.after_setup_logger.connect(_quiet_logs, weak=False)


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
    """A worker starts only on data of a layout this code knows."""
    check_at_start(get_settings().store_url, "worker")


def _check_beat(**_: Any) -> None:
    """Beat starts only on data of a layout this code knows."""
    check_at_start(get_settings().store_url, "beat")


signals.worker_init.connect(_check_worker, weak=False)
signals.beat_init.connect(_check_beat, weak=False)
signals.celeryd_after_setup.connect(_freeze_loaded, weak=False)
signals.worker_ready.connect(_freeze_loaded, weak=False)
