"""The Celery app: ``celery -A workers.app worker -Q deliver.inbox,deliver.webhook``."""

from __future__ import annotations

from celery import Celery

from messaging.config import get_settings
from messaging.runtime.celeryconf import celery_config

app = Celery("courier", include=["workers.tasks"])
app.conf.update(celery_config(get_settings()))
