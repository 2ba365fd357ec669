"""The ``courier`` command without a server: help text, version, refusals before any call."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
from typer.testing import CliRunner

from messaging.cli import app
from messaging.config import get_settings

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No COURIER_* from outside, an empty working directory, settings read afresh."""
    for key in [key for key in os.environ if key.startswith("COURIER_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_help_keeps_bracketed_text_and_defaults() -> None:
    shown = runner.invoke(app, ["notify-when-idle", "--help"], env={"COLUMNS": "200"}).output
    assert "Name or 'Name [ref]' of the agent" in shown
    assert "[default: 3600]" in shown
    assert "[default: from COURIER_HOST/PORT]" in shown


def test_help_keeps_typers_own_defaults_at_80_columns() -> None:
    shown = runner.invoke(app, ["inbox", "--help"], env={"COLUMNS": "80"}).output
    assert "[default: 50" in shown, shown


def test_version_is_the_installed_distributions() -> None:
    done = runner.invoke(app, ["--version"])
    assert done.exit_code == 0
    assert done.output.strip() == f"courier {version('agent-courier')}"


@pytest.mark.parametrize("command", [["project", "create", "/srv/app"], ["lane", "prj_x", "bulk"]],
                         ids=["project create", "lane"])
def test_an_operator_command_without_a_token_says_how_to_pass_one_and_writes_nothing(
    command: list[str], tmp_path: Path,
) -> None:
    done = runner.invoke(app, [*command, "--url", "http://127.0.0.1:9"])
    assert done.exit_code == 3  # not authenticated
    for way in ("--token", "COURIER_OPERATOR_TOKEN", "COURIER_DATA_DIR"):
        assert way in done.output, done.output
    assert list(tmp_path.iterdir()) == []  # no .courier/operator-token minted here


def test_only_up_and_init_can_mint_an_operator_token() -> None:
    minting = {str(path.relative_to(ROOT)) for path in (ROOT / "messaging").rglob("*.py")
               if "resolve_operator_token(" in path.read_text()}
    assert minting == {"messaging/config.py", "messaging/launch/supervisor.py"}
    supervisor = (ROOT / "messaging/launch/supervisor.py").read_text()
    callers = [block.split("(")[0] for block in supervisor.split("\ndef ")[1:]
               if "resolve_operator_token(" in block]
    assert callers == ["init_home", "_announce"]


def test_run_names_the_procfile_processes_when_asked_for_an_unknown_one() -> None:
    done = runner.invoke(app, ["run", "nope"])
    assert done.exit_code == 2  # usage
    assert "no process 'nope'" in done.output and "api" in done.output
    assert "workers" in done.output and "worker-webhook" in done.output


def test_up_lane_is_in_the_help_and_a_bad_lane_name_starts_nothing(tmp_path: Path) -> None:
    helped = runner.invoke(app, ["up", "--help"], env={"COLUMNS": "200"})
    assert "--lane" in helped.output and "deliver.<transport>.NAME" in helped.output
    done = runner.invoke(app, ["up", "--lane", "Not_A_Lane"])
    assert done.exit_code == 2
    assert "bad lane name 'Not_A_Lane'" in done.output
    assert list(tmp_path.iterdir()) == []  # no store, no data dir


def test_up_refuses_a_worker_concurrency_below_one_before_starting_anything(
        tmp_path: Path) -> None:
    done = runner.invoke(app, ["up", "--lane", "bulk", "--concurrency", "0"],
                         env={"COLUMNS": "200"})
    assert done.exit_code == 2
    assert "--concurrency" in done.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["send", "--to", "Bob", "--subject", "hi"],
                                     ["reply", "msg_x"]], ids=["send", "reply"])
def test_a_send_from_a_terminal_without_a_body_refuses_instead_of_sending_empty(
    command: list[str],
) -> None:
    controller, terminal = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "messaging.cli", *command,
             "--token", "agt_x", "--url", "http://127.0.0.1:9"],
            stdin=terminal, capture_output=True, text=True, cwd=ROOT, timeout=60,
            env={**os.environ, "COLUMNS": "200"},
        )
    finally:
        os.close(terminal)
        os.close(controller)
    assert done.returncode == 2  # usage
    assert "no body" in done.stderr and "--body" in done.stderr
    assert "cannot reach" not in done.stderr  # refused before any request


def test_the_start_banner_says_flowers_user_and_where_its_password_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    from messaging.launch.supervisor import SUPERVISOR_NAME, _announce
    from messaging.runtime.children import Output

    settings = get_settings().model_copy(update={"data_dir": tmp_path / "data"})
    _announce(settings, Output([SUPERVISOR_NAME]))
    flower = next(line for line in capsys.readouterr().out.splitlines() if "Flower:" in line)
    assert "user operator" in flower, flower
    assert f"password: the operator token, in {tmp_path / 'data' / 'operator-token'}" in flower
    assert settings.resolve_operator_token() not in flower
