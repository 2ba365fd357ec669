"""The data dir on disk: owner-only files, archive days that expire, sizes in /metrics,
and a store log that stays bounded."""

from __future__ import annotations

import os
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from messaging.launch.embedded import ROTATED_SUFFIX, EmbeddedStore
from messaging.service import archive
from tests.stack import free_port, make_stack, wait_until

OLD_DAY = "2020-01-01"
# Retention keeps final mail this many seconds, so the test sees it archived.
RETENTION_DAYS = 1 / 86_400


def _gauges(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=10).text
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def _modes(top: Path) -> dict[str, str]:
    """Every file and dir under ``top`` (``top`` included) with a mode other than the
    owner's alone, as ``{path: mode}``."""
    wrong = {}
    for path in [top, *top.rglob("*")]:
        mode = path.lstat().st_mode & 0o777
        if mode != (0o700 if path.is_dir() else 0o600):
            wrong[str(path.relative_to(top))] = oct(mode)
    return wrong


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_data_files_are_owner_only_and_old_archive_days_expire(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, retention_days=repr(RETENTION_DAYS),
                       retention_interval_s="0.3", archive_keep_days="30")
    data = tmp_path / "data"
    root = data / "archive"
    try:
        stack.start_worker(beat=False)
        # beat as the Procfile runs it: its schedule in the data dir.
        stack.spawn("beat", ["-m", "celery", "-A", "workers.app", "beat", "-s",
                             str(data / "celerybeat-schedule"), "--loglevel", "INFO"])
        with stack.operator() as op:
            p = op.create_project(f"/srv/{uuid.uuid4().hex}")
        old = archive.append(root, p["project_id"], OLD_DAY, [{"id": "msg_old"}])
        with stack.client(p["token"]) as admin:
            row = admin.register_agent(p["project_id"], "Alice")
            admin.register_agent(p["project_id"], "Bob")
            with stack.client(row["token"]) as alice:
                alice.send(["Bob"], "Kept a while", "then archived")
        today = datetime.now(UTC).strftime(archive.DAY_FORMAT)
        wait_until(lambda: today in archive.days(root, p["project_id"]), 30,
                   what="today's archive file")
        wait_until(lambda: not old.exists(), 10, what="the old day's file deleted")
        assert archive.days(root, p["project_id"]) == [today]  # within 30 days: kept
        assert list(data.glob("celerybeat-schedule*"))
        assert _modes(data) == {}
    finally:
        stack.stop()


@pytest.mark.slow
def test_metrics_show_the_archive_and_data_dir_sizes(tmp_path: Path) -> None:
    stack = make_stack(tmp_path)
    try:
        before = _gauges(stack.api_url)
        assert before["courier_archive_bytes"] == 0  # no archive yet
        project = "prj_" + uuid.uuid4().hex[:12]
        written = archive.append(tmp_path / "data" / "archive", project, OLD_DAY,
                                 [{"id": f"msg_{i}", "body_md": os.urandom(64).hex()}
                                  for i in range(500)])
        after = _gauges(stack.api_url)
        assert after["courier_archive_bytes"] == written.stat().st_size > 10_000
        assert after["courier_data_dir_bytes"] >= (before["courier_data_dir_bytes"]
                                                   + written.stat().st_size)
        assert after["courier_data_dir_bytes"] >= archive.size_bytes(tmp_path / "data" /
                                                                     "store")
    finally:
        stack.stop()


def test_the_store_log_stays_within_its_bound(tmp_path: Path) -> None:
    bound = 4096
    store = EmbeddedStore(tmp_path / "data", port=free_port(), log_max_bytes=bound)
    store.start()
    try:
        client = redis.Redis.from_url(store.url, decode_responses=True)
        rotated = store.log_path.with_name(store.log_path.name + ROTATED_SUFFIX)
        for _ in range(40):  # each rewrite of the append-only file logs a few lines
            if rotated.exists() and store.log_path.stat().st_size > 0:
                break
            client.bgrewriteaof()
            wait_until(lambda: client.info("persistence")["aof_rewrite_in_progress"] == 0,
                       what="the rewrite")
            time.sleep(0.1)
        assert rotated.exists(), store.log_path.read_text()
        for path in (store.log_path, rotated):
            assert 0 < path.stat().st_size <= bound, path
            assert path.stat().st_mode & 0o777 == 0o600
        assert "Background append only file rewriting" in (rotated.read_text()
                                                           + store.log_path.read_text())
        client.close()
    finally:
        store.stop()
