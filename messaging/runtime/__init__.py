"""What the API and worker processes run on: publishing to the broker, Celery's
settings, logs, the data version check, the rendering pool, child processes."""
