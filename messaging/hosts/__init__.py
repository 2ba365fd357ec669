"""Host adapters: what carries an agent's mail into the session of the host it runs in.

``mcp_stdio`` is ``courier mcp``, the MCP server over stdio that hosts spawn;
``turns`` is ``courier hook codex|gemini|cursor``, those hosts' turn-end events
reported as the agent's presence; ``resume`` is ``courier resume claude-code``,
an exited Claude Code session resumed headless by its wake mail;
``claude_code`` is ``courier hook claude-code``, Claude Code's hook protocol;
``watching`` is ``courier watch --exec``; ``wrapping`` is how all of them show
mail. They speak to Courier only as a client does (its HTTP API, its ``/mcp``), with
the agent's token.
"""
