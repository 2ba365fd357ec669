"""Names that read as another: what shows of a name, with confusables folded.

Two names read alike when their reading keys are equal. The key of a text is
reached by repeating, until nothing changes:

1. NFKC;
2. every code point that shows nothing removed: Unicode's
   ``Default_Ignorable_Code_Point`` (DerivedCoreProperties.txt: variation
   selectors, the combining grapheme joiner, Mongolian free variation
   selectors, Hangul fillers, zero-width characters...; the ``regex``
   package carries the property for its Unicode version) and the braille
   blank U+2800, which is no white space but shows none;
3. every confusable folded to its Latin prototype by Unicode's confusables
   data (UTS #39 ``confusables.txt``, as the ``disarm`` package bundles it:
   ``disarm.CONFUSABLES_VERSION``, 17.0.0 today), so that ``ʜ``, ``ᴍ``,
   Cyrillic ``а`` or Greek ``Η`` read as ``h``, ``m``, ``a`` and ``H``;
4. accents removed (NFD without combining marks), case folded;
5. the rows of the same data among ASCII letters and digits, which a fold to
   Latin leaves alone: ``m`` reads as ``rn``; ``l``, ``I`` (``i`` once case
   is folded), ``1`` and ``|`` alike; ``0`` as ``o``.

The standard library's ``unicodedata`` has neither the property nor the data.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from functools import cache

import disarm
import regex

# Code points that show nothing: Default_Ignorable_Code_Point, and the braille blank.
INVISIBLE = regex.compile(r"[\p{Default_Ignorable_Code_Point}\u2800]+")
# confusables.txt's rows from ASCII to ASCII, case folded: 0049 I, 006C l, 0031 1 and
# 007C | share one prototype; 0030 0 reads as O; 006D m as 0072 006E rn.
ASCII_ROWS = str.maketrans({"i": "l", "1": "l", "|": "l", "0": "o"})
ASCII_PAIRS = (("m", "rn"),)
# A round can expose what the one before could not fold (a capital whose row is on its
# lower case): rounds go on until nothing changes, at most this many.
ROUNDS_MAX = 4


def reading_key(text: str) -> str:
    """What ``text`` reads as: equal keys read alike (see the module's docstring)."""
    key = text
    for _ in range(ROUNDS_MAX):
        step = INVISIBLE.sub("", unicodedata.normalize("NFKC", key))
        step = disarm.normalize_confusables(step)
        step = "".join(ch for ch in unicodedata.normalize("NFD", step)
                       if not unicodedata.combining(ch))
        step = step.casefold().translate(ASCII_ROWS)
        for seen, read in ASCII_PAIRS:
            step = step.replace(seen, read)
        if step == key:
            break
        key = step
    return key


@cache
def _keys(others: tuple[str, ...]) -> dict[str, str]:
    return {reading_key(other): other for other in reversed(others)}


def reads_as(name: str, others: Iterable[str]) -> str | None:
    """The first of ``others`` that ``name`` reads as, in any case, or None."""
    return _keys(tuple(others)).get(reading_key(name))
