"""``courier hook``: the host hooks, and installing them into a project.

``courier hook install claude-code`` adds Courier's entries to the project's
``.claude/settings.json`` (one hook per event) and ``.mcp.json`` (the ``courier``
MCP server), beside whatever is there; ``uninstall`` takes out exactly those
entries. Both may be run any number of times.

Annotations are evaluated as written (no postponed evaluation): the commands
are defined inside ``install``, where typer could not look their types up.
"""

import json
import shlex
import shutil
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from messaging.cli import claude_code, host_commands
from messaging.cli.io import Exit, Token, Url, api_url, fail, say
from messaging.types import Json

HOOK_EVENTS = ("SessionStart", "SubagentStart", "UserPromptSubmit", "PostToolUse", "Stop",
               "SubagentStop", "SessionEnd")
HOOK_TIMEOUT_S = 10  # Claude Code's own bound on the hook; Courier's is 2 s
MCP_SERVER = "courier"



class Host(StrEnum):
    """Hosts Courier has hooks for."""

    CLAUDE_CODE = "claude-code"


def courier_argv() -> list[str]:
    """How the host should run this ``courier``: its name when the PATH finds this
    same program, its full path otherwise, or this Python with ``-m messaging.cli``
    when it runs as a module."""
    me = Path(sys.argv[0])
    if me.name != "courier":
        return [sys.executable, "-m", "messaging.cli"]
    found = shutil.which("courier")
    return ["courier"] if found and Path(found).resolve() == me.resolve() else [str(me.resolve())]


def _read(path: Path) -> Json:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (ValueError, OSError) as e:
        fail(f"{path} is not a JSON file Courier can change: {e}", Exit.USAGE)
    if not isinstance(data, dict):
        fail(f"{path} does not hold a JSON object", Exit.USAGE)
    return data


def _write(path: Path, data: Json) -> None:
    if not data:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _ours(entry: Any, command: str) -> bool:
    return isinstance(entry, dict) and entry.get("type") == "command" and str(
        entry.get("command", "")).endswith(command)


def add_hooks(settings: Json, command: str, marker: str) -> Json:
    """``settings`` with a hook group running ``command`` for each event, unless it
    has one ending in ``marker`` already."""
    hooks = settings.setdefault("hooks", {})
    for event in HOOK_EVENTS:
        groups = hooks.setdefault(event, [])
        if not any(_ours(h, marker) for g in groups if isinstance(g, dict)
                   for h in g.get("hooks", [])):
            groups.append({"hooks": [{"type": "command", "command": command,
                                      "timeout": HOOK_TIMEOUT_S}]})
    return settings


def remove_hooks(settings: Json, marker: str) -> Json:
    """``settings`` without the hooks whose command ends in ``marker``; a group, an
    event or the hooks table left empty by that goes too."""
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return settings
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept = []
        for g in groups:
            if isinstance(g, dict) and isinstance(g.get("hooks"), list):
                left = [h for h in g["hooks"] if not _ours(h, marker)]
                if not left and g["hooks"]:
                    continue
                g = {**g, "hooks": left}
            kept.append(g)
        if kept or not groups:
            hooks[event] = kept
        else:
            del hooks[event]
    if not hooks:
        del settings["hooks"]
    return settings


def mcp_entry(argv: list[str]) -> Json:
    return {"command": argv[0], "args": [*argv[1:], "mcp"]}


def _our_server(entry: Any) -> bool:
    if not isinstance(entry, dict) or not isinstance(entry.get("args"), list):
        return False
    args = entry["args"]
    return bool(args) and args[-1] == "mcp" and (
        Path(str(entry.get("command", ""))).name == "courier"
        or args[:-1] == ["-m", "messaging.cli"])


def install(root: typer.Typer) -> None:
    """Add the ``hook`` commands to ``root`` (the ``courier`` app)."""
    hook_app = typer.Typer(help="Hooks that carry mail into an agent host's session.",
                           no_args_is_help=True)
    ProjectDir = Annotated[Path, typer.Option(
        "--project", help="the project's checkout [default: the current directory]")]

    @hook_app.command("claude-code")
    def hook_claude_code(
        url: Url = None,
        token: Token = None,
        project: Annotated[str | None, typer.Option(
            "--project", envvar="COURIER_PROJECT",
            help="with a project token: the project its sessions' agents join")] = None,
        name: Annotated[str, typer.Option(
            "--name", envvar="COURIER_AGENT_NAME",
            help="with a project token: the name a session's agent takes")]
            = claude_code.DEFAULT_NAME,
        state_dir: Annotated[Path | None, typer.Option(
            "--state-dir", envvar="COURIER_HOOK_STATE_DIR",
            help="where sessions' hook state is kept "
                 "[default: $XDG_STATE_HOME/courier/claude-code]")] = None,
    ) -> None:
        """Answer one Claude Code hook event (its JSON on stdin); always exits 0."""
        options = claude_code.Options(api_url(url), token, project, name, state_dir)
        raise typer.Exit(claude_code.main(options, sys.stdin.read()))

    @hook_app.command("install")
    def hook_install(host: Host, project: ProjectDir = Path(".")) -> None:
        """Add Courier's hooks and MCP server to the project's Claude Code settings."""
        argv = courier_argv()
        settings_path = project / ".claude" / "settings.json"
        _write(settings_path, add_hooks(_read(settings_path),
                                        shlex.join([*argv, "hook", host.value]),
                                        f"hook {host.value}"))
        mcp_path = project / ".mcp.json"
        mcp = _read(mcp_path)
        servers = mcp.setdefault("mcpServers", {})
        if MCP_SERVER in servers and not _our_server(servers[MCP_SERVER]):
            say(f"{mcp_path} already has a server named {MCP_SERVER}: left as it is")
        else:
            servers[MCP_SERVER] = mcp_entry(argv)
            _write(mcp_path, mcp)
        say(f"Courier's hooks are in {settings_path} and its MCP server in {mcp_path}; "
            "the session needs COURIER_URL and COURIER_TOKEN (and COURIER_PROJECT with a "
            "project token) in its environment")

    @hook_app.command("uninstall")
    def hook_uninstall(host: Host, project: ProjectDir = Path(".")) -> None:
        """Take Courier's hooks and MCP server out of the project's settings."""
        settings_path = project / ".claude" / "settings.json"
        if settings_path.exists():
            _write(settings_path, remove_hooks(_read(settings_path),
                                               f"hook {host.value}"))
        mcp_path = project / ".mcp.json"
        if mcp_path.exists():
            mcp = _read(mcp_path)
            servers = mcp.get("mcpServers")
            if isinstance(servers, dict) and _our_server(servers.get(MCP_SERVER)):
                del servers[MCP_SERVER]
                if not servers:
                    del mcp["mcpServers"]
                _write(mcp_path, mcp)
        say(f"Courier's entries are out of {settings_path} and {mcp_path}")

    host_commands.install_hooks(hook_app)
    root.add_typer(hook_app, name="hook")
