"""The Lua registry: every script beside the store, found and registered once per client."""

from __future__ import annotations

from pathlib import Path

from redis import asyncio as aioredis

from messaging.store import keys
from messaging.store.deliveries import DeliveryStore
from messaging.store.retention import RetentionStore
from messaging.store.scripts import LUA_DIR, names, scripts_for, source
from messaging.store.store import Store
from tests.stack import Stack


def test_every_script_file_is_registered_and_loads_on_the_server(stack: Stack):
    """Nothing is listed by hand: each ``lua/*.lua`` but the libraries is in the registry,
    and each compiles on the real server with the libraries it uses put in front."""
    files = {p.stem for p in Path(LUA_DIR).glob("*.lua")}
    libraries = {name for name in files if name.endswith("_lib")}
    assert libraries >= {"records_lib", "outcome_lib", "notice_lib"}
    assert set(names()) == files - libraries
    client = stack.redis()
    registry = scripts_for(client)
    assert set(registry) == files - libraries
    # Scripts once registered only where they ran: now in the one registry too.
    assert {"bind_name", "end_name", "expire_subscriptions", "remove_messages"} <= set(registry)
    for name in names():
        assert client.script_load(source(name)) == registry[name].sha
    assert all(client.script_exists(*(registry[name].sha for name in names())))


def test_one_registry_per_client_shared_by_the_store_classes(stack: Stack):
    sync = stack.redis()
    deliveries, retention = DeliveryStore(sync), RetentionStore(sync)
    assert deliveries.scripts is retention.scripts is scripts_for(sync)
    other = stack.redis()
    assert scripts_for(other) is not scripts_for(sync)
    store = Store(aioredis.Redis())  # the registry is built without a round trip
    assert store.scripts is store.live.scripts is store.names.scripts is store.search.scripts


def test_the_keys_lua_derives_are_those_python_builds(stack: Stack):
    """keyspace_lib run on the server: each derived key, from the prefix of another key
    of its project, is the key keys.py builds."""
    client = stack.redis()
    project_id, part = "PRJ_x1", "DLV_y2"
    checks = " ".join(
        f'local {name}_ = keyspace.{name}(prefix, ARGV[2])' for name in keys.DERIVED)
    listed = ", ".join(f"{name}_" for name in keys.DERIVED)
    lua = (keys.lua_library()
           + f"local prefix = project_prefix(ARGV[1])\n{checks}\nreturn {{prefix, {listed}}}")
    prefix, *derived = client.eval(lua, 0, keys.due(project_id), part)
    assert keys.project(project_id).startswith(prefix) and prefix.endswith("}")
    assert derived == [getattr(keys, name)(project_id, part) for name in keys.DERIVED]
