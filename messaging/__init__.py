"""Courier: the admission side (API, store, service, client, CLI); no Celery worker code."""
