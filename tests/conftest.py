"""Markers of the whole suite."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "packaging: builds and installs Courier's distributions (a minute or more)")
