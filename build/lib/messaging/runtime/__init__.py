"""Processes and plumbing: publishing, Celery settings, the embedded store, courier up."""
