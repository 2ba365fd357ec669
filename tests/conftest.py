"""Markers of the whole suite, and the slow tier that `--all` adds.

`./dev test` runs every test but the slow tier, so that it answers in
minutes: the benchmark and soak smoke runs, packaging, the schema fuzz at
full size, the Redis Cluster runs, tests that start processes of their own
(stacks, API processes, `courier up`, the CLI) and tests that wait out real
timers (leases, retries, retention, unhealthy endpoints). `./dev test --all`
(what CI runs) adds them.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--all", action="store_true", default=False,
                     help="also run the slow tier (tests marked slow)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "packaging: builds and installs Courier's distributions (a minute or more)")
    config.addinivalue_line(
        "markers", "slow: the slow tier, run by `./dev test --all` (and CI)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--all"):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
        config.hook.pytest_deselected(items=slow)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter,
                            config: pytest.Config) -> None:
    if not config.getoption("--all"):
        terminalreporter.write_line(
            "slow tier left out (tests marked slow): ./dev test --all runs them")
