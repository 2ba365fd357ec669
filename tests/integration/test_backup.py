"""``courier backup`` of a running stack under load and ``courier restore`` into another
data dir (docs/operations.md, Backup and restore), compared record by record."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from messaging.client import CourierAPIError
from messaging.config import OPERATOR_TOKEN_FILE
from messaging.launch.embedded import EmbeddedStore
from messaging.service import archive
from messaging.store import connect, keys, version
from tests.integration.conftest import Project
from tests.stack import ROOT, Stack, free_port, make_stack, wait_until

Json = dict[str, Any]
# Fields of an agent record that its sends and reads move after the snapshot.
MOVING_AGENT_FIELDS = ("last_active_us", "used_us", "presence")


def courier(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The ``courier`` command with ``env``."""
    return subprocess.run([sys.executable, "-m", "messaging.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def settled(stack: Stack, project_id: str) -> dict[str, Json]:
    """Every delivery of the project once each has its outcome, by id."""
    def read() -> dict[str, Json] | None:
        with stack.redis() as r:
            found = {k.rsplit(":", 1)[1]: r.hgetall(k)
                     for k in r.scan_iter(match=keys.delivery(project_id, "*"), count=1000)}
        return found if all(d.get("outcome") for d in found.values()) else None

    return wait_until(read, 60, 0.2, "every delivery's outcome")


def records(stack: Stack, pattern: str) -> dict[str, Any]:
    """The keys matching ``pattern`` with their content (strings, hashes and sets)."""
    read = {"hash": "hgetall", "set": "smembers", "string": "get"}
    with stack.redis() as r:
        return {k: getattr(r, read[r.type(k)])(k) for k in r.scan_iter(match=pattern, count=1000)}


def agents(stack: Stack, project_id: str) -> dict[str, Json]:
    """The project's agent records without the fields that move with use."""
    with stack.redis() as r:
        rows = {i: json.loads(a) for i, a in r.hgetall(keys.agents(project_id)).items()}
    return {i: {k: v for k, v in a.items() if k not in MOVING_AGENT_FIELDS}
            for i, a in rows.items()}


def assert_same_directory(source: Stack, restored: Stack, pid: str, ptoken: str) -> None:
    """Projects, agents and tokens: the same records; the old tokens work."""
    for pattern in (keys.project(pid), keys.token("*"), keys.names(pid), keys.refs(pid),
                    keys.agent_token(pid, "*"), keys.PROJECTS):
        assert records(restored, pattern) == records(source, pattern), pattern
    assert agents(restored, pid) == agents(source, pid)
    with restored.operator() as op:
        assert op.project(pid)["project_id"] == pid
    with restored.client(ptoken) as admin:
        assert len(admin.list_agents(pid)) == 3


def assert_same_mail(source: Stack, restored: Stack, pid: str, tokens: dict[str, str],
                     before: list[tuple[Json, str]]) -> None:
    """Messages, deliveries and idempotency records: one whole snapshot, holding every
    send answered before the backup started, each delivered once after the restore."""
    kept, now = settled(restored, pid), settled(source, pid)
    messages = records(restored, keys.message(pid, "*"))
    source_messages = records(source, keys.message(pid, "*"))
    assert {keys.message(pid, mid) for _, mid in before} <= set(messages)
    assert len(before) <= len(messages) < len(source_messages)
    for key, record in messages.items():
        assert record == source_messages[key]
        for delivery_id, _agent in json.loads(record["deliveries"]):
            assert kept[delivery_id]["outcome"] == now[delivery_id]["outcome"] == "accepted"
            for field in ("message_id", "agent_id", "recipient", "transport", "sender_id"):
                assert kept[delivery_id][field] == now[delivery_id][field]
    assert len(kept) == sum(len(json.loads(m["deliveries"])) for m in messages.values())

    # Each inbox holds each of its messages once, in-flight ones delivered after restore.
    for name in ("Bob", "Cy"):
        with restored.client(tokens[name]) as api:
            inbox = [m["id"] for m in api.iter_inbox(limit=200)]
        mine = [json.loads(m["json"])["id"] for m in messages.values()
                if name in json.loads(m["json"])["to"]]
        assert sorted(inbox) == sorted(mine)

    # Idempotency: the same records, and a replay answers with the first send.
    idem_keys = keys.project(pid).removesuffix("project") + "idem:*"
    idem, source_idem = records(restored, idem_keys), records(source, idem_keys)
    assert len(idem) == len(messages)
    assert all(source_idem[k] == v for k, v in idem.items())
    with restored.client(tokens["Alice"]) as api:
        for body, mid in before[:: max(1, len(before) // 10)]:
            replay = api.request("POST", "/v1/messages", json=body)
            assert replay["id"] == mid and replay["idempotent_replay"] is True
    with restored.client("cat_not_a_token") as nobody, pytest.raises(CourierAPIError):
        nobody.inbox()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_backup_under_load_restores_every_record_and_token(tmp_path: Path):
    source = make_stack(tmp_path / "source", store_kind="node")
    restored: Stack | None = None
    try:
        source.start_worker()
        data_dir = Path(source.env["COURIER_DATA_DIR"])
        # The data dir as `courier up` leaves it: the operator token file, an archive.
        (data_dir / OPERATOR_TOKEN_FILE).write_text(source.operator_token + "\n")
        with source.operator() as op:
            p = op.create_project("/srv/checkouts/backup")
        pid, ptoken = p["project_id"], p["token"]
        archive.append(data_dir / "archive", pid, "2026-01-02", [{"id": "msg_old", "n": 1}])
        with source.client(ptoken) as admin:
            tokens = {n: admin.register_agent(pid, n)["token"] for n in ("Alice", "Bob", "Cy")}
        alice = source.client(tokens["Alice"])
        sent: list[tuple[float, Json, str]] = []  # (answered at, body, message id)
        stop = threading.Event()

        def load() -> None:
            i = 0
            while not stop.is_set():
                body = {"to": ["Bob", "Cy"] if i % 3 else ["Bob"], "subject": f"load {i}",
                        "body_md": f"send number {i}", "idempotency_key": f"load-{i}"}
                answer = alice.request("POST", "/v1/messages", json=body)
                sent.append((time.monotonic(), body, answer["id"]))
                i += 1

        sender = threading.Thread(target=load, daemon=True)
        sender.start()
        wait_until(lambda: len(sent) >= 30, what="sends under way")
        started = time.monotonic()
        backup_dir = tmp_path / "backup"
        made = courier(source.env, "backup", str(backup_dir), "--json")
        assert made.returncode == 0, made.stderr
        time.sleep(0.5)  # sends go on after the snapshot too
        stop.set()
        sender.join(30)
        alice.close()
        before = [(body, mid) for at, body, mid in sent if at < started]
        manifest = json.loads(made.stdout)
        assert manifest["data_version"] == 2 and manifest["archive_files"] == 1
        assert len(sent) > len(before) >= 30

        target_env = {k: v for k, v in source.env.items()
                      if k not in ("COURIER_REDIS_URL", "COURIER_OPERATOR_TOKEN")}
        target_env["COURIER_DATA_DIR"] = str(tmp_path / "restored" / "data")
        put = courier(target_env, "restore", str(backup_dir))
        assert put.returncode == 0, put.stderr
        again = courier(target_env, "restore", str(backup_dir))
        assert again.returncode == 1 and "is not empty" in again.stderr
        token_file = tmp_path / "restored" / "data" / OPERATOR_TOKEN_FILE
        assert token_file.read_text().strip() == source.operator_token
        assert ((tmp_path / "restored" / "data" / "archive" / pid / "2026-01-02.jsonl.gz")
                .read_bytes() == (data_dir / "archive" / pid / "2026-01-02.jsonl.gz")
                .read_bytes())

        restored = make_stack(tmp_path / "restored", store_kind="node",
                              operator_token=token_file.read_text().strip())
        restored.start_worker()
        assert_same_directory(source, restored, pid, ptoken)
        assert_same_mail(source, restored, pid, tokens, before)
    finally:
        for stack in (restored, source):
            if stack is not None:
                stack.stop()


def test_restore_refuses_what_is_not_a_backup(tmp_path: Path):
    env = {"PATH": "/usr/bin:/bin", "COURIER_DATA_DIR": str(tmp_path / "data")}
    (tmp_path / "nothing").mkdir()
    answer = courier(env, "restore", str(tmp_path / "nothing"))
    assert answer.returncode == 1 and "is not a Courier backup" in answer.stderr
    assert not (tmp_path / "data").exists()



def test_a_tarball_backup_restores_into_an_empty_external_store_only(tmp_path: Path,
                                                                     project: Project):
    env = {k: v for k, v in project.stack.env.items() if k != "COURIER_OPERATOR_TOKEN"}
    tarball = tmp_path / "courier.tar.gz"
    made = courier(env, "backup", str(tarball))
    assert made.returncode == 0, made.stderr
    assert tarball.stat().st_mode & 0o777 == 0o600
    busy = courier({**env, "COURIER_DATA_DIR": str(tmp_path / "a")}, "restore", str(tarball))
    assert busy.returncode == 1 and "a restore only fills an empty store" in busy.stderr
    assert not (tmp_path / "a").exists()

    empty = EmbeddedStore(tmp_path / "store", port=free_port())
    empty.start()
    try:
        put = courier({**env, "COURIER_REDIS_URL": empty.url,
                       "COURIER_DATA_DIR": str(tmp_path / "b")}, "restore", str(tarball))
        assert put.returncode == 0, put.stderr
        with connect.sync_client(empty.url) as r:
            assert r.hget(keys.project(project.project_id), "id") == project.project_id
            assert r.get(keys.DATA_VERSION) == str(version.CURRENT)
    finally:
        empty.stop()


def test_backup_says_when_the_store_does_not_answer(tmp_path: Path):
    env = {"PATH": "/usr/bin:/bin", "COURIER_DATA_DIR": str(tmp_path / "data"),
           "COURIER_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    answer = courier(env, "backup", str(tmp_path / "backup"))
    assert answer.returncode == 6 and "the store did not answer" in answer.stderr


def test_restore_refuses_a_backup_of_newer_data(tmp_path: Path):
    (tmp_path / "backup").mkdir()
    (tmp_path / "backup" / "store.rdb").write_bytes(b"REDIS0011")
    (tmp_path / "backup" / "manifest.json").write_text(json.dumps(
        {"format": 1, "data_version": version.CURRENT + 1}))
    env = {"PATH": "/usr/bin:/bin", "COURIER_DATA_DIR": str(tmp_path / "data")}
    answer = courier(env, "restore", str(tmp_path / "backup"))
    assert answer.returncode == 1
    assert f"data version {version.CURRENT + 1}, newer than data version" in answer.stderr
    assert not (tmp_path / "data").exists()
