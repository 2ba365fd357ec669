"""The Procfile is the one list of processes: read, expanded and run as a shell would."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from messaging import transports
from messaging.config import Settings, get_settings
from messaging.launch import procfile, workerpool
from messaging.launch.supervisor import child_env, process_table
from messaging.transports import policy

ROOT = Path(__file__).resolve().parents[2]


def test_the_repositorys_procfile_is_the_one_courier_ships() -> None:
    assert (ROOT / "Procfile").resolve() == procfile.PROCFILE.resolve()


def test_lines_are_read_as_honcho_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "Procfile"
    path.write_text("# a comment: not a process\n\nweb: python -m http.server\nx-y_2:  sleep 1\n")
    assert procfile.read(path) == {"web": "python -m http.server", "x-y_2": "sleep 1"}


def test_defaults_expand_from_the_environment_and_python_is_this_interpreter() -> None:
    line = "python -m uvicorn app --host ${HOST:-127.0.0.1} --port ${PORT:-8787}"
    assert procfile.argv(line, {"PORT": "9000"}) == [
        sys.executable, "-m", "uvicorn", "app", "--host", "127.0.0.1", "--port", "9000"]


@pytest.mark.parametrize("line", ["run $HOME", "a | b", "a; b", "a && b", "echo `id`"])
def test_other_shell_syntax_is_refused_rather_than_run_differently(line: str) -> None:
    with pytest.raises(procfile.ProcfileError):
        procfile.argv(line, {})


def test_courier_up_runs_every_process_but_the_store_from_the_procfile(tmp_path: Path) -> None:
    settings = Settings(host="0.0.0.0", port=9911, flower_port=5611, data_dir=tmp_path)
    table = process_table(settings)
    kinds = list(transports.installed())
    expected: list[str] = []
    for name in procfile.read():
        if name == "workers":
            expected += [f"worker-{kind}" for kind in kinds]
        elif name != procfile.STORE:
            expected.append(name)
    assert list(table) == expected and {"worker-inbox", "worker-webhook"} <= set(table)
    assert table["api"][-4:] == ["--host", "0.0.0.0", "--port", "9911"]
    assert str(tmp_path / "celerybeat-schedule") in table["beat"]
    assert "--port=5611" in table["flower"]


def test_children_get_every_set_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [key for key in os.environ if key.startswith("COURIER_")]:
        monkeypatch.delenv(key)
    env = child_env(Settings(data_dir=tmp_path, redis_url="redis://db:6379/0"))
    assert env["COURIER_REDIS_URL"] == "redis://db:6379/0"
    assert env["COURIER_DATA_DIR"] == str(tmp_path)
    assert "COURIER_OPERATOR_TOKEN" not in env


def test_the_workers_line_is_one_worker_per_installed_transport_with_its_own_options() -> None:
    table = workerpool.commands()
    assert set(table) == {f"worker-{kind}" for kind in transports.installed()}
    for kind in transports.installed():
        argv = table[f"worker-{kind}"]
        assert argv[:6] == [sys.executable, "-m", "celery", "-A", "workers.app", "worker"]
        assert "-E" in argv
        assert argv[argv.index("-n") + 1] == f"{kind}@%h"
        chosen = policy.policy(kind, get_settings())
        assert argv[argv.index("-c") + 1] == str(chosen.concurrency)
        assert argv[argv.index("--prefetch-multiplier") + 1] == str(chosen.prefetch)
        assert argv[argv.index("--loglevel") + 1] == "INFO"
    queues = {name: argv[argv.index("-Q") + 1] for name, argv in table.items()}
    assert queues["worker-inbox"] == "deliver.inbox,courier.sweep"
    assert queues["worker-webhook"] == "deliver.webhook"
    assert sum("courier.sweep" in q for q in queues.values()) == 1


def test_a_lanes_workers_serve_only_its_queues_under_names_of_their_own() -> None:
    table = workerpool.commands("bulk-2")
    queues = {name: argv[argv.index("-Q") + 1] for name, argv in table.items()}
    assert queues == {f"worker-{kind}": f"deliver.{kind}.bulk-2"
                      for kind in transports.installed()}
    assert table["worker-webhook"][table["worker-webhook"].index("-n") + 1] == (
        "webhook.bulk-2@%h")


def test_worker_concurrency_sets_the_processes_of_every_worker_shared_or_on_a_lane(
        tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, redis_url="redis://db:6379/0", worker_concurrency=3)
    tables = [process_table(settings), workerpool.commands("bulk", 3)]
    for table in tables:
        workers = [argv for name, argv in table.items() if name.startswith("worker-")]
        assert len(workers) == len(transports.installed())
        assert all(argv[argv.index("-c") + 1] == "3" for argv in workers)
    with pytest.raises(ValueError, match="worker_concurrency"):
        Settings(worker_concurrency=0)


@pytest.mark.parametrize("name", ["", "Bulk", "a" * 33, "x_y", "a.b", "a b"])
def test_a_lane_name_courier_would_refuse_is_refused_by_name(name: str) -> None:
    with pytest.raises(workerpool.LaneNameError, match="bad lane name"):
        workerpool.check_lane(name)
    assert workerpool.check_lane("a" * 32) == "a" * 32
