"""The ``courier`` command: run the stack, and speak the API from a terminal.

``commands`` holds the Typer app, ``targets`` the project and agent commands it
installs, ``backup`` backup and restore, ``io`` what every command prints and how
it exits.
"""

from __future__ import annotations

from messaging.cli.commands import app, main

__all__ = ["app", "main"]
