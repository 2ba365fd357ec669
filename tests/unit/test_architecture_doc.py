"""docs/architecture.md names every module of messaging/ and workers/."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
FOLDERS_HEADING = "## The code, folder by folder"
# A package's entry in the folder listing: its name and a slash, at the margin
# or indented two spaces ("  web/           the faces: ...").
ENTRY = re.compile(r"^ {0,2}([a-z_]+)/(\s|$)")


def folder_entries(doc: str) -> dict[str, str]:
    """{package: its text in the folder listing} (``web``, ``store``, ``workers``, ...)."""
    listing = doc.split(FOLDERS_HEADING, 1)[1].split("```")[1]
    entries: dict[str, str] = {}
    current = ""
    for line in listing.splitlines():
        if match := ENTRY.match(line):
            current = match.group(1)
        entries[current] = entries.get(current, "") + line + "\n"
    return entries


def unnamed(doc: str) -> list[str]:
    """The modules the doc does not name: a package's by name in its entry of the
    folder listing (``views`` or ``views.py``), a top-level one by file name anywhere."""
    entries = folder_entries(doc)
    missing = []
    for path in sorted([*ROOT.glob("messaging/**/*.py"), *ROOT.glob("workers/**/*.py")]):
        if path.name in {"__init__.py", "__main__.py"}:
            continue
        parts = path.relative_to(ROOT).parts
        if parts[0] == "messaging" and len(parts) == 2:
            named = path.name in doc
        else:
            package = parts[0] if parts[0] == "workers" else parts[1]
            named = re.search(rf"\b{re.escape(path.stem)}\b", entries.get(package, "")) is not None
        if not named:
            missing.append(str(path.relative_to(ROOT)))
    return missing


def test_the_architecture_names_every_module() -> None:
    missing = unnamed(DOC.read_text())
    assert not missing, f"docs/architecture.md does not name: {missing}"


def test_the_check_does_catch_a_module_left_out() -> None:
    doc = DOC.read_text().replace("refusals.py", "").replace("lookalikes.py", "")
    assert {"messaging/web/refusals.py", "messaging/lookalikes.py"} <= set(unnamed(doc))
