"""The ``courier`` command: run the stack, and speak the API from a terminal."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import httpx
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from messaging.client import CourierAPIError, CourierClient
from messaging.config import get_settings

app = typer.Typer(help="Courier: Markdown messages between the agents of one project.",
                  no_args_is_help=True, add_completion=False)
project_app = typer.Typer(help="Projects (operator token).", no_args_is_help=True)
agent_app = typer.Typer(help="Agents (project token).", no_args_is_help=True)
app.add_typer(project_app, name="project")
app.add_typer(agent_app, name="agent")

out = Console()
err = Console(stderr=True)

Url = Annotated[str | None, typer.Option("--url", envvar="COURIER_URL",
                                         help="API URL [default: from COURIER_HOST/PORT]")]
Token = Annotated[str | None, typer.Option("--token", envvar="COURIER_TOKEN",
                                           help="bearer token (project or agent)")]
AsJson = Annotated[bool, typer.Option("--json", help="print the raw JSON answer")]


def _url(url: str | None) -> str:
    if url:
        return url
    s = get_settings()
    return f"http://{s.host}:{s.port}"


def _fail(message: str) -> NoReturn:
    err.print(f"[red]error:[/red] {message}")
    raise typer.Exit(1)


def _call(url: str | None, token: str | None, fn: Any, *args: Any, **kwargs: Any) -> Any:
    if not token:
        _fail("no token: pass --token or set COURIER_TOKEN")
    with CourierClient(_url(url), token) as client:
        try:
            return fn(client, *args, **kwargs)
        except CourierAPIError as e:
            details = f"\n{json.dumps(e.details, indent=2)}" if e.details else ""
            _fail(f"{e}{details}")
        except (httpx.TransportError, OSError) as e:
            _fail(f"cannot reach {_url(url)}: {e}")


def _print_json(data: Any) -> None:
    out.print_json(json.dumps(data, ensure_ascii=False))


@app.command()
def up() -> None:
    """Run store (embedded unless COURIER_REDIS_URL), API, workers, beat and Flower."""
    from messaging.supervisor import run_up

    raise typer.Exit(run_up(get_settings()))


@project_app.command("create")
def project_create(
    project_key: Annotated[str, typer.Argument(help="absolute path of the checkout")],
    name: Annotated[str | None, typer.Option(help="a display name")] = None,
    url: Url = None,
    token: Annotated[str | None, typer.Option("--token", envvar="COURIER_OPERATOR_TOKEN",
                                              help="operator token [default: data dir]")] = None,
    as_json: AsJson = False,
) -> None:
    """Create a project; prints its token (shown once)."""
    token = token or get_settings().resolve_operator_token()
    p = _call(url, token, CourierClient.create_project, str(Path(project_key)), name)
    if as_json:
        _print_json(p)
        return
    out.print(f"project {p['project_id']} ({p['project_key']})")
    out.print(f"project token (shown once): {p['token']}")


@agent_app.command("register")
def agent_register(
    project_id: str,
    name: str,
    webhook: Annotated[str | None, typer.Option(help="deliver by POST to this URL")] = None,
    secret: Annotated[str | None, typer.Option(help="webhook signing secret")] = None,
    program: Annotated[str | None, typer.Option()] = None,
    model: Annotated[str | None, typer.Option()] = None,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Register an agent; prints its token (shown once)."""
    transport: dict[str, Any] = {"kind": "inbox"}
    if webhook:
        transport = {"kind": "webhook", "url": webhook, **({"secret": secret} if secret else {})}
    fields = {k: v for k, v in {"program": program, "model": model}.items() if v}
    a = _call(url, token, CourierClient.register_agent, project_id, name, transport, **fields)
    if as_json:
        _print_json(a)
        return
    out.print(f"agent {escape(a['label'])} ({a['agent_id']})")
    out.print(f"agent token (shown once): {a['token']}")


@app.command()
def agents(project_id: str, url: Url = None, token: Token = None, as_json: AsJson = False) -> None:
    """List a project's agents."""
    rows = _call(url, token, CourierClient.list_agents, project_id)
    if as_json:
        _print_json(rows)
        return
    table = Table("agent", "status", "presence", "transport", "last active")
    for r in rows:
        table.add_row(escape(r["label"]), r["status"], r["presence"], r["transport"]["kind"],
                      r["last_active_ts"])
    out.print(table)


def _read_body(body: str | None, body_file: Path | None) -> str:
    if body is not None:
        return body
    if body_file is not None:
        return body_file.read_text(encoding="utf-8")
    if not sys.stdin.isatty():
        return sys.stdin.read()
    return ""


@app.command()
def send(
    to: Annotated[list[str], typer.Option("--to", help="recipient (repeat for more)")],
    subject: Annotated[str, typer.Option(help="one line")],
    body: Annotated[str | None, typer.Option(help="Markdown body [default: stdin]")] = None,
    body_file: Annotated[Path | None, typer.Option(help="read the body from a file")] = None,
    cc: Annotated[list[str] | None, typer.Option(help="copied recipient")] = None,
    importance: Annotated[str | None, typer.Option(help="low, normal, high, urgent")] = None,
    topic: Annotated[str | None, typer.Option()] = None,
    idempotency_key: Annotated[str | None, typer.Option()] = None,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Send a message as the agent of the token."""
    fields = {k: v for k, v in {"cc": cc, "importance": importance, "topic": topic,
                                "idempotency_key": idempotency_key}.items() if v}
    m = _call(url, token, CourierClient.send, to, subject, _read_body(body, body_file), **fields)
    if as_json:
        _print_json(m)
        return
    replay = " (replayed)" if m["idempotent_replay"] else ""
    out.print(f"admitted {m['id']}{replay}")
    for o in m["delivery"]["observations"]:
        out.print(f"  delivery {o['delivery_id']} -> {escape(o['recipient'])} ({o['transport']})")
    for w in m["delivery"]["warnings"]:
        out.print(f"  [yellow]warning:[/yellow] {escape(w)}")


@app.command()
def inbox(
    limit: Annotated[int, typer.Option(min=1, max=500)] = 50,
    cursor: Annotated[str | None, typer.Option(help="a next_cursor from before")] = None,
    unread_only: Annotated[bool, typer.Option("--unread-only")] = False,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Show one page of the inbox of the token's agent, oldest first."""
    page = _call(url, token, CourierClient.inbox, cursor=cursor, limit=limit,
                 unread_only=unread_only or None)
    if as_json:
        _print_json(page)
        return
    for m in page["messages"]:
        out.rule(escape(f"{m['subject']}  from {m['from']}  ({m['importance']})"))
        out.print(f"id {m['id']}  sent {m['created_ts']}  delivery {m['delivery_id']}")
        out.print(m["body_md"], markup=False, highlight=False)
    if not page["messages"]:
        out.print("no new messages")
    out.print(f"next cursor: {page['next_cursor']}")


@app.command()
def delivery(delivery_id: str, url: Url = None, token: Token = None,
             as_json: AsJson = False) -> None:
    """Show what happened to one delivery, stage by stage."""
    d = _call(url, token, CourierClient.delivery, delivery_id)
    if as_json:
        _print_json(d)
        return
    out.print(f"delivery {d['delivery_id']} of {d['message_id']} to {escape(d['recipient'])} "
              f"over {d['transport']}: outcome {d['outcome'] or '-'}")
    table = Table("stage", "at")
    for stage, ts in d["stages"].items():
        table.add_row(stage, ts)
    out.print(table)
    for a in d["attempts"]:
        out.print(f"attempt {a['n']}: {a['started_ts']} .. {a['ended_ts'] or '-'}"
                  + (f"  {escape(a['error'])}" if a.get("error") else ""))


def main() -> None:
    """Entry point of the ``courier`` script."""
    app()


if __name__ == "__main__":
    main()
