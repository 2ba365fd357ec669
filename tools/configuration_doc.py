"""Print docs/configuration.md: ``python tools/configuration_doc.py > docs/configuration.md``.

The settings reference is written by ``messaging.settingsdoc``; the CLI's
command tree is handed to it from here, so that module imports no layer.
"""

from __future__ import annotations

import sys

import typer.main

from messaging.cli import app
from messaging.settingsdoc import markdown


def main() -> int:
    """Print docs/configuration.md."""
    sys.stdout.write(markdown(typer.main.get_command(app)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
