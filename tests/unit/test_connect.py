"""Store URLs: one server, Sentinels or a cluster; a cluster store needs a broker of its own."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
from redis.crc import key_slot

from messaging import config
from messaging.config import CLUSTER_NEEDS_BROKER, Settings, SettingsError
from messaging.launch.supervisor import run_up
from messaging.runtime.celeryconf import celery_config
from messaging.store import keys

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_URL = "redis+cluster://127.0.0.1:7000"


@pytest.mark.parametrize(("url", "cluster", "node"), [
    ("redis://h:6379/0", False, "redis://h:6379/0"),
    ("rediss://u:p@h:6380/2", False, "rediss://u:p@h:6380/2"),
    ("redis+cluster://h:7000", True, "redis://h:7000"),
    ("redis+cluster://h:7000/0", True, "redis://h:7000"),
    ("rediss+cluster://u:p@h:7000/?ssl_cert_reqs=none", True,
     "rediss://u:p@h:7000?ssl_cert_reqs=none"),
    ("REDIS+CLUSTER://h:7000", True, "redis://h:7000"),
])
def test_the_scheme_says_whether_the_store_is_a_cluster(url: str, cluster: bool, node: str):
    assert config.is_cluster(url) is cluster
    assert config.node_url(url) == node


def test_a_cluster_url_with_a_database_other_than_0_is_refused():
    with pytest.raises(config.StoreUrlError, match="database 0 only"):
        config.node_url("redis+cluster://h:7000/1")


def test_a_cluster_store_without_a_broker_is_a_settings_error():
    with pytest.raises(SettingsError, match="COURIER_BROKER_URL"):
        _ = Settings(redis_url=CLUSTER_URL, broker_url=None).celery_broker_url
    with pytest.raises(SettingsError):
        _ = Settings(broker_url=CLUSTER_URL).celery_broker_url


def test_a_cluster_store_uses_the_broker_it_is_given():
    settings = Settings(redis_url=CLUSTER_URL, broker_url="redis://127.0.0.1:6390/0")
    assert settings.celery_broker_url == "redis://127.0.0.1:6390/0"
    assert Settings(redis_url="redis://h:6379/0", broker_url=None).celery_broker_url == "redis://h:6379/0"


def test_courier_up_says_a_cluster_needs_a_broker_and_starts_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    code = run_up(Settings(redis_url=CLUSTER_URL, broker_url=None, data_dir=tmp_path))
    out = capsys.readouterr().out
    assert code == 2
    assert CLUSTER_NEEDS_BROKER in out
    assert "API:" not in out and not any(tmp_path.iterdir())


def test_a_worker_says_a_cluster_needs_a_broker_in_one_line():
    env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "workers.app", "worker", "--pool", "solo"],
        cwd=ROOT, env={**env, "COURIER_REDIS_URL": CLUSTER_URL},
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert CLUSTER_NEEDS_BROKER in done.stderr
    assert "Traceback" not in done.stderr


def _project_key_builders() -> list[tuple[str, object]]:
    return [(name, fn) for name, fn in inspect.getmembers(keys, inspect.isfunction)
            if next(iter(inspect.signature(fn).parameters), "") == "project_id"]


@pytest.mark.parametrize(("name", "build"), _project_key_builders())
def test_every_key_of_a_project_is_in_the_project_s_slot(name: str, build: object):
    assert callable(build)
    params = list(inspect.signature(build).parameters)
    key = build("prj_0123456789abcdef", *(f"{p}-value" for p in params[1:]))
    assert "{p:prj_0123456789abcdef}" in key
    assert key_slot(key.encode()) == key_slot(keys.project("prj_0123456789abcdef").encode())


def test_the_key_map_has_project_keys_to_check():
    assert len(_project_key_builders()) >= 10


def test_a_sentinel_url_names_its_sentinels_the_primary_and_the_nodes_password() -> None:
    url = "redis+sentinel://:p%40ss@10.0.0.1:26379,[::1]:26380,s3:26381/courier/2"
    assert config.is_sentinel(url) and not config.is_cluster(url)
    sentinels, name, options = config.sentinel_parts(url)
    assert sentinels == [("10.0.0.1", 26379), ("::1", 26380), ("s3", 26381)]
    assert (name, options) == ("courier", {"db": 2, "password": "p@ss"})


@pytest.mark.parametrize("url", ["redis+sentinel://s1:26379", "redis+sentinel:///courier",
                                 "redis+sentinel://s1/courier"])
def test_a_sentinel_url_without_sentinels_or_primary_is_refused(url: str) -> None:
    with pytest.raises(config.StoreUrlError):
        config.sentinel_parts(url)


def test_a_sentinel_store_is_its_own_broker_through_kombu_s_sentinel_transport() -> None:
    settings = Settings(redis_url="redis+sentinel://:p%40ss@10.0.0.1:26379,[::1]:26380/courier/2",
                        broker_url=None)
    assert settings.celery_broker_url == (
        "sentinel://:p%40ss@10.0.0.1:26379/2;sentinel://:p%40ss@[::1]:26380/2")
    assert settings.broker_master_name == "courier"
    options = celery_config(settings)["broker_transport_options"]
    assert options["master_name"] == "courier"


def test_a_broker_of_its_own_beside_a_sentinel_store_has_no_master_name() -> None:
    settings = Settings(redis_url="redis+sentinel://:pw@s1:26379/courier",
                        broker_url="redis://b:6379/0")
    assert settings.celery_broker_url == "redis://b:6379/0"
    assert settings.broker_master_name is None
    assert "master_name" not in celery_config(settings)["broker_transport_options"]
