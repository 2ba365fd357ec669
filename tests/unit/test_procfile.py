"""The Procfile, docker-compose.yml and ``courier up`` run the same commands."""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from messaging.config import Settings
from messaging.runtime.supervisor import child_env, process_table

ROOT = Path(__file__).resolve().parents[2]
# The one form of shell expansion the Procfile uses: ${NAME:-default}.
DEFAULT_REF = re.compile(r"\$\{(\w+):-([^}]*)\}")
COMPOSE_STORE_URL = "redis://store:6379/0"


def read_procfile() -> dict[str, str]:
    """The Procfile as {process: command}."""
    table: dict[str, str] = {}
    for line in (ROOT / "Procfile").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, command = line.partition(":")
            table[name.strip()] = command.strip()
    return table


def read_compose() -> dict[str, Any]:
    """docker-compose.yml's services."""
    services: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    return services


def shell_command(service: dict[str, Any]) -> str:
    """The command line a compose service hands to ``sh -c``, with Compose's ``$$`` undone."""
    assert service["entrypoint"] == ["/bin/sh", "-c"]
    command = service["command"]
    assert isinstance(command, list) and len(command) == 1, "sh -c takes one string"
    text: str = command[0]
    return text.replace("$$", "$")


def expand(command: str, env: dict[str, str]) -> list[str]:
    """Split a Procfile command as sh would, after expanding ${NAME:-default} from ``env``."""
    expanded = DEFAULT_REF.sub(lambda m: env.get(m[1]) or m[2], command)
    assert "$" not in expanded, f"unexpected shell syntax in {command!r}"
    argv = shlex.split(expanded)
    assert argv[0] == "python"
    return [sys.executable, *argv[1:]]


def test_procfile_store_runs_the_embedded_module() -> None:
    assert read_procfile()["store"] == "python -m messaging.runtime.embedded"


def test_compose_has_one_service_per_procfile_process_but_the_store() -> None:
    assert set(read_compose()) == set(read_procfile())


@pytest.mark.parametrize("name", sorted(set(read_procfile()) - {"store"}))
def test_compose_command_is_the_procfile_command(name: str) -> None:
    assert shell_command(read_compose()[name]) == read_procfile()[name]


def test_compose_store_is_valkey_with_aof_and_noeviction() -> None:
    store = read_compose()["store"]
    assert store["image"].startswith("valkey/valkey:8")
    args = store["command"]
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"


def test_compose_courier_services_use_the_store_service() -> None:
    for name, service in read_compose().items():
        if name != "store":
            assert service["environment"]["COURIER_REDIS_URL"] == COMPOSE_STORE_URL, name


def test_process_table_is_the_procfile_with_default_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key in [key for key in os.environ if key.startswith("COURIER_")]:
        monkeypatch.delenv(key)
    procfile = read_procfile()
    table = process_table(Settings())
    assert set(table) == set(procfile) - {"store"}
    for name, command in table.items():
        assert command == expand(procfile[name], {}), name


def test_process_table_is_the_procfile_in_the_childrens_environment(tmp_path: Path) -> None:
    settings = Settings(
        host="0.0.0.0", port=9911, flower_port=5611, data_dir=tmp_path, embedded_port=6411
    )
    procfile = read_procfile()
    env = child_env(settings)
    for name, command in process_table(settings).items():
        assert command == expand(procfile[name], env), name
