"""``courier hook codex|gemini|cursor`` (presence from a host's turn-end events,
``messaging.hosts.turns``) and ``courier resume claude-code`` (an exited session
resumed by its mail, ``messaging.hosts.resume``).

Annotations are evaluated as written (no postponed evaluation): the commands
are defined inside ``install``, where typer could not look their types up.
"""

import shlex
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from messaging.cli.io import Exit, Token, Url, api_url, call, fail
from messaging.hosts import resume as resuming
from messaging.hosts import turns


class ResumeHost(StrEnum):
    """Hosts whose sessions Courier can resume."""

    CLAUDE_CODE = "claude-code"


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


def install_resume(root: typer.Typer) -> None:
    """Add ``courier resume`` to ``root`` (the ``courier`` app)."""

    @root.command("resume")
    def resume(
        host: ResumeHost,
        session: Annotated[str | None, typer.Option(
            help="the session to resume [default: the one the agent is bound to]")] = None,
        cwd: Annotated[Path, typer.Option(
            exists=True, file_okay=False,
            help="where the session runs: the project's checkout")] = Path("."),
        claude: Annotated[str, typer.Option(
            help="the command that runs Claude Code, with any options of yours "
                 "(e.g. 'claude --permission-mode acceptEdits')")] = "claude",
        turn_timeout_s: Annotated[float, typer.Option(
            min=1, help="end a resumed turn that runs longer than this")] = 3600.0,
        state_file: Annotated[Path | None, typer.Option(
            help="keep the last event handled here, and go on after it")] = None,
        count: Annotated[int | None, typer.Option(
            min=1, help="stop after this many resumes")] = None,
        url: Url = None,
        token: Token = None,
    ) -> None:
        """Resume the agent's exited Claude Code session headless when wake mail comes
        (runs until stopped; the agent's token)."""
        if not token:
            fail("no token: pass --token or set COURIER_TOKEN (the agent's token)", Exit.DENIED)
        argv = shlex.split(claude)
        if not argv:
            fail("--claude names no command", Exit.USAGE)
        options = resuming.Options(url=api_url(url), token=token, session_id=session,
                                   cwd=cwd.resolve(), claude=argv,
                                   turn_timeout_s=turn_timeout_s, state_file=state_file,
                                   count=count)
        try:
            call(url, token, resuming.run, options)
        except KeyboardInterrupt:
            return
