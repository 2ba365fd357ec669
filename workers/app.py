"""The Celery app: ``celery -A workers.app worker -Q deliver.inbox,deliver.webhook``."""

from __future__ import annotations

import sys

from celery import Celery

from messaging.config import SettingsError, get_settings
from messaging.runtime.celeryconf import celery_config

app = Celery("courier", include=["workers.tasks"])
try:
    app.conf.update(celery_config(get_settings()))
except SettingsError as exc:  # say why in one line, not with a traceback
    sys.exit(f"courier worker cannot start: {exc}")
# Beat keeps its schedule in the data dir (the Procfile's `beat -s`): under a
# Procfile runner nothing else may have created it yet.
get_settings().data_dir.mkdir(parents=True, exist_ok=True)
