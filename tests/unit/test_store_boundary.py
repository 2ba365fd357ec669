"""Only ``messaging.store`` talks to Redis: no code outside it uses a store's client or
spells a key.

Read from the source: outside ``messaging/store/``, no module reaches for a
store object's ``client`` (``store.client``, ``self.store.client``,
``store().client``), makes a client of its own (``connect.sync_client``,
``async_client``, or redis-py's ``Redis`` itself) or imports the key map
(``messaging.store.keys``). Each check is shown to catch a line that breaks it.

The launchers that run a Valkey server process (the embedded store, the
private server a backup reads its snapshot with) make a client of the server
they started, to see it serve: ``SERVER_RUNNERS``, and nothing else.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "messaging" / "store"
# Courier's code outside the store: every module is held to the boundary.
FENCED = [ROOT / "messaging", ROOT / "workers"]
CLIENT_MAKERS = {"sync_client", "async_client"}
REDIS_CLIENTS = {"Redis", "StrictRedis", "RedisCluster"}
SERVER_RUNNERS = {"messaging/launch/embedded.py", "messaging/launch/backup.py"}


def _storeish(node: ast.expr) -> bool:
    """True for an expression that names a store: ``store``, ``self._store``,
    ``svc.store``, ``store()``."""
    if isinstance(node, ast.Call):
        node = node.func
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return "store" in name.lower()


def _imports_key_map(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):
        return any(alias.name == "messaging.store.keys" for alias in node.names)
    return isinstance(node, ast.ImportFrom) and (
        node.module == "messaging.store.keys"
        or (node.module == "messaging.store" and any(a.name == "keys" for a in node.names)))


def _imports_client_maker(node: ast.AST) -> bool:
    return isinstance(node, ast.ImportFrom) and any(a.name in CLIENT_MAKERS
                                                    for a in node.names)


def _makes_redis_client(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name in REDIS_CLIENTS


def breaches(source: str, runs_a_server: bool = False) -> list[str]:
    """Each use of the store's insides in ``source``, as ``line: what``
    (``runs_a_server``: it may make a client of the server it runs)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if _makes_redis_client(node) and not runs_a_server:
            found.append(f"{node.lineno}: a redis-py client of its own")
        elif (isinstance(node, ast.Attribute) and node.attr in ("client", "waits")
                and _storeish(node.value)):
            found.append(f"{node.lineno}: a store's {node.attr}")
        elif (isinstance(node, ast.Attribute) and node.attr in CLIENT_MAKERS
              or _imports_client_maker(node)):
            found.append(f"{node.lineno}: a client of its own")
        elif _imports_key_map(node):
            found.append(f"{node.lineno}: the key map")
    return found


def _modules() -> list[Path]:
    return sorted(path for root in FENCED for path in root.rglob("*.py")
                  if STORE not in path.parents)


def test_no_code_outside_the_store_uses_its_client_or_its_keys():
    found = {}
    for path in _modules():
        name = str(path.relative_to(ROOT))
        found[name] = breaches(path.read_text(), runs_a_server=name in SERVER_RUNNERS)
    assert {path: lines for path, lines in found.items() if lines} == {}


@pytest.mark.parametrize("line", [
    "await store.client.get('k')",
    "self.store.client.pipeline()",
    "svc.store.waits.xread({})",
    "store().client.smembers('k')",
    "client = connect.sync_client(url)",
    "from messaging.store.connect import async_client",
    "from messaging.store import keys",
    "from messaging.store.keys import PROJECTS",
    "import messaging.store.keys",
    "client = redis.Redis(port=6379)",
    "client = Redis(port=6379)",
    "client = redis.asyncio.Redis(port=6379)",
])
def test_each_check_catches_a_line_that_breaks_it(line: str):
    assert breaches(line) != []


def test_the_store_s_own_methods_are_no_breach():
    assert breaches("await svc.store.delivery_counters()\nstore.close()") == []
