"""The Lua scripts spell no key: they are given theirs in KEYS, or derive one of
its project with ``keyspace_lib``, which ``keys.lua_library`` writes from keys.py.

Read from the source: no string in a script holds a part of a project's key
as ``keys.py`` builds it (``:dlv:``, ``:ready:``, ``{p:``, ...), so a key
spelled by hand in Lua is caught, and the check is shown to catch one.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from messaging.store import keys
from messaging.store.scripts import LUA_DIR, source

MARK = "\x00"
LUA_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _project_key_parts() -> set[str]:
    """The fixed parts of every key of a project, as keys.py spells them."""
    parts = {"{p:"}
    for name, build in inspect.getmembers(keys, inspect.isfunction):
        params = list(inspect.signature(build).parameters)
        if name.startswith("_") or not params or params[0] != "project_id":
            continue
        key = build(*(f"{MARK}{p}{MARK}" for p in params))
        tail = key.split(f"{MARK}project_id{MARK}}}", 1)[1]
        parts |= {part for part in re.split(f"{MARK}[a-z_]+{MARK}|[0-9a-f]{{64}}", tail)
                  if len(part) > 1}
    return parts


PARTS = _project_key_parts()


def spelled(lua: str) -> list[str]:
    """The strings of a script that hold a part of a project's key."""
    return [text for text in LUA_STRING.findall(lua) if any(p in text for p in PARTS)]


def test_the_parts_looked_for_are_those_of_project_keys():
    assert {":dlv:", ":msg:", ":inbox:", ":ready:", ":project", ":idem:", "{p:"} <= PARTS


def test_no_script_spells_a_key():
    found = {path.name: spelled(path.read_text()) for path in sorted(LUA_DIR.glob("*.lua"))}
    assert {name: texts for name, texts in found.items() if texts} == {}


@pytest.mark.parametrize("line", [
    'local dlv = "courier:{p:" .. project_id .. "}:dlv:" .. id',
    'local dlv = prefix .. ":dlv:" .. id',
    'redis.call("ZADD", prefix .. ":ready:inbox", 1, id)',
])
def test_the_check_catches_a_key_spelled_by_hand(line: str):
    assert spelled(line)


def test_the_derived_keys_are_spelled_once_in_the_generated_library():
    """take_lease derives its delivery hashes: the text it runs spells them only in
    keyspace_lib, written from keys.py."""
    library = keys.lua_library()
    assert source("take_lease").count(library) == 1
    assert spelled(source("take_lease")) == spelled(library) != []
    assert not Path(LUA_DIR, "keyspace_lib.lua").exists()


def test_a_key_function_that_hides_a_part_cannot_be_derived():
    with pytest.raises(ValueError, match="does not spell name"):
        keys._lua_function("waiting")  # the name is digested: Lua cannot rebuild it
    with pytest.raises(ValueError, match="not a key of a project"):
        keys._lua_function("token")
