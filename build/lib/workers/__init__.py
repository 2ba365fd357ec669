"""Courier's Celery side: the app, delivery tasks, the sweeper and transports."""
