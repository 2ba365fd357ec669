"""``courier mcp``: the MCP server over stdio that agent hosts spawn
(``messaging.hosts.mcp_stdio``)."""

import typer

from messaging.cli.io import Exit, Token, Url, api_url, fail


def install(root: typer.Typer) -> None:
    """Add the command to ``root`` (the ``courier`` app)."""

    @root.command("mcp")
    def mcp(url: Url = None, token: Token = None) -> None:
        """Serve Courier's MCP tools over stdio, pushing each new wake message into the session.

        For hosts that spawn their MCP servers: the token is an agent's.
        """
        if not token:
            fail("no token: pass --token or set COURIER_TOKEN (an agent's token)", Exit.DENIED)
        from messaging.hosts import mcp_stdio

        mcp_stdio.run(api_url(url), token)
