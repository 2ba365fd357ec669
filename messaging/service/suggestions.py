"""Close names for the recipients of a send that no agent has, at a bounded cost.

Suggestions are computed on the API's event loop, beside every other request,
so their cost is bounded whatever the project or the send: only the first
``NAMES_MAX`` unknown names of a send get any; each is compared with at most
``CANDIDATES_MAX`` of the project's names, those nearest it in two orders (by
name, and by name read backwards, so that a slip near either end still finds
its neighbours), nearest first, each by difflib's cheap bounds first (length,
then letters) and its ratio only past them. One answer's suggestions get at
most ``BUDGET_S`` of work, and all answers of an API process at most
``WINDOW_BUDGET_S`` in each ``WINDOW_S``: a name not done within its budget
gets no suggestions rather than a slow answer, and so does every name of a
project with more than ``POOL_MAX`` names.
"""

from __future__ import annotations

import bisect
import difflib
import itertools
import time
from collections.abc import Callable, Iterable, Sequence

# Unknown names of one send that get suggestions (request order); the others get none.
NAMES_MAX = 3
# Suggestions per name, and how close they must be (difflib's ratio).
SUGGESTIONS_MAX = 3
CUTOFF = 0.6
# Names compared with each unknown one: this many on each side of it, in each order.
NEIGHBOURS = 4
CANDIDATES_MAX = 4 * NEIGHBOURS
# A project with more names than this gets no suggestions: ordering them would cost more
# than the budget.
POOL_MAX = 4096
# Event-loop time for suggestions: one answer's, and every answer's of a process per window.
BUDGET_S = 0.005
WINDOW_S = 1.0
WINDOW_BUDGET_S = 0.05


class _Ledger:
    """The suggestion work an API process has done in the current window."""

    def __init__(self) -> None:
        self.window_at = 0.0
        self.spent_s = 0.0

    def left_s(self, now: float) -> float:
        """What this window has left (a new window starts with all of it)."""
        if now - self.window_at >= WINDOW_S:
            self.window_at, self.spent_s = now, 0.0
        return WINDOW_BUDGET_S - self.spent_s

    def charge(self, seconds: float) -> None:
        self.spent_s += seconds


LEDGER = _Ledger()


def _backwards(name: str) -> str:
    return name.casefold()[::-1]


class _Order:
    """The project's names in one order, to find a name's neighbours by bisection."""

    def __init__(self, names: Iterable[str], fold: Callable[[str], str]) -> None:
        self.fold = fold
        self.names = sorted(names, key=fold)
        self.keys = [fold(n) for n in self.names]

    def around(self, name: str) -> list[str]:
        """The ``NEIGHBOURS`` names on each side of where ``name`` would be, nearest first."""
        at = bisect.bisect_left(self.keys, self.fold(name))
        after = self.names[at:at + NEIGHBOURS]
        before = self.names[max(0, at - NEIGHBOURS):at][::-1]
        return _interleaved(after, before)


def _interleaved(*lists: list[str]) -> list[str]:
    return [n for n in itertools.chain(*itertools.zip_longest(*lists)) if n is not None]


def _closest(name: str, candidates: Iterable[str], deadline: float) -> list[str] | None:
    """``difflib.get_close_matches`` over ``candidates``; None past ``deadline``."""
    matcher = difflib.SequenceMatcher()
    matcher.set_seq2(name)
    scored = []
    for candidate in candidates:
        if time.perf_counter() > deadline:
            return None
        matcher.set_seq1(candidate)
        if (matcher.real_quick_ratio() >= CUTOFF and matcher.quick_ratio() >= CUTOFF
                and (score := matcher.ratio()) >= CUTOFF):
            scored.append((score, candidate))
    scored.sort(key=lambda pair: (-pair[0], pair[1]))
    return [candidate for _, candidate in scored[:SUGGESTIONS_MAX]]


def close_names(unknown: Sequence[str], names: Sequence[str] | None) -> list[list[str]]:
    """For each of ``unknown``, the closest of ``names`` (none past the bounds above;
    None: the project has more than ``POOL_MAX``)."""
    found: list[list[str]] = [[] for _ in unknown]
    started = time.perf_counter()
    budget_s = min(BUDGET_S, LEDGER.left_s(time.monotonic()))
    if not unknown or names is None or len(names) > POOL_MAX or budget_s <= 0:
        return found
    pool = set(names)
    orders = (_Order(pool, str.casefold), _Order(pool, _backwards))
    try:
        for i, name in enumerate(unknown[:NAMES_MAX]):
            near = dict.fromkeys(_interleaved(*(order.around(name) for order in orders)))
            closest = _closest(name, list(near)[:CANDIDATES_MAX], started + budget_s)
            if closest is None:
                break
            found[i] = closest
    finally:
        LEDGER.charge(time.perf_counter() - started)
    return found
