"""The embedded Valkey server: real processes, real ports, real AOF."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from messaging.config import EMBEDDED_URL_FILE
from messaging.launch.embedded import (
    EmbeddedStore,
    EmbeddedStoreError,
    lower_priority,
    wait_ready,
)
from tests.stack import children, free_port, wait_until

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).resolve().parents[2]
LINUX_PROC = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(),
    reason="needs Linux's /proc: elsewhere the store's children keep its priority")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EmbeddedStore]:
    with EmbeddedStore(tmp_path, free_port()) as running:
        yield running


def test_keys_survive_a_restart_on_the_same_data_dir(tmp_path: Path) -> None:
    port = free_port()
    with EmbeddedStore(tmp_path, port) as store, redis.Redis.from_url(store.url) as client:
        client.set("k", "v")
        client.zadd("z", {"a": 1, "b": 2})
        client.hset("h", mapping={"f": "1"})
    with EmbeddedStore(tmp_path, port) as store, redis.Redis.from_url(store.url) as client:
        assert client.get("k") == b"v"
        assert client.zrange("z", 0, -1) == [b"a", b"b"]
        assert client.hgetall("h") == {b"f": b"1"}


def test_server_runs_with_aof_noeviction_and_no_snapshots(store: EmbeddedStore) -> None:
    with redis.Redis.from_url(store.url) as client:
        config = client.config_get("*")
    assert config["appendonly"] == "yes"
    assert config["appendfsync"] == "everysec"
    assert config["maxmemory-policy"] == "noeviction"
    assert config["save"] == ""
    assert Path(config["dir"]) == store.store_dir


def test_a_second_server_on_a_taken_port_fails_naming_the_port_and_log(
    store: EmbeddedStore, tmp_path: Path
) -> None:
    second = EmbeddedStore(tmp_path / "second", store.port)
    with pytest.raises(EmbeddedStoreError) as caught:
        second.start(timeout_s=5)
    message = str(caught.value)
    assert "already in use" in message
    assert str(second.log_path) in message
    assert second.pid is None
    with redis.Redis.from_url(store.url) as client:
        assert client.ping()


def test_a_second_server_on_the_same_data_dir_is_refused(
    store: EmbeddedStore, tmp_path: Path
) -> None:
    with pytest.raises(EmbeddedStoreError, match="already running"):
        EmbeddedStore(tmp_path, free_port()).start()


def test_url_file_exists_only_while_running(tmp_path: Path) -> None:
    url_file = tmp_path / EMBEDDED_URL_FILE
    with EmbeddedStore(tmp_path, free_port()) as store:
        assert url_file.read_text().strip() == store.url
    assert not url_file.exists()


def test_stop_ends_the_server_process(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path, free_port())
    store.start()
    url = store.url
    store.stop()
    with pytest.raises(TimeoutError):
        wait_ready(url, timeout_s=0.2)


@LINUX_PROC
@pytest.mark.parametrize("command", ["BGREWRITEAOF", "BGSAVE"])
def test_a_rewrite_or_save_child_runs_on_idle_cpu_only(store: EmbeddedStore,
                                                         command: str) -> None:
    assert store.pid is not None
    policy = os.sched_getscheduler(store.pid)
    with redis.Redis.from_url(store.url) as client:
        client.mset({f"k{i}": "v" for i in range(30)})
        # The child sleeps this long per key (microseconds): it lives about three seconds.
        client.config_set("rdb-key-save-delay", 100_000)
        client.execute_command(command)
        child = wait_until(lambda: children(store.pid or 0), 5, 0.005, "the child")[0]
        wait_until(lambda: os.sched_getscheduler(child) == os.SCHED_IDLE, 2, 0.005,
                   f"the child {child} on SCHED_IDLE")
        assert os.sched_getscheduler(store.pid) == policy != os.SCHED_IDLE
        client.config_set("rdb-key-save-delay", 0)


@LINUX_PROC
def test_only_the_servers_own_child_is_moved_to_idle_cpu() -> None:
    with subprocess.Popen(["sleep", "30"]) as other:
        try:
            assert not lower_priority(other.pid, server_pid=other.pid)  # not its parent
            assert os.sched_getscheduler(other.pid) != os.SCHED_IDLE
            assert lower_priority(other.pid, server_pid=os.getpid())
            assert os.sched_getscheduler(other.pid) == os.SCHED_IDLE
        finally:
            other.kill()
    assert not lower_priority(other.pid, server_pid=os.getpid())  # gone


def test_wait_ready_returns_once_the_store_answers(store: EmbeddedStore) -> None:
    wait_ready(store.url, timeout_s=5)


def test_wait_ready_times_out_naming_the_url() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    with pytest.raises(TimeoutError, match=url):
        wait_ready(url, timeout_s=0.3)


def test_module_runs_the_store_until_sigterm(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
    env.update(COURIER_DATA_DIR=str(tmp_path), COURIER_EMBEDDED_PORT=str(port))
    shown = f"redis://127.0.0.1:{port}/0"
    with subprocess.Popen(
        [sys.executable, "-m", "messaging.launch.embedded"], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    ) as proc:  # fmt: skip
        try:
            password = tmp_path / "store-password"
            wait_until(password.exists, 15, what="the store's password")
            url = f"redis://:{password.read_text().strip()}@127.0.0.1:{port}/0"
            wait_ready(url, timeout_s=15)
            with redis.Redis.from_url(url) as client:
                client.set("k", "v")
        finally:
            proc.send_signal(signal.SIGTERM)
            output, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0, output
    assert shown.encode() in output and password.read_text().strip().encode() not in output
    with pytest.raises(TimeoutError):
        wait_ready(url, timeout_s=0.2)
    with EmbeddedStore(tmp_path, port) as store, redis.Redis.from_url(store.url) as client:
        assert client.get("k") == b"v"
