"""The Procfile: Courier's one list of processes, read by ``courier up`` and ``courier run``.

The file ships inside the package (the repository's ``Procfile`` links to it),
so an installed Courier runs the same commands as honcho in a checkout. Its
commands use plain words and ``${NAME:-default}`` only: expanding them here
from the environment gives what ``sh -c`` would run.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

PROCFILE = Path(__file__).with_name("Procfile")
STORE = "store"
# A process line, as honcho and foreman read it: "name: command".
LINE = re.compile(r"^([A-Za-z0-9_-]+):\s*(.+)$")
# The one form of shell expansion a command may use.
DEFAULT_REF = re.compile(r"\$\{(\w+):-([^}]*)\}")


class ProcfileError(ValueError):
    """A Procfile line Courier cannot run the way a shell would."""


def read(path: Path = PROCFILE) -> dict[str, str]:
    """The Procfile as {process name: command line}, in file order."""
    table: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if match := LINE.match(line.strip()):
            table[match[1]] = match[2].strip()
    return table


def argv(command: str, env: Mapping[str, str]) -> list[str]:
    """A command line as its argv, ``${NAME:-default}`` expanded from ``env``.

    A leading ``python`` is this interpreter, so an installed Courier runs its own.

    Raises:
        ProcfileError: the line uses shell syntax other than ``${NAME:-default}``.
    """
    expanded = DEFAULT_REF.sub(lambda m: env.get(m[1]) or m[2], command)
    if "$" in expanded or any(c in expanded for c in "|&;<>`"):
        raise ProcfileError(f"unsupported shell syntax in {command!r}")
    words = shlex.split(expanded)
    if words and words[0] == "python":
        words[0] = sys.executable
    return words


def commands(env: Mapping[str, str], path: Path = PROCFILE) -> dict[str, list[str]]:
    """Every process of the Procfile as an argv, expanded from ``env``."""
    return {name: argv(command, env) for name, command in read(path).items()}


def exec_process(name: str) -> None:
    """Replace this process with the Procfile's process ``name`` (``courier run``).

    Raises:
        KeyError: the Procfile has no such process.
    """
    table = read()
    if name not in table:
        raise KeyError(name)
    words = argv(table[name], os.environ)
    os.execvp(words[0], words)
