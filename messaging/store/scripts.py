"""The Lua scripts beside this module, each registered once per client and run by EVALSHA.

Every ``lua/*.lua`` is an operation, found by glob and registered when a client's
registry is first built; ``lua/*_lib.lua`` are shared libraries. A script may open
with ``-- uses: a_lib, b_lib``: the text of those libraries (functions only) is put
before its own (after its ``#!lua`` flags line), so shared logic lives once.
``keyspace_lib`` is no file: ``keys.lua_library`` writes it from ``keys.py``.

A script touches the keys it is given in KEYS and, besides, only keys of the
same project that it derives with ``keyspace_lib`` from the prefix of one it
was given: they share its hash tag, so its cluster slot, and a script that
serves one project still touches one slot. Run one by name::

    scripts_for(client)["admit_message"](keys=[...], args=[...])
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

from messaging.store import keys

USES_RE = re.compile(r"^-- uses: (?P<libs>[\w, ]+)$", re.MULTILINE)
LUA_DIR = Path(__file__).with_name("lua")
LIB_SUFFIX = "_lib"
SHEBANG = "#!lua"
KEYSPACE_LIB = "keyspace_lib"


@cache
def _text(name: str) -> str:
    if name == KEYSPACE_LIB:
        return keys.lua_library()
    return (LUA_DIR / f"{name}.lua").read_text()


def _libs(name: str, seen: list[str]) -> None:
    """Every shared file ``name`` needs, dependencies first."""
    match = USES_RE.search(_text(name))
    for lib in match.group("libs").replace(",", " ").split() if match else []:
        if lib not in seen:
            _libs(lib, seen)
            seen.append(lib)


@cache
def source(name: str) -> str:
    """The text of ``lua/<name>.lua``, after the shared files it uses (its ``#!lua``
    flags line, if any, stays first)."""
    libs: list[str] = []
    _libs(name, libs)
    text = _text(name)
    head = ""
    if text.startswith(SHEBANG):
        head, _, text = text.partition("\n")
    return "\n".join([*([head] if head else []), *(_text(lib) for lib in libs), text])


@cache
def names() -> tuple[str, ...]:
    """Every operation script in ``lua/`` (libraries left out), by glob."""
    return tuple(sorted(path.stem for path in LUA_DIR.glob("*.lua")
                        if not path.stem.endswith(LIB_SUFFIX)))


class Scripts(dict[str, Any]):
    """Every operation script, registered on one client (sync or asyncio alike), by name."""

    def __init__(self, client: Any) -> None:
        super().__init__((name, client.register_script(source(name))) for name in names())


_REGISTRIES: WeakKeyDictionary[Any, Scripts] = WeakKeyDictionary()


def scripts_for(client: Any) -> Scripts:
    """The registry of ``client``, built the first time it is asked for."""
    registry = _REGISTRIES.get(client)
    if registry is None:
        registry = _REGISTRIES[client] = Scripts(client)
    return registry
