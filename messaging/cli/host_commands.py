"""``courier hook codex|gemini|cursor``: presence from a host's turn-end events
(``messaging.hosts.turns``).

Annotations are evaluated as written (no postponed evaluation): the commands
are defined inside ``install``, where typer could not look their types up.
"""

import sys
from typing import Annotated

import typer

from messaging.cli.io import Token, Url, api_url
from messaging.hosts import turns


def install_hooks(hook_app: typer.Typer) -> None:
    """Add the turn-end hooks of Codex, Gemini CLI and Cursor to ``courier hook``."""

    @hook_app.command("codex")
    def hook_codex(
        notification: Annotated[str | None, typer.Argument(
            help="the notification's JSON, as Codex's notify appends it")] = None,
        url: Url = None,
        token: Token = None,
    ) -> None:
        """Codex's notify program: agent-turn-complete sets the agent idle; always exits 0."""
        raise typer.Exit(turns.main(turns.TurnHost.CODEX, api_url(url), token, notification))

    @hook_app.command("gemini")
    def hook_gemini(url: Url = None, token: Token = None) -> None:
        """Answer one Gemini CLI hook event (its JSON on stdin) with presence; always exits 0."""
        raise typer.Exit(turns.main(turns.TurnHost.GEMINI, api_url(url), token,
                                    sys.stdin.read()))

    @hook_app.command("cursor")
    def hook_cursor(url: Url = None, token: Token = None) -> None:
        """Answer one Cursor hook event (its JSON on stdin) with presence; always exits 0."""
        raise typer.Exit(turns.main(turns.TurnHost.CURSOR, api_url(url), token,
                                    sys.stdin.read()))
