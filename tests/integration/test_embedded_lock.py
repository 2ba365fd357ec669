"""The embedded store is locked (docs/http-api.md: the embedded store line).

It listens on loopback only, keeps protected-mode on, requires a password
generated into the data dir (never on its command line), and the data dir and
every file in it are readable by their owner only.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import redis

from messaging.launch.embedded import EmbeddedStore
from tests.stack import free_port


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_embedded_store_needs_its_password_and_keeps_its_files_private(tmp_path: Path):
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    (data / "left-by-an-older-version").write_text("x")
    (data / "left-by-an-older-version").chmod(0o644)
    store = EmbeddedStore(data, port=free_port())
    store.start()
    try:
        password = (data / "store-password").read_text().strip()
        assert len(password) >= 32 and f":{password}@" in store.url
        assert (data / "store-url").read_text().strip() == store.url
        with redis.Redis(port=store.port) as anonymous, pytest.raises(
                redis.AuthenticationError):
            anonymous.set("courier:token:forged", "x")
        with redis.Redis.from_url(store.url, decode_responses=True) as owner:
            owner.hset("courier:token:x", mapping={"kind": "project", "project_id": "p"})
            owner.execute_command("BGREWRITEAOF")
            assert owner.config_get("protected-mode")["protected-mode"] == "yes"
            assert owner.config_get("bind")["bind"] == "127.0.0.1"
        cmdline = Path(f"/proc/{store.pid}/cmdline").read_bytes()
        assert password.encode() not in cmdline
        assert _mode(data) == 0o700
        files = [p for p in data.rglob("*") if p.is_file()]
        assert any("appendonly" in str(p) for p in files)
        for path in data.rglob("*"):
            assert _mode(path) == (0o700 if path.is_dir() else 0o600), path
    finally:
        store.stop()


def test_a_restart_on_the_same_data_dir_keeps_the_password(tmp_path: Path):
    port = free_port()
    first = EmbeddedStore(tmp_path / "data", port=port)
    first.start()
    url = first.url
    with redis.Redis.from_url(url) as client:
        client.set("kept", "1")
    first.stop()
    again = EmbeddedStore(tmp_path / "data", port=port)
    again.start()
    try:
        assert again.url == url
        with redis.Redis.from_url(url) as client:
            assert client.get("kept") == b"1"
    finally:
        again.stop()
