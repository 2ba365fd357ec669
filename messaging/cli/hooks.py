"""``courier hook``: the host hooks, and installing them into a project.

``courier hook install claude-code`` adds Courier's entries to the project's
``.claude/settings.json`` (one hook per event) and ``.mcp.json`` (the ``courier``
MCP server), beside whatever is there; ``uninstall`` takes out exactly those
entries. Both may be run any number of times.

What they write is theirs alone: a hook is Courier's only if its command ends
in ``HOOK_MARK`` (a shell comment, so it changes nothing when run) after a
``courier ... hook claude-code`` command, or is exactly the command this
``courier`` wrote before that mark, and the server only if it is exactly the
entry an ``install`` writes. Both files are read and checked before either is
written: a symbolic link on the way (``.claude`` or a file) or a shape Claude
Code would not read is a usage error that leaves every file as it was. Each
file is replaced whole (a new file renamed over it), never written through.

Annotations are evaluated as written (no postponed evaluation): the commands
are defined inside ``install``, where typer could not look their types up.
"""

import json
import os
import shlex
import shutil
import sys
import tempfile
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from messaging.cli import host_commands
from messaging.cli.io import Exit, Token, Url, api_url, fail, say, visible
from messaging.hosts import claude_code
from messaging.types import Json

HOOK_EVENTS = ("SessionStart", "SubagentStart", "UserPromptSubmit", "PostToolUse", "Stop",
               "SubagentStop", "SessionEnd")
HOOK_TIMEOUT_S = 10  # Claude Code's own bound on the hook; Courier's is 2 s
MCP_SERVER = "courier"
# Ends the command of every hook Courier writes: a hook without it is the user's.
HOOK_MARK = "# written by courier hook install"
NEW_FILE_MODE = 0o644  # a settings file Courier creates: the user's umask applies too


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


def hook_command(argv: list[str], host: str) -> str:
    """The command of the hooks ``install`` writes: ``courier hook HOST`` and the mark."""
    return f"{shlex.join([*argv, 'hook', host])} {HOOK_MARK}"


def _ours(entry: Any, host: str, argv: list[str]) -> bool:
    if not isinstance(entry, dict) or entry.get("type") != "command":
        return False
    command = entry.get("command")
    if command == shlex.join([*argv, "hook", host]):
        return True  # as this courier wrote it before hooks had their mark
    if not isinstance(command, str) or not command.endswith(f" {HOOK_MARK}"):
        return False
    try:
        words = shlex.split(command.removesuffix(f" {HOOK_MARK}"))
    except ValueError:
        return False
    return len(words) >= 3 and words[-2:] == ["hook", host]


def _check_settings(settings: Json, path: Path) -> None:
    """Exit 2 unless ``settings``' hooks have the shape Claude Code reads."""
    hooks = settings.get("hooks", {})
    if not isinstance(hooks, dict):
        fail(f"{visible(path)}: hooks is not a JSON object", Exit.USAGE)
    for event, groups in hooks.items():
        where = f"{visible(path)}: hooks.{visible(event)}"
        if not isinstance(groups, list):
            fail(f"{where} is not a list", Exit.USAGE)
        for n, group in enumerate(groups):
            if not isinstance(group, dict):
                fail(f"{where}[{n}] is not a JSON object", Exit.USAGE)
            entries = group.get("hooks", [])
            if not isinstance(entries, list) or not all(isinstance(h, dict) for h in entries):
                fail(f"{where}[{n}].hooks is not a list of JSON objects", Exit.USAGE)


def _check_mcp(mcp: Json, path: Path) -> None:
    """Exit 2 unless ``mcp``'s servers are an object of objects."""
    servers = mcp.get("mcpServers", {})
    if not isinstance(servers, dict):
        fail(f"{visible(path)}: mcpServers is not a JSON object", Exit.USAGE)
    for name, server in servers.items():
        if not isinstance(server, dict):
            fail(f"{visible(path)}: mcpServers.{visible(name)} is not a JSON object", Exit.USAGE)


def add_hooks(settings: Json, host: str, argv: list[str]) -> Json:
    """``settings`` with a hook group running Courier's hook for each event, unless
    it has Courier's hook already."""
    hooks = settings.setdefault("hooks", {})
    for event in HOOK_EVENTS:
        groups = hooks.setdefault(event, [])
        if not any(_ours(h, host, argv) for g in groups for h in g.get("hooks", [])):
            groups.append({"hooks": [{"type": "command", "command": hook_command(argv, host),
                                      "timeout": HOOK_TIMEOUT_S}]})
    return settings


def remove_hooks(settings: Json, host: str, argv: list[str]) -> Json:
    """``settings`` without Courier's hooks; a group, an event or the hooks table
    left empty by that goes too."""
    hooks = settings.get("hooks")
    if hooks is None:
        return settings
    for event in list(hooks):
        groups = hooks[event]
        kept = []
        for g in groups:
            if "hooks" in g:
                left = [h for h in g["hooks"] if not _ours(h, host, argv)]
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
    """Whether ``entry`` is exactly what ``install`` writes, by any ``courier``."""
    if not isinstance(entry, dict) or set(entry) != {"command", "args"}:
        return False
    command, args = entry["command"], entry["args"]
    if not isinstance(command, str) or not isinstance(args, list):
        return False
    return (Path(command).name == "courier" and args == ["mcp"]) or (
        args == ["-m", "messaging.cli", "mcp"])


class SettingsFile:
    """One JSON file of the project's settings: what it held, and what it will hold."""

    def __init__(self, project: Path, *parts: str) -> None:
        self.path = project.joinpath(*parts)
        for n in range(1, len(parts) + 1):  # every link from the project's checkout on
            step = project.joinpath(*parts[:n])
            if step.is_symlink():
                fail(f"{visible(step)} is a symbolic link to {visible(os.readlink(step))}: "
                     "Courier does not write through it (change the file it points to "
                     "by hand, or put a file of the project's own in its place)", Exit.USAGE)
        try:
            self.before = self.path.read_bytes() if self.path.exists() else None
        except OSError as e:  # a directory, a file it may not read
            fail(f"{visible(self.path)} cannot be read: {e.strerror}", Exit.USAGE)
        self.data = self._parse()

    def _parse(self) -> Json:
        if self.before is None:
            return {}
        try:
            data = json.loads(self.before.decode("utf-8") or "{}")
        except ValueError as e:
            fail(f"{visible(self.path)} is not a JSON file Courier can change: {e}", Exit.USAGE)
        if not isinstance(data, dict):
            fail(f"{visible(self.path)} does not hold a JSON object", Exit.USAGE)
        return data

    def _replace(self, content: bytes | None) -> None:
        if content is None:
            self.path.unlink(missing_ok=True)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        mode = self.path.stat().st_mode & 0o777 if self.path.exists() else None
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.",
                                   suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(content)
            if mode is None:  # mkstemp's 0600, made what a new file of the user's would be
                mask = os.umask(0)
                os.umask(mask)
                mode = NEW_FILE_MODE & ~mask
            os.chmod(tmp, mode)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def content(self) -> bytes | None:
        """The file's new bytes; ``None`` when it is left empty (it goes)."""
        if not self.data:
            return None
        return (json.dumps(self.data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")

    @staticmethod
    def write_all(files: list["SettingsFile"]) -> None:
        """Each file's new content in place of its old, or, if one cannot be
        written, every file as it was."""
        done: list[SettingsFile] = []
        try:
            for f in files:
                new = f.content()
                if new != f.before:
                    f._replace(new)
                    done.append(f)
        except OSError as e:
            for f in done:
                f._replace(f.before)
            fail(f"could not write {visible(e.filename or '')}: {e.strerror}; "
                 "every file is as it was", Exit.ERROR)


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
        channels: Annotated[claude_code.Channels, typer.Option(
            "--channels", envvar="COURIER_CHANNELS",
            help="whether the session shows courier mcp's channel events: on, off, or auto "
                 "(read from the flags of the claude that runs the hook)")]
            = claude_code.Channels.AUTO,
    ) -> None:
        """Answer one Claude Code hook event (its JSON on stdin); always exits 0."""
        options = claude_code.Options(api_url(url), token, project, name, state_dir, channels)
        raise typer.Exit(claude_code.main(options, sys.stdin.read()))

    def settings_files(project: Path) -> tuple[SettingsFile, SettingsFile]:
        settings = SettingsFile(project, ".claude", "settings.json")
        mcp = SettingsFile(project, ".mcp.json")
        _check_settings(settings.data, settings.path)
        _check_mcp(mcp.data, mcp.path)
        return settings, mcp

    @hook_app.command("install")
    def hook_install(host: Host, project: ProjectDir = Path(".")) -> None:
        """Add Courier's hooks and MCP server to the project's Claude Code settings."""
        argv = courier_argv()
        settings, mcp = settings_files(project)
        add_hooks(settings.data, host.value, argv)
        servers = mcp.data.setdefault("mcpServers", {})
        if MCP_SERVER in servers and not _our_server(servers[MCP_SERVER]):
            say(f"{mcp.path} already has a server named {MCP_SERVER}: left as it is")
        else:
            servers[MCP_SERVER] = mcp_entry(argv)
        SettingsFile.write_all([mcp, settings])
        say(f"Courier's hooks are in {settings.path} and its MCP server in {mcp.path}; "
            "the session needs COURIER_URL and COURIER_TOKEN (and COURIER_PROJECT with a "
            "project token) in its environment")

    @hook_app.command("uninstall")
    def hook_uninstall(host: Host, project: ProjectDir = Path(".")) -> None:
        """Take Courier's hooks and MCP server out of the project's settings."""
        settings, mcp = settings_files(project)
        remove_hooks(settings.data, host.value, courier_argv())
        servers = mcp.data.get("mcpServers")
        if servers is not None and _our_server(servers.get(MCP_SERVER)):
            del servers[MCP_SERVER]
            if not servers:
                del mcp.data["mcpServers"]
        SettingsFile.write_all([mcp, settings])
        say(f"Courier's entries are out of {settings.path} and {mcp.path}")

    host_commands.install_hooks(hook_app)
    root.add_typer(hook_app, name="hook")
