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

from messaging import __version__, cli_backup
from messaging.client import CourierAPIError, CourierClient, Event
from messaging.config import OperatorTokenMissing, get_settings

# Help text is plain text: Rich markup would eat `Name [ref]` and `[default: ...]`.
app = typer.Typer(help="Courier: Markdown messages between the agents of one project.",
                  no_args_is_help=True, add_completion=False, rich_markup_mode=None)
project_app = typer.Typer(help="Projects (operator token).", no_args_is_help=True,
                          rich_markup_mode=None)
agent_app = typer.Typer(help="Agents (project token).", no_args_is_help=True,
                        rich_markup_mode=None)
app.add_typer(project_app, name="project")
app.add_typer(agent_app, name="agent")

# Lines are never broken by Rich: a token or id split over two lines cannot be copied.
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

Url = Annotated[str | None, typer.Option("--url", envvar="COURIER_URL",
                                         help="API URL [default: from COURIER_HOST/PORT]")]
Token = Annotated[str | None, typer.Option("--token", envvar="COURIER_TOKEN",
                                           help="bearer token (project or agent)")]
AsJson = Annotated[bool, typer.Option("--json", help="print the raw JSON answer")]
OperatorToken = Annotated[str | None, typer.Option(
    "--token", envvar="COURIER_OPERATOR_TOKEN",
    help="operator token [default: the operator-token file in COURIER_DATA_DIR]")]


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


def _show_version(value: bool) -> None:
    if value:
        print(f"courier {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_show_version, is_eager=True,
                                          help="print Courier's version and exit")] = False,
) -> None:
    """Courier: Markdown messages between the agents of one project."""


@app.command()
def up(
    log_tasks: Annotated[bool, typer.Option(
        "--log-tasks", help="a log line per task and per request (COURIER_LOG_TASKS)")] = False,
    lane: Annotated[str | None, typer.Option(
        "--lane", metavar="NAME",
        help="only delivery workers for lane NAME (queues deliver.<transport>.NAME), against "
             "the configured store and broker: no store, API, beat or Flower; for another "
             "machine, or beside a running `courier up`")] = None,
    concurrency: Annotated[int | None, typer.Option(
        "--concurrency", metavar="N", min=1, max=64,
        help="processes per delivery worker (COURIER_WORKER_CONCURRENCY; default: what "
             "each transport declares, 2 for inbox and webhook)")] = None,
) -> None:
    """Run the Procfile: store (embedded unless COURIER_REDIS_URL), API, workers, beat, Flower.

    The workers are one Celery worker per installed transport.
    """
    from messaging.runtime.supervisor import run_lane, run_up

    settings = get_settings()
    if log_tasks:
        settings = settings.model_copy(update={"log_tasks": True})
    if concurrency is not None:
        settings = settings.model_copy(update={"worker_concurrency": concurrency})
    raise typer.Exit(run_up(settings) if lane is None else run_lane(settings, lane))


@app.command()
def init() -> None:
    """Create the data directory (COURIER_DATA_DIR) and the operator token in it, once.

    Run it once per deployment before starting its processes one by one
    (`courier run NAME`, honcho, Compose); `courier up` does it by itself.
    """
    from messaging.runtime.supervisor import init_home

    settings = get_settings()
    data_dir, created = init_home(settings)
    out.print(f"data: {data_dir} (COURIER_DATA_DIR)", markup=False, highlight=False)
    if settings.operator_token:
        out.print("operator token: the one in COURIER_OPERATOR_TOKEN (no file written)")
    elif created:
        out.print(f"operator token: created in {settings.operator_token_path.resolve()}",
                  markup=False, highlight=False)
    else:
        out.print(f"operator token: already in {settings.operator_token_path.resolve()}",
                  markup=False, highlight=False)


@app.command("run")
def run_process(
    name: Annotated[str, typer.Argument(
        help="a process of the Procfile (api, workers, beat, flower, ...), or worker-<transport> "
             "for one transport's worker")],
) -> None:
    """Run one process of the Procfile in the foreground (what each container runs).

    Every process but the store needs the deployment's operator token in
    COURIER_DATA_DIR (or COURIER_OPERATOR_TOKEN): without it, it does not start.
    """
    from messaging.runtime import procfile, workerpool

    known = [*procfile.read(), *workerpool.commands()]
    if name not in known:
        _fail(f"no process {name!r} in the Procfile; there are: " + ", ".join(known))
    settings = get_settings()
    err.print(f"data: {settings.data_dir.resolve()} (COURIER_DATA_DIR)", markup=False,
              highlight=False)
    if name != procfile.STORE:
        try:
            settings.require_operator_token()
        except OperatorTokenMissing as exc:
            _fail(f"{name} not started: {exc}")
    if name in procfile.read():
        procfile.exec_process(name)
    workerpool.exec_worker(name)


def _operator_token(token: str | None) -> tuple[str, str]:
    """The operator token to use, and where it came from; never creates one."""
    if token:
        return token, "--token or COURIER_OPERATOR_TOKEN"
    settings = get_settings()
    path = settings.operator_token_path.resolve()
    found = settings.find_operator_token()
    if found:
        return found, str(path)
    _fail(f"no operator token: none given, and no {path}.\n"
          "The server keeps it in its data directory (`courier up` prints where). Pass it with "
          "--token, set COURIER_OPERATOR_TOKEN, or set COURIER_DATA_DIR to that directory.")


@project_app.command("create")
def project_create(
    project_key: Annotated[str, typer.Argument(help="absolute path of the checkout")],
    name: Annotated[str | None, typer.Option(help="a display name")] = None,
    url: Url = None,
    token: OperatorToken = None,
    as_json: AsJson = False,
) -> None:
    """Create a project; prints its token (shown once)."""
    token, source = _operator_token(token)
    try:
        with CourierClient(_url(url), token) as client:
            p = client.create_project(str(Path(project_key)), name)
    except CourierAPIError as e:
        hint = (f"\nthe operator token from {source} is not this server's: pass the one its "
                "`courier up` printed") if e.status == 401 else ""
        _fail(f"{e}{hint}")
    except (httpx.TransportError, OSError) as e:
        _fail(f"cannot reach {_url(url)}: {e}")
    if as_json:
        _print_json(p)
        return
    out.print(f"project {p['project_id']} ({escape(p['project_key'])})")
    out.print(f"project token (shown once): {p['token']}")


@agent_app.command("register")
def agent_register(
    project_id: str,
    name: str,
    webhook: Annotated[str | None, typer.Option(help="deliver by POST to this URL")] = None,
    secret: Annotated[str | None, typer.Option(help="webhook signing secret")] = None,
    program: Annotated[str | None, typer.Option()] = None,
    model: Annotated[str | None, typer.Option()] = None,
    parent: Annotated[str | None, typer.Option(help="agent id of the session it works for")
                      ] = None,
    hold: Annotated[bool, typer.Option("--hold", help="hold mail from other agents for the "
                                                      "project's human")] = False,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Register an agent; prints its token (shown once)."""
    transport: dict[str, Any] = {"kind": "inbox"}
    if webhook:
        transport = {"kind": "webhook", "url": webhook, **({"secret": secret} if secret else {})}
    fields: dict[str, Any] = {k: v for k, v in {"program": program, "model": model,
                                                "parent": parent}.items() if v}
    if hold:
        fields["inbound"] = "hold"
    a = _call(url, token, CourierClient.register_agent, project_id, name, transport, **fields)
    if as_json:
        _print_json(a)
        return
    out.print(f"agent {escape(a['label'])} ({a['agent_id']})")
    out.print(f"agent token (shown once): {a['token']}")
    if a["transport"].get("secret") and not secret:
        out.print(f"webhook secret (shown once): {a['transport']['secret']}")


def _agent_id(client: CourierClient, project_id: str, agent: str) -> str:
    """An agent id from an id, a label `Name [ref]` or a name only one agent has."""
    if agent.startswith("agt_"):
        return agent
    rows = client.list_agents(project_id)
    by_label = [r for r in rows if r["label"] == agent]
    by_name = [r for r in rows if r["name"] == agent]
    found = by_label or by_name
    if len(found) == 1:
        return str(found[0]["agent_id"])
    if not found:
        _fail(f"no agent {agent!r} in {project_id}")
    labels = ", ".join(r["label"] for r in found)
    _fail(f"{len(found)} agents are named {agent!r} ({labels}): give the label or the agent id")


def _set_status(url: str | None, token: str | None, project_id: str, agent: str,
                status: str, as_json: bool) -> None:
    def call(client: CourierClient) -> Any:
        agent_id = _agent_id(client, project_id, agent)
        if status == "retired":
            return client.retire_agent(project_id, agent_id)
        return client.close_agent(project_id, agent_id)

    row = _call(url, token, call)
    if as_json:
        _print_json(row)
        return
    out.print(f"{escape(row['label'])} ({row['agent_id']}): {row['status']}")


AgentArg = Annotated[str, typer.Argument(help="agent id, label 'Name [ref]', or a name one "
                                              "agent has")]


@agent_app.command("retire")
def agent_retire(project_id: str, agent: AgentArg, url: Url = None, token: Token = None,
                 as_json: AsJson = False) -> None:
    """Retire an agent: no new mail for it, its history stays readable."""
    _set_status(url, token, project_id, agent, "retired", as_json)


@agent_app.command("close")
def agent_close(project_id: str, agent: AgentArg, url: Url = None, token: Token = None,
                as_json: AsJson = False) -> None:
    """Close an agent: its conversation is gone for good; no new mail, history readable."""
    _set_status(url, token, project_id, agent, "closed", as_json)


@app.command()
def agents(project_id: str, url: Url = None, token: Token = None, as_json: AsJson = False) -> None:
    """List a project's agents."""
    rows = _call(url, token, CourierClient.list_agents, project_id)
    if as_json:
        _print_json(rows)
        return
    table = Table("agent", "status", "presence", "transport")
    table.add_column("last active", no_wrap=True, min_width=len("2026-01-01T00:00:00.000000Z"))
    for depth, r in _as_tree(rows):
        hold = " (holds mail)" if r.get("inbound") == "hold" else ""
        table.add_row("  " * depth + escape(r["label"]) + hold, r["status"], r["presence"],
                      _transport(r["transport"]), r["last_active_ts"])
    out.print(table)


def _as_tree(rows: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """Sessions in list order, each followed by its subagents, indented by depth."""
    ids = {r["agent_id"] for r in rows}
    children: dict[str | None, list[dict[str, Any]]] = {}
    for r in rows:
        parent = r.get("parent") if r.get("parent") in ids else None
        children.setdefault(parent, []).append(r)
    ordered: list[tuple[int, dict[str, Any]]] = []

    def walk(parent: str | None, depth: int) -> None:
        for r in children.get(parent, []):
            ordered.append((depth, r))
            walk(r["agent_id"], depth + 1)

    walk(None, 0)
    return ordered


@app.command()
def presence(
    state: Annotated[str, typer.Argument(help="busy, idle, exited or source_lost")],
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Report the presence of the token's agent (going idle sends the idle notices)."""
    row = _call(url, token, CourierClient.set_presence, state)
    if as_json:
        _print_json(row)
        return
    out.print(f"{escape(row['label'])}: {row['presence']} (last active {row['last_active_ts']})")


@app.command("notify-when-idle")
def notify_when_idle(
    target: Annotated[str, typer.Argument(help="Name or 'Name [ref]' of the agent to watch")],
    ttl: Annotated[int | None, typer.Option(help="give up after this many seconds "
                                                 "[default: 3600]")] = None,
    subject: Annotated[str | None, typer.Option(help="send this message to the target first; "
                                                     "the notice then waits for its next idle")]
    = None,
    body: Annotated[str | None, typer.Option(help="the message's Markdown body")] = None,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Get one notice (in the inbox and the event stream) when TARGET next goes idle or exits."""
    message = {"subject": subject, "body_md": body or ""} if subject else None
    sub = _call(url, token, CourierClient.subscribe_idle, target, message, ttl)
    if as_json:
        _print_json(sub)
        return
    if sub["message"]:
        out.print(f"sent {sub['message']['id']} to {escape(sub['target'])}")
    if sub["state"] == "notified":
        out.print(f"{escape(sub['target'])} is already {sub['outcome']}: notice "
                  f"{sub['notice']['message_id']} sent ({sub['subscription_id']})")
    else:
        out.print(f"subscription {sub['subscription_id']}: waiting for {escape(sub['target'])} "
                  f"until {sub['expires_ts']}")


def _event_line(event: Event) -> str:
    d = event.data if isinstance(event.data, dict) else {"data": event.data}
    if event.event == "message":
        wake = "wake" if d.get("wake") else "quiet"
        return (f"message [{wake}] {d.get('id')} from {d.get('from')}: {d.get('subject')} "
                f"(delivery {d.get('delivery_id')})")
    if event.event == "idle_notice":
        return (f"idle_notice {d.get('target')} {d.get('state')} "
                f"(subscription {d.get('subscription_id')}, message {d.get('message_id')})")
    if event.event == "delivery":
        return (f"delivery {d.get('delivery_id')} to {d.get('recipient')}: {d.get('stage')} "
                f"{d.get('outcome') or ''}".rstrip())
    return f"{event.event} {json.dumps(d, ensure_ascii=False)}"


@app.command()
def watch(
    last_event_id: Annotated[str | None, typer.Option(help="resume after this event id")] = None,
    count: Annotated[int | None, typer.Option(min=1, help="stop after this many events")] = None,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Follow the live events of the token's agent (reconnects by itself; Ctrl-C stops)."""
    if not token:
        _fail("no token: pass --token or set COURIER_TOKEN")
    seen = 0
    with CourierClient(_url(url), token) as client:
        try:
            for event in client.events(last_event_id, reconnect=True):
                if as_json:
                    print(json.dumps({"id": event.id, "event": event.event, "data": event.data},
                                     ensure_ascii=False), flush=True)
                else:
                    out.print(f"{event.id or '-'}  {escape(_event_line(event))}",
                              highlight=False)
                seen += 1
                if count is not None and seen >= count:
                    return
        except CourierAPIError as e:
            _fail(str(e))
        except KeyboardInterrupt:
            return


def _transport(t: dict[str, Any]) -> str:
    health = t.get("health")
    return f"{t['kind']} ({health})" if health else str(t["kind"])


def _read_body(body: str | None, body_file: Path | None) -> str:
    if body is not None:
        return body
    if body_file is not None:
        return body_file.read_text(encoding="utf-8")
    if sys.stdin.isatty():
        _fail("no body: pass --body TEXT or --body-file PATH, or pipe the Markdown on stdin "
              "(--body '' sends an empty one)")
    return sys.stdin.read()


def _print_sent(m: dict[str, Any]) -> None:
    replay = " (replayed)" if m["idempotent_replay"] else ""
    out.print(f"admitted {m['id']}{replay}")
    for o in m["delivery"]["observations"]:
        out.print(f"  delivery {o['delivery_id']} -> {escape(o['recipient'])} ({o['transport']})")
    for w in m["delivery"]["warnings"]:
        out.print(f"  [yellow]warning:[/yellow] {escape(w)}")


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
    body_md = _read_body(body, body_file)
    m = _call(url, token, CourierClient.send, to, subject, body_md, **fields)
    if as_json:
        _print_json(m)
        return
    _print_sent(m)


@app.command()
def reply(
    message_id: Annotated[str, typer.Argument(help="the message to answer (msg_...)")],
    body: Annotated[str | None, typer.Option(help="Markdown body [default: stdin]")] = None,
    body_file: Annotated[Path | None, typer.Option(help="read the body from a file")] = None,
    importance: Annotated[str | None, typer.Option(help="low, normal, high, urgent "
                                                        "[default: the message's]")] = None,
    idempotency_key: Annotated[str | None, typer.Option()] = None,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Reply in the message's thread, to its sender."""
    fields = {k: v for k, v in {"importance": importance,
                                "idempotency_key": idempotency_key}.items() if v}
    body_md = _read_body(body, body_file)
    m = _call(url, token, CourierClient.reply, message_id, body_md, **fields)
    if as_json:
        _print_json(m)
        return
    _print_sent(m)


def _mark(url: str | None, token: str | None, message_id: str, kind: str,
          as_json: bool) -> None:
    fn = CourierClient.mark_read if kind == "read" else CourierClient.acknowledge
    row = _call(url, token, fn, message_id)
    if as_json:
        _print_json(row)
        return
    out.print(f"{row['message_id']}: read {row['read_ts'] or '-'}, "
              f"acknowledged {row['ack_ts'] or '-'}")


@app.command()
def read(message_id: str, url: Url = None, token: Token = None, as_json: AsJson = False) -> None:
    """Mark a received message read."""
    _mark(url, token, message_id, "read", as_json)


@app.command()
def ack(message_id: str, url: Url = None, token: Token = None, as_json: AsJson = False) -> None:
    """Acknowledge a received message (this also marks it read)."""
    _mark(url, token, message_id, "ack", as_json)


@app.command()
def redrive(delivery_id: str, url: Url = None, token: Token = None,
            as_json: AsJson = False) -> None:
    """Send a delivery again on the same route, same delivery id (project token)."""
    d = _call(url, token, CourierClient.redrive, delivery_id)
    if as_json:
        _print_json(d)
        return
    out.print(f"delivery {d['delivery_id']} to {escape(d['recipient'])} sent again "
              f"over {d['transport']}")


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
        out.print(f"id {m['id']}  sent {m['created_ts']}")
        out.print(f"delivery {m['delivery_id']}")
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


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="words (all must match); `auth*` is a prefix")] = "",
    topic: Annotated[str | None, typer.Option()] = None,
    sender: Annotated[str | None, typer.Option("--from", help="sender name")] = None,
    since: Annotated[str | None, typer.Option(help="RFC 3339 time")] = None,
    until: Annotated[str | None, typer.Option(help="RFC 3339 time")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 20,
    cursor: Annotated[str | None, typer.Option(help="a next_cursor from before")] = None,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Search what the token's agent sent or received, newest first."""
    page = _call(url, token, CourierClient.search, query, cursor=cursor, limit=limit,
                 topic=topic, sender=sender, since=since, until=until)
    if as_json:
        _print_json(page)
        return
    for m in page["messages"]:
        out.print(escape(f"{m['created_ts']}  {m['from']}: {m['subject']}  ({m['id']})"))
        out.print(f"    {m['snippet']}", markup=False, highlight=False)
    if not page["messages"]:
        out.print("nothing found")
    if page["next_cursor"]:
        out.print(f"more: --cursor {page['next_cursor']}")

def _install_commands(root: typer.Typer) -> None:
    """Commands kept in modules of their own."""
    from messaging.cli_targets import install

    install(root)


_install_commands(app)


@app.command("archive")
def archive_read(
    project_id: Annotated[str, typer.Argument(help="the project id (prj_...)")],
    day: Annotated[str | None, typer.Option(
        "--day", help="UTC day of admission, YYYY-MM-DD [default: list the days]")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON line per message")] = False,
) -> None:
    """Read the archive of removed messages (COURIER_ARCHIVE_DIR or the data dir's)."""
    from messaging.service import archive

    root = get_settings().archive_root
    try:
        if day is None:
            for found in archive.days(root, project_id):
                out.print(found)
            return
        messages = archive.read(root, project_id, day)
    except FileNotFoundError:
        _fail(f"nothing archived for {project_id} on {day} under {root}")
    except ValueError as e:
        _fail(str(e))
    for m in messages:
        if as_json:
            print(json.dumps(m, ensure_ascii=False))
            continue
        out.print(f"[bold]{m['created_ts']}[/bold] {escape(m['from'])} -> "
                  f"{escape(', '.join(m['to'] + m['cc'] + m['bcc']))}: {escape(m['subject'])}"
                  f"  ({m['id']}, thread {m['thread_id']})")
        for d in m["deliveries"]:
            out.print(f"    {escape(d['recipient'])}: {d['stage']}, outcome "
                      f"{d['outcome'] or '-'}, read {d.get('read_ts') or '-'}")


@app.command()
def lane(
    project_id: str,
    name: Annotated[str | None, typer.Argument(help="1-32 of a-z, 0-9, -")] = None,
    off: Annotated[bool, typer.Option("--off", help="back to the shared queues")] = False,
    url: Url = None,
    token: OperatorToken = None,
    as_json: AsJson = False,
) -> None:
    """Give a busy project a lane of its own (queues deliver.<transport>.<lane>), or --off."""
    if (name is None) == (not off):
        _fail("give a lane name, or --off")
    token, _ = _operator_token(token)
    p = _call(url, token, CourierClient.set_lane, project_id, None if off else name)
    if as_json:
        _print_json(p)
        return
    backlog = ", ".join(f"{kind} {n}" for kind, n in p["backlog"].items())
    if p["lane"]:
        out.print(f"project {project_id} is on lane {p['lane']} (waiting: {backlog})")
        out.print(f"serve it: courier up --lane {p['lane']}  (its workers, on any machine "
                  "that reaches the store and broker)")
    else:
        out.print(f"project {project_id} is on the shared queues (waiting: {backlog})")


app.command("backup")(cli_backup.backup)
app.command("restore")(cli_backup.restore)


def main() -> None:
    """Entry point of the ``courier`` script."""
    app()


if __name__ == "__main__":
    main()
