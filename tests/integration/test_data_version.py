"""The store's data version (docs/operations.md, Upgrading): stamped on a new store,
older data migrated forward at start, newer data refused by every process."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from messaging.launch.backup import copy_into_store
from messaging.launch.embedded import EmbeddedStore
from messaging.store import connect, keys, version
from tests.records import lost, project_records, stable
from tests.stack import START_TIMEOUT_S, Stack, free_port, make_stack, wait_until

# Its tests start processes of their own (stacks, API processes, `courier up`, the
# CLI) or wait out real deadlines: the slow tier (`./dev test --all`).
pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "previous_release"


def test_the_running_store_records_the_current_data_version(stack: Stack):
    with stack.redis() as r:
        assert r.get(keys.DATA_VERSION) == str(version.CURRENT)


@pytest.mark.timeout(120)
def test_every_process_refuses_or_leaves_data_newer_than_it_knows(tmp_path: Path):
    stack = make_stack(tmp_path, store_kind="node")
    try:
        running = {"api": stack.procs[0], "worker": stack.start_worker()}
        newer = version.CURRENT + 1
        with stack.redis() as r:
            r.set(keys.DATA_VERSION, newer)  # as a newer release's migration would
        root = str(tmp_path)
        procs = {
            "api": stack.spawn("api", ["-m", "uvicorn", "messaging.web.app:app", "--port", "1"]),
            "worker": stack.spawn("worker", ["-m", "celery", "-A", "workers.app", "worker",
                                             "-Q", "deliver.inbox", "-c", "1"]),
            "beat": stack.spawn("beat", ["-m", "celery", "-A", "workers.app", "beat", "-s",
                                         f"{root}/beat-schedule"]),
        }
        for name, proc in procs.items():
            wait_until(lambda p=proc: not p.alive(), START_TIMEOUT_S, what=f"{name} to stop")
            assert proc.popen.returncode == 1, proc.tail()
            said = proc.tail()
            assert (f"courier {name} cannot start: the store holds data version {newer},"
                    f" newer than data version {version.CURRENT}") in said, said
        for name, proc in running.items():  # those already running stop on their own
            wait_until(lambda p=proc: not p.alive(), START_TIMEOUT_S, what=f"{name} to stop")
            assert (f"courier {name} stops: the store holds data version {newer}"
                    in proc.tail()), proc.tail()
        with stack.redis() as r:
            assert r.get(keys.DATA_VERSION) == str(newer)  # nothing was written over it
    finally:
        stack.stop()


@pytest.mark.timeout(180)
def test_the_previous_release_s_data_is_migrated_and_every_record_reads_the_same(
        tmp_path: Path):
    expected = json.loads((FIXTURE / "expected.json").read_text())
    stack = make_stack(tmp_path, store_kind="node")
    try:
        stack.procs.pop().stop()  # the API: started again on the old data below
        with stack.redis() as r:
            r.flushall()
        copy_into_store(FIXTURE / "store.rdb", stack.store.url)
        with stack.redis() as r:
            assert r.get(keys.DATA_VERSION) is None  # as the previous release left it
            assert version.stored_version(r) == version.UNVERSIONED
        api, stack.api_url = stack.start_api(port=int(stack.env["COURIER_PORT"]))
        wait_until(lambda: "migrated the store's data from version 1 to" in api.tail(),
                   what="the API's line about the migration")
        with stack.redis() as r:
            assert r.get(keys.DATA_VERSION) == str(version.CURRENT)
        stack.start_worker()
        pid, tokens = expected["project_id"], expected["tokens"]
        with stack.operator() as op:
            got = project_records(op, expected["project_token"], pid, tokens, stack.api_url)
        assert lost(stable(got), stable(expected["records"])) == []
        for replay in expected["replays"]:  # idempotency records of the old release hold
            with stack.client(tokens[replay["agent"]]) as api_client:
                again = api_client.request("POST", "/v1/messages", json=replay["body"])
            assert again["id"] == replay["message_id"] and again["idempotent_replay"] is True
        with stack.client(tokens["Dave"]) as dave, stack.client(tokens["Carol"]) as carol:
            sent = dave.send(["Carol"], "after the upgrade", "new code, old data")
            wait_until(lambda: any(m["id"] == sent["id"] for m in carol.iter_inbox()),
                       what="a new message on the migrated data")
    finally:
        stack.stop()


def test_processes_starting_together_migrate_once(tmp_path: Path):
    store = EmbeddedStore(tmp_path / "store", port=free_port())
    store.start()
    try:
        copy_into_store(FIXTURE / "store.rdb", store.url)
        found: list[int | None] = []

        def start() -> None:
            with connect.sync_client(store.url) as r:
                found.append(version.ensure_current(r))

        threads = [threading.Thread(target=start) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        with connect.sync_client(store.url) as r:
            assert r.get(keys.DATA_VERSION) == str(version.CURRENT)
            assert not r.exists(keys.MIGRATION_LOCK)
        # Each saw version 1 or, if it came after the migration, the current one.
        assert len(found) == 8 and set(found) <= {version.UNVERSIONED, version.CURRENT}
    finally:
        store.stop()


@pytest.mark.timeout(120)
def test_an_api_started_before_its_store_stops_once_it_finds_newer_data(tmp_path: Path):
    stack = make_stack(tmp_path, store_kind="node")
    try:
        with stack.redis() as r:
            r.set(keys.DATA_VERSION, version.CURRENT + 1)
        stack.procs.pop().stop()
        store = stack.store
        store.stop()  # the AOF keeps the newer version
        api, _ = stack.start_api()  # answers /healthz with the store still down
        assert isinstance(store, EmbeddedStore)
        stack.store = EmbeddedStore(store.data_dir, port=store.port)
        stack.store.start()
        wait_until(lambda: not api.alive(), START_TIMEOUT_S, what="the API to stop")
        assert f"the store holds data version {version.CURRENT + 1}" in api.tail()
    finally:
        stack.stop()
