"""The data dir `courier up` and `courier init` create is their owner's alone."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from messaging.config import EMBEDDED_URL_FILE, STORE_LOCK_FILE, STORE_PASSWORD_FILE, Settings


def test_the_operator_token_s_data_dir_is_created_owner_only(tmp_path: Path) -> None:
    previous = os.umask(0o022)  # a usual shell's
    try:
        settings = Settings(data_dir=tmp_path / "fresh" / "data", operator_token=None)
        settings.resolve_operator_token()
    finally:
        os.umask(previous)
    assert (tmp_path / "fresh" / "data").stat().st_mode & 0o777 == 0o700
    assert settings.operator_token_path.stat().st_mode & 0o777 == 0o600


def test_the_store_url_is_the_running_embedded_servers_and_never_a_stale_one(
        tmp_path: Path) -> None:
    (tmp_path / STORE_PASSWORD_FILE).write_text("secret\n")
    (tmp_path / EMBEDDED_URL_FILE).write_text("redis://:secret@127.0.0.1:17001/0\n")
    settings = Settings(data_dir=tmp_path, redis_url=None, embedded_port=6399)
    # Left by a server that was killed: its lock is free, the file is not believed.
    (tmp_path / STORE_LOCK_FILE).touch()
    assert settings.store_url == "redis://:secret@127.0.0.1:6399/0"
    with open(tmp_path / STORE_LOCK_FILE, "ab") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running server holds it
        assert settings.store_url == "redis://:secret@127.0.0.1:17001/0"
    given = Settings(data_dir=tmp_path, redis_url="redis://elsewhere:6379/0")
    assert given.store_url == "redis://elsewhere:6379/0"
