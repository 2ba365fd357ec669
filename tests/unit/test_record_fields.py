"""Every field the Lua scripts read or write on a message or delivery hash is one
``schema.py`` names."""

from __future__ import annotations

import re

import pytest

from messaging.store.schema import DeliveryField, MessageField
from messaging.store.scripts import LUA_DIR

CALL_RE = re.compile(r'redis\.call\(\s*"(?P<cmd>H[A-Z]+)"\s*,')
# The named local a script binds a record's key to: `dlv`, `msg` (or `k.dlv`, `dlv_key`).
RECORD_KEY_RE = re.compile(r"^(?:\w+\.)?(?P<kind>dlv|msg)(?:_key)?$")
LITERAL_RE = re.compile(r'^"(?P<field>[^"]*)"$')
FIELDS = {"dlv": {str(f) for f in DeliveryField}, "msg": {str(f) for f in MessageField}}
# Commands whose every argument after the key is a field; the rest name a field first
# (HINCRBY, HSETNX) or alternate field and value (HSET).
ALL_FIELDS = {"HGET", "HMGET", "HDEL", "HEXISTS"}
FIRST_FIELD = {"HINCRBY", "HINCRBYFLOAT", "HSETNX"}


def _arguments(text: str, start: int) -> list[str]:
    """The top-level arguments of the call whose first argument starts at ``start``."""
    args, depth, quote, current = [], 0, "", ""
    for ch in text[start:]:
        if quote:
            current += ch
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote, current = ch, current + ch
        elif ch in "({[":
            depth, current = depth + 1, current + ch
        elif ch in ")}]" and depth:
            depth, current = depth - 1, current + ch
        elif ch == ")" or (ch == "," and not depth):
            args.append(current.strip())
            current = ""
            if ch == ")":
                return args
        else:
            current += ch
    raise AssertionError("unclosed redis.call")


def record_fields(text: str) -> list[tuple[str, str, str]]:
    """(record kind, key expression, field) for each field literal a script spells."""
    found = []
    for call in CALL_RE.finditer(text):
        cmd = call.group("cmd")
        key, *rest = _arguments(text, call.end())
        if cmd in ALL_FIELDS:
            named = rest
        elif cmd in FIRST_FIELD:
            named = rest[:1]
        elif cmd == "HSET":
            named = rest[::2]
        else:
            named = []
        kind = RECORD_KEY_RE.match(key)
        for arg in named:
            literal = LITERAL_RE.match(arg)
            if kind and literal:
                found.append((kind.group("kind"), key, literal.group("field")))
    return found


def hash_keys(text: str) -> list[str]:
    return [_arguments(text, call.end())[0] for call in CALL_RE.finditer(text)]


SCRIPTS = sorted(LUA_DIR.glob("*.lua"))


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_every_record_field_a_script_spells_is_in_the_schema(path):
    text = path.read_text()
    unknown = [(key, field) for kind, key, field in record_fields(text)
               if field not in FIELDS[kind]]
    assert not unknown, f"{path.name} spells fields schema.py does not name: {unknown}"


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_hash_calls_name_their_key(path):
    """A hash is reached by a named local, so a record's fields are checked above."""
    raw = [key for key in hash_keys(path.read_text()) if key.startswith("KEYS[")]
    assert not raw, f"{path.name} calls a hash command on a bare key: {raw}"


def test_the_check_catches_a_field_the_schema_does_not_name():
    script = 'local dlv = KEYS[1]\nredis.call("HSET", dlv, "stage", "x", "stagee", 1)\n' \
             'redis.call("HMGET", k.msg, "json", "jsonn")\n'
    assert [f for kind, _, f in record_fields(script) if f not in FIELDS[kind]] == [
        "stagee", "jsonn"]
    assert record_fields('redis.call("HGET", stats, "retry")') == []
    assert len(record_fields(''.join(
        f'redis.call("HGET", dlv, "{f}")' for f in DeliveryField))) == len(DeliveryField)
