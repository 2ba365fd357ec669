"""Close names for unknown recipients: still found, at a bounded cost."""

from __future__ import annotations

import random
import string
import time

import pytest

from messaging.service import suggestions
from messaging.service.suggestions import NAMES_MAX, POOL_MAX, close_names


@pytest.fixture(autouse=True)
def _fresh_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with the process's window budget unspent."""
    monkeypatch.setattr(suggestions, "LEDGER", suggestions._Ledger())


@pytest.fixture
def roomy_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Budgets no busy machine runs out of: for tests of what is found, not how fast."""
    monkeypatch.setattr(suggestions, "BUDGET_S", 1.0)
    monkeypatch.setattr(suggestions, "WINDOW_BUDGET_S", 10.0)


def _names(count: int, alphabet: str, seed: int = 7) -> list[str]:
    rnd = random.Random(seed)
    return [f"agent-{i:04d}-" + "".join(rnd.choice(alphabet) for _ in range(49))
            for i in range(count)]


def test_a_small_project_gets_the_names_difflib_would_suggest():
    names = ["Alice", "Bob", "Carol", "Dave"]
    assert close_names(["Bobb", "Zed", "bob", "Carlo"], names) == [
        ["Bob"], [], ["Bob"], []]  # the fourth is past NAMES_MAX


@pytest.mark.parametrize("at", [6, 30, 59])
@pytest.mark.usefixtures("roomy_budget")
def test_a_slip_anywhere_in_a_long_name_finds_it_among_many(at: int):
    names = _names(600, string.ascii_lowercase + string.digits)
    wanted = names[123]
    slip = wanted[:at] + "_" + wanted[at + 1:]
    assert close_names([slip], names)[0][0] == wanted


@pytest.mark.usefixtures("roomy_budget")
def test_only_the_first_names_of_a_send_get_suggestions():
    names = _names(50, string.ascii_lowercase)
    unknown = [n[:-1] + "_" for n in names[:10]]
    found = close_names(unknown, names)
    assert [bool(f) for f in found] == [True] * NAMES_MAX + [False] * (10 - NAMES_MAX)


def test_names_that_take_long_to_compare_cost_at_most_the_budget():
    names = _names(600, "ab")  # every pair alike: difflib's slowest case
    unknown = [n[:30] + "z" + n[31:] for n in names[:100]]
    started = time.perf_counter()
    close_names(unknown, names)
    assert time.perf_counter() - started < 10 * suggestions.BUDGET_S


def test_past_the_window_budget_no_answer_gets_suggestions():
    suggestions.LEDGER.charge(suggestions.WINDOW_BUDGET_S)
    suggestions.LEDGER.window_at = time.monotonic()
    assert close_names(["Bobb"], ["Bob"]) == [[]]


def test_a_project_past_the_pool_cap_gets_no_suggestions():
    names = [f"agent-{i}" for i in range(POOL_MAX + 1)]
    assert close_names(["agent-1x"], names) == [[]]
