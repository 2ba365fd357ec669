"""Courier: the admission side (API, store, service, client, CLI); no Celery worker code."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("agent-courier")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
