"""Write constraints.txt: the versions this venv holds of everything Courier needs to run.

``./dev lock`` runs it, once the venv holds what requirements.lock pins. It
walks Courier's runtime requirements (no extras: the image runs against an
external store) through the installed distributions' metadata, markers
evaluated for this interpreter, and pins each one at the version installed
here, the lock's. The Dockerfile installs exactly these before it copies the
source.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "constraints.txt"
PROJECT = "agent-courier"
HEADER = """\
# Courier's runtime dependencies, pinned: what the image installs before the
# source (Dockerfile). Generated from the venv, at requirements.lock's versions,
# by `./dev lock`; regenerate after changing pyproject.toml's dependencies.
"""


def _wanted(req: Requirement, extras: set[str]) -> bool:
    """True when the requirement applies here with these extras active."""
    if req.marker is None:
        return True
    return any(req.marker.evaluate({"extra": extra}) for extra in (extras or {""}))


def pins(project: str = PROJECT) -> dict[str, str]:
    """{distribution name: installed version} of every runtime requirement, recursively."""
    found: dict[str, str] = {}
    done: set[tuple[str, frozenset[str]]] = set()
    todo: list[tuple[str, frozenset[str]]] = [(project, frozenset())]
    while todo:
        name, extras = todo.pop()
        if (canonicalize_name(name), extras) in done:
            continue
        done.add((canonicalize_name(name), extras))
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue  # a requirement of a marker that does not apply here
        if canonicalize_name(name) != canonicalize_name(project):
            found[canonicalize_name(dist.metadata["Name"])] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            if _wanted(req, set(extras)):
                todo.append((req.name, frozenset(req.extras)))
    return found


def render(found: dict[str, str]) -> str:
    """The constraints file's text."""
    return HEADER + "".join(f"{name}=={version}\n" for name, version in sorted(found.items()))


def main() -> int:
    """Write constraints.txt."""
    TARGET.write_text(render(pins()))
    print(f"wrote {TARGET.name}: {len(pins())} pins")
    return 0


if __name__ == "__main__":
    sys.exit(main())
