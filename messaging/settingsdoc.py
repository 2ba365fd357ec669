"""The settings reference, docs/configuration.md, generated from the code.

``python tools/configuration_doc.py > docs/configuration.md`` writes it from the
settings class (every field, its default and its description) and from the
CLI's options that read an environment variable of their own. The CLI's
command tree is handed in, so this module, beside the layers, imports none of
them. A unit test fails when the file differs from what this prints, or when
a setting has no description.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from messaging.config import Settings

PREFIX = "COURIER_"
# The default of a setting computed at start (its description says how).
COMPUTED = "computed"
GENERATED = "python tools/configuration_doc.py > docs/configuration.md"
HEADER = f"""# Configuration

<!-- Generated from the code by `{GENERATED}`: edit the descriptions there. -->

Courier reads its settings from the environment. Every server process
(`courier up`, `courier run NAME`, the Procfile under honcho, Compose) reads
the same ones; `courier up` hands its own to the processes it starts. A value
that does not parse stops the process at start with the setting named.
"""
SERVER = """## Server settings

| Variable | Default | Meaning |
|---|---|---|
"""
CLI = """## The command line's own

Read by `courier` commands that talk to a running API (besides
`COURIER_OPERATOR_TOKEN`, `COURIER_DATA_DIR`, `COURIER_HOST` and `COURIER_PORT`
above). A command-line option of the same name wins.

| Variable | Option | Meaning |
|---|---|---|
"""


def env_name(field: str) -> str:
    """The environment variable of a settings field."""
    return PREFIX + field.upper()


def shown_default(value: Any) -> str:
    """A default as the table shows it."""
    if value is None or value == "":
        return "unset"
    if isinstance(value, bool):
        return "`1`" if value else "`0`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, Path):
        value = f"./{value}"
    return f"`{value}`"


def _cell(text: str) -> str:
    """Text fit for one table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def server_rows() -> list[tuple[str, str, str]]:
    """(variable, default, description) of every field of the settings class."""
    return [(env_name(name),
             COMPUTED if field.default_factory is not None else shown_default(field.default),
             field.description or "") for name, field in Settings.model_fields.items()]


def _commands(group: Any, path: str = "courier") -> Iterator[tuple[str, Any]]:
    """Every command of the CLI (Typer's click commands) with its full name."""
    yield path, group
    for name, command in sorted(getattr(group, "commands", {}).items()):
        yield from _commands(command, f"{path} {name}")


def cli_rows(cli: Any) -> list[tuple[str, str, str]]:
    """(variable, option, help) of every option of ``cli`` (the CLI's click command)
    read from the environment that is not a server setting."""
    server = {env_name(name) for name in Settings.model_fields}
    found: dict[str, tuple[str, str]] = {}
    for _, command in _commands(cli):
        for param in command.params:
            envvars = [param.envvar] if isinstance(param.envvar, str) else param.envvar or []
            for var in envvars:
                if var in server:
                    continue
                option = "/".join(param.opts)
                text = getattr(param, "help", None) or ""
                found.setdefault(var, (option, text))
    return [(var, option, text) for var, (option, text) in sorted(found.items())]


def markdown(cli: Any) -> str:
    """docs/configuration.md, with the options of ``cli`` (the CLI's click command)."""
    out = [HEADER, "\n", SERVER]
    out += [f"| `{var}` | {_cell(default)} | {_cell(text)} |\n"
            for var, default, text in server_rows()]
    out += ["\n", CLI]
    out += [f"| `{var}` | `{option}` | {_cell(text)} |\n" for var, option, text in cli_rows(cli)]
    return "".join(out)

