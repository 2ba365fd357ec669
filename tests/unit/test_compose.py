"""docker-compose.yml: valid Compose, runs the Procfile's processes, scalable, not as root."""

from __future__ import annotations

import copy
import json
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from messaging.runtime import procfile

ROOT = Path(__file__).resolve().parents[2]


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def compose_schema() -> dict[str, Any]:
    """The Compose specification's JSON schema, as check-jsonschema ships it."""
    text = (files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


def test_the_file_validates_against_the_compose_schema() -> None:
    jsonschema.validate(compose(), compose_schema())


def test_the_schema_check_does_refuse_a_broken_file() -> None:
    broken = copy.deepcopy(compose())
    broken["services"]["api"]["ports"] = {"8787": "8787"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, compose_schema())


def test_every_courier_service_runs_a_process_of_the_procfile() -> None:
    processes = procfile.read()
    for name, service in compose()["services"].items():
        if name in ("store", "init"):
            continue
        assert service["entrypoint"] == ["courier", "run"], name
        (process,) = service["command"]
        assert process in processes and process != procfile.STORE, name


def test_the_token_is_made_once_by_init_before_any_process_starts() -> None:
    services = compose()["services"]
    assert services["init"]["entrypoint"] == ["courier", "init"]
    for name, service in services.items():
        if name not in ("store", "init"):
            assert service["depends_on"]["init"] == {
                "condition": "service_completed_successfully"}, name


def test_the_api_publishes_no_fixed_host_port_so_it_can_scale() -> None:
    for port in compose()["services"]["api"].get("ports", []):
        host, _, container = str(port).rpartition(":")
        assert host.endswith(":") or host == "", f"fixed host port in {port!r}"


def test_the_store_keeps_larger_hash_values_compact_and_never_evicts() -> None:
    args = compose()["services"]["store"]["command"]
    assert args[args.index("--hash-max-listpack-value") + 1] == "2048"
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    assert args[args.index("--appendonly") + 1] == "yes"


def test_the_image_runs_courier_as_a_user_of_its_own() -> None:
    dockerfile = compose()["x-courier"]["build"]["dockerfile_inline"]
    users = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")


def test_the_build_context_leaves_out_environments_store_data_and_history() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    ignored = {line.strip().rstrip("/") for line in lines}
    assert {".venv", ".courier", ".git"} <= ignored
