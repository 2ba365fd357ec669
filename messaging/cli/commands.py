"""The ``courier`` command: run the stack, and speak the API from a terminal."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from messaging import __version__
from messaging.cli import backup as cli_backup
from messaging.cli.io import (
    AsJson,
    Cursor,
    DeliveryId,
    Exit,
    MessageId,
    OperatorToken,
    PageLimit,
    ProjectId,
    ThreadId,
    Token,
    Url,
    answer,
    api_url,
    call,
    err,
    fail,
    json_text,
    out,
    print_json,
    refused,
    say,
    table,
    unreachable,
    visible,
)
from messaging.client import CourierAPIError, CourierClient, CourierUnreachable, Event
from messaging.config import OperatorTokenMissing, get_settings
from messaging.types import Json

# Help text is plain text: Rich markup would eat `Name [ref]` and `[default: ...]`.
app = typer.Typer(help="Courier: Markdown messages between the agents of one project.",
                  no_args_is_help=True, add_completion=False, rich_markup_mode=None)
project_app = typer.Typer(help="Projects (operator token).", no_args_is_help=True,
                          rich_markup_mode=None)
agent_app = typer.Typer(help="Agents (project token).", no_args_is_help=True,
                        rich_markup_mode=None)
app.add_typer(project_app, name="project")
app.add_typer(agent_app, name="agent")


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
    from messaging.launch.supervisor import run_lane, run_up

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
    from messaging.launch.supervisor import init_home

    settings = get_settings()
    data_dir, created = init_home(settings)
    say(f"data: {data_dir} (COURIER_DATA_DIR)")
    if settings.operator_token:
        say("operator token: the one in COURIER_OPERATOR_TOKEN (no file written)")
    else:
        state = "created in" if created else "already in"
        say(f"operator token: {state} {settings.operator_token_path.resolve()}")


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
    from messaging.launch import procfile, workerpool

    known = [*procfile.read(), *workerpool.commands()]
    if name not in known:
        fail(f"no process {name!r} in the Procfile; there are: " + ", ".join(known), Exit.USAGE)
    settings = get_settings()
    err.print(f"data: {settings.data_dir.resolve()} (COURIER_DATA_DIR)")
    if name != procfile.STORE:
        try:
            settings.require_operator_token()
        except OperatorTokenMissing as exc:
            fail(f"{name} not started: {exc}")
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
    fail(f"no operator token: none given, and no {path}.\n"
         "The server keeps it in its data directory (`courier up` prints where). Pass it with "
         "--token, set COURIER_OPERATOR_TOKEN, or set COURIER_DATA_DIR to that directory.",
         Exit.DENIED)


def _operator_call(url: str | None, token: str | None, as_json: bool, fn: Any,
                   *args: Any) -> Any:
    """``fn(client, *args)`` with the operator token; a 401 says where the token came from."""
    token, source = _operator_token(token)
    try:
        with CourierClient(api_url(url), token) as client:
            return fn(client, *args)
    except CourierAPIError as e:
        hint = (f"\nthe operator token from {source} is not this server's: pass the one in "
                "its data directory") if e.status == 401 else ""
        refused(e, as_json, hint)
    except (CourierUnreachable, OSError) as e:
        unreachable(url, e)


@project_app.command("create")
def project_create(
    project_key: Annotated[str, typer.Argument(help="absolute path of the checkout")],
    name: Annotated[str | None, typer.Option(help="a display name")] = None,
    url: Url = None,
    token: OperatorToken = None,
    as_json: AsJson = False,
) -> None:
    """Create a project; prints its token (shown once)."""
    p = _operator_call(url, token, as_json, CourierClient.create_project,
                       str(Path(project_key)), name)
    if as_json:
        print_json(p)
        return
    say(f"project {p['project_id']} ({visible(p['project_key'])})")
    say(f"project token (shown once): {p['token']}")


@project_app.command("list")
def project_list(
    limit: PageLimit = 50,
    cursor: Cursor = None,
    url: Url = None,
    token: OperatorToken = None,
    as_json: AsJson = False,
) -> None:
    """List the projects, a page at a time, with their active agents, lane and backlog."""
    page = _operator_call(url, token, as_json, CourierClient.projects, cursor, limit)
    if as_json:
        print_json(page)
        return
    rows = [[p["project_id"], p["project_key"], p["name"] or "", p["agents"],
             p["lane"] or "-", ", ".join(f"{k} {n}" for k, n in p["backlog"].items())]
            for p in page["projects"]]
    out.print(table(["project", "key", "name", "agents", "lane", "waiting"], rows, whole=[0]))
    if page["next_cursor"]:
        say(f"more: --cursor {page['next_cursor']}")


@project_app.command("token")
def project_token(
    project_id: ProjectId,
    url: Url = None,
    token: OperatorToken = None,
    as_json: AsJson = False,
) -> None:
    """Issue a project a new token (shown once); its old token stops working at once."""
    p = _operator_call(url, token, as_json, CourierClient.new_project_token, project_id)
    if as_json:
        print_json(p)
        return
    say(f"project {p['project_id']} ({visible(p['project_key'])})")
    say(f"new project token (shown once): {p['token']}")
    say("the old project token no longer works")


@agent_app.command("register")
def agent_register(
    project_id: ProjectId,
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
    a = call(url, token, CourierClient.register_agent, project_id, name, transport,
             as_json=as_json, **fields)
    if as_json:
        print_json(a)
        return
    say(f"agent {visible(a['label'])} ({a['agent_id']})")
    say(f"agent token (shown once): {a['token']}")
    if a["transport"].get("secret") and not secret:
        say(f"webhook secret (shown once): {a['transport']['secret']}")


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
        fail(f"no agent {visible(agent)!r} in {project_id}", Exit.NOT_FOUND)
    labels = ", ".join(visible(r["label"]) for r in found)
    fail(f"{len(found)} agents are named {visible(agent)!r} ({labels}): give the label or the "
         "agent id", Exit.USAGE)


def _set_status(url: str | None, token: str | None, project_id: str, agent: str,
                status: str, as_json: bool) -> None:
    def change(client: CourierClient) -> Any:
        agent_id = _agent_id(client, project_id, agent)
        if status == "retired":
            return client.retire_agent(project_id, agent_id)
        return client.close_agent(project_id, agent_id)

    row = call(url, token, change, as_json=as_json)
    if as_json:
        print_json(row)
        return
    say(f"{visible(row['label'])} ({row['agent_id']}): {row['status']}")


AgentArg = Annotated[str, typer.Argument(help="agent id, label 'Name [ref]', or a name one "
                                              "agent has")]


@agent_app.command("retire")
def agent_retire(project_id: ProjectId, agent: AgentArg, url: Url = None, token: Token = None,
                 as_json: AsJson = False) -> None:
    """Retire an agent: no new mail for it, its history stays readable."""
    _set_status(url, token, project_id, agent, "retired", as_json)


@agent_app.command("close")
def agent_close(project_id: ProjectId, agent: AgentArg, url: Url = None, token: Token = None,
                as_json: AsJson = False) -> None:
    """Close an agent: its conversation is gone for good; no new mail, history readable."""
    _set_status(url, token, project_id, agent, "closed", as_json)


@app.command()
def agents(project_id: ProjectId, url: Url = None, token: Token = None,
           as_json: AsJson = False) -> None:
    """List a project's agents."""
    found = call(url, token, CourierClient.agents_answer, project_id, as_json=as_json)
    if as_json:
        print_json(found)
        return
    rows = [["  " * depth + visible(r["label"]) + (" (holds mail)" if r.get("inbound") == "hold"
                                                    else ""),
             r["status"], r["presence"] or "", _transport(r["transport"]), r["last_active_ts"]]
            for depth, r in _as_tree(found["agents"])]
    out.print(table(["agent", "status", "presence", "transport", "last active"], rows,
                    whole=[4]))


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
    answer(url, token, as_json, CourierClient.set_presence, state,
           show=lambda row: say(f"{visible(row['label'])}: {row['presence']} "
                                f"(last active {row['last_active_ts']})"))


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
    sub = call(url, token, CourierClient.subscribe_idle, target, message, ttl, as_json=as_json)
    if as_json:
        print_json(sub)
        return
    watched = visible(sub["target"])
    if sub["message"]:
        say(f"sent {sub['message']['id']} to {watched}")
    if sub["state"] == "notified":
        say(f"{watched} is already {sub['outcome']}: notice {sub['notice']['message_id']} sent "
            f"({sub['subscription_id']})")
    else:
        say(f"subscription {sub['subscription_id']}: waiting for {watched} "
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
    return f"{event.event} {json_text(d, one_line=True)}"


@app.command()
def watch(
    last_event_id: Annotated[str | None, typer.Option(help="resume after this event id")] = None,
    count: Annotated[int | None, typer.Option(min=1, help="stop after this many events")] = None,
    run: Annotated[str | None, typer.Option(
        "--exec", help="for each wake message, run this shell command with the body on "
                       "stdin and the message's fields in COURIER_MESSAGE_* variables")] = None,
    state_file: Annotated[Path | None, typer.Option(
        help="keep the last event handled here, and resume after it")] = None,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Follow the live events of the token's agent (reconnects by itself; Ctrl-C stops)."""
    if run is not None:
        from messaging.hosts.watching import follow_with

        call(url, token, follow_with, run, state_file, last_event_id, count, as_json=as_json)
        return

    def follow(client: CourierClient) -> None:
        for seen, event in enumerate(client.events(last_event_id, reconnect=True), 1):
            if as_json:
                sys.stdout.write(json_text({"id": event.id, "event": event.event,
                                            "data": event.data}, one_line=True) + "\n")
                sys.stdout.flush()
            else:
                say(f"{event.id or '-'}  {visible(_event_line(event))}")
            if count is not None and seen >= count:
                return

    try:
        call(url, token, follow, as_json=as_json)
    except KeyboardInterrupt:
        return


def _transport(t: dict[str, Any]) -> str:
    health = t.get("health")
    return f"{t['kind']} ({health})" if health else str(t["kind"])


def _read_body(body: str | None, body_file: Path | None) -> str:
    """The Markdown body from --body, --body-file or stdin; an empty one is refused."""
    if body is None and body_file is not None:
        try:
            body = body_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            fail(f"cannot read --body-file: {e}", Exit.USAGE)
    if body is None:
        if sys.stdin.isatty():
            fail("no body: pass --body TEXT or --body-file PATH, or pipe the Markdown on stdin",
                 Exit.USAGE)
        body = sys.stdin.read()
    if not body.strip():
        fail("the body is empty: nothing was sent (give the Markdown with --body, --body-file "
             "or on stdin)", Exit.USAGE)
    return body


def _print_sent(m: dict[str, Any]) -> None:
    replay = " (replayed)" if m["idempotent_replay"] else ""
    say(f"admitted {m['id']}{replay}")
    for o in m["delivery"]["observations"]:
        say(f"  delivery {o['delivery_id']} -> {visible(o['recipient'])} ({o['transport']})")
    for w in m["delivery"]["warnings"]:
        say(f"  warning: {visible(w)}")


@app.command()
def send(
    to: Annotated[list[str], typer.Option("--to", help="recipient (repeat for more)")],
    subject: Annotated[str | None, typer.Option(
        help="one line; required unless a resource notice (--resource-id ...)")] = None,
    body: Annotated[str | None, typer.Option(help="Markdown body [default: stdin]")] = None,
    body_file: Annotated[Path | None, typer.Option(help="read the body from a file")] = None,
    cc: Annotated[list[str] | None, typer.Option(help="copied recipient (repeat)")] = None,
    bcc: Annotated[list[str] | None, typer.Option(
        help="blind copy: the other recipients do not see it (repeat)")] = None,
    importance: Annotated[str | None, typer.Option(help="low, normal, high, urgent")] = None,
    ack_required: Annotated[bool | None, typer.Option(
        "--ack-required/--no-ack-required",
        help="ask the recipients to acknowledge [default: no]")] = None,
    notification_policy: Annotated[str | None, typer.Option(
        help="wake or quiet [default: the server's rule]")] = None,
    delivery_policy: Annotated[str | None, typer.Option(help="checked or durable")] = None,
    thread_id: Annotated[str | None, typer.Option(help="a thread to post in")] = None,
    topic: Annotated[str | None, typer.Option()] = None,
    idempotency_key: Annotated[str | None, typer.Option()] = None,
    summary: Annotated[str | None, typer.Option(
        help="a label for your own records, never delivered")] = None,
    probe: Annotated[bool, typer.Option(help="a liveness ping")] = False,
    resource_id: Annotated[str | None, typer.Option(
        help="resource notice: the resource (with --phase-id, --state, --next-action; "
             "no subject or body: Courier writes them)")] = None,
    phase_id: Annotated[str | None, typer.Option(help="resource notice: the phase")] = None,
    state: Annotated[str | None, typer.Option(
        help="resource notice: released or cancelled")] = None,
    next_action: Annotated[str | None, typer.Option(
        help="resource notice: none, retry_admission or drop_dependency")] = None,
    project_key: Annotated[str | None, typer.Option(
        help="check: your project's key (403 if it is not the token's)")] = None,
    sender_name: Annotated[str | None, typer.Option(
        help="check: your agent's name (403 if it is not the token's)")] = None,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Send a message as the agent of the token (an empty body is refused), or a resource
    notice."""
    fields: Json = {k: v for k, v in {
        "cc": cc, "bcc": bcc, "importance": importance, "topic": topic,
        "notification_policy": notification_policy, "delivery_policy": delivery_policy,
        "thread_id": thread_id, "idempotency_key": idempotency_key, "summary": summary,
        "project_key": project_key, "sender_name": sender_name}.items() if v}
    if ack_required is not None:
        fields["ack_required"] = ack_required
    if probe:
        fields["probe"] = True
    notice = {k: v for k, v in {"resource_id": resource_id, "phase_id": phase_id,
                                "state": state, "next_action": next_action}.items()
              if v is not None}
    if notice:
        missing = [f"--{k.replace('_', '-')}" for k in
                   ("resource_id", "phase_id", "state", "next_action") if k not in notice]
        if missing:
            fail(f"a resource notice needs {', '.join(missing)} too", Exit.USAGE)
        fields["resource_notice"] = notice
        # Given anyway, they go to the server, which refuses them by name.
        body_md = _read_body(body, body_file) if body or body_file else None
    else:
        if subject is None:
            fail("no subject: pass --subject (or a resource notice: --resource-id ...)",
                 Exit.USAGE)
        body_md = _read_body(body, body_file)
    m = call(url, token, CourierClient.send, to, subject, body_md, as_json=as_json, **fields)
    if as_json:
        print_json(m)
        return
    _print_sent(m)


@app.command()
def reply(
    message_id: MessageId,
    body: Annotated[str | None, typer.Option(help="Markdown body [default: stdin]")] = None,
    body_file: Annotated[Path | None, typer.Option(help="read the body from a file")] = None,
    importance: Annotated[str | None, typer.Option(help="low, normal, high, urgent "
                                                        "[default: the message's]")] = None,
    idempotency_key: Annotated[str | None, typer.Option()] = None,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Reply in the message's thread, to its sender (an empty body is refused)."""
    fields = {k: v for k, v in {"importance": importance,
                                "idempotency_key": idempotency_key}.items() if v}
    body_md = _read_body(body, body_file)
    m = call(url, token, CourierClient.reply, message_id, body_md, as_json=as_json, **fields)
    if as_json:
        print_json(m)
        return
    _print_sent(m)


def _mark(url: str | None, token: str | None, message_id: str, kind: str,
          as_json: bool) -> None:
    fn = CourierClient.mark_read if kind == "read" else CourierClient.acknowledge
    answer(url, token, as_json, fn, message_id,
           show=lambda row: say(f"{row['message_id']}: read {row['read_ts'] or '-'}, "
                                f"acknowledged {row['ack_ts'] or '-'}"))


@app.command()
def read(message_id: MessageId, url: Url = None, token: Token = None,
         as_json: AsJson = False) -> None:
    """Mark a received message read."""
    _mark(url, token, message_id, "read", as_json)


@app.command()
def ack(message_id: MessageId, url: Url = None, token: Token = None,
        as_json: AsJson = False) -> None:
    """Acknowledge a received message (this also marks it read)."""
    _mark(url, token, message_id, "ack", as_json)


@app.command()
def redrive(delivery_id: DeliveryId, url: Url = None, token: Token = None,
            as_json: AsJson = False) -> None:
    """Send a delivery again on the same route, same delivery id (project token)."""
    answer(url, token, as_json, CourierClient.redrive, delivery_id,
           show=lambda d: say(f"delivery {d['delivery_id']} to {visible(d['recipient'])} sent "
                              f"again over {d['transport']}"))


def _show_message(m: Json, *lines: str) -> None:
    """A message as the inbox and thread pages print it."""
    out.rule(visible(f"{m['subject']}  from {m['from']}  ({m['importance']})"))
    say(f"id {m['id']}  sent {m['created_ts']}")
    for line in lines:
        say(line)
    say(visible(m["body_md"], multiline=True))


@app.command()
def inbox(
    limit: PageLimit = 50,
    cursor: Cursor = None,
    unread_only: Annotated[bool, typer.Option("--unread-only")] = False,
    shown: Annotated[bool, typer.Option(
        "--shown", help="this read puts the mail into the agent's conversation: record each "
                        "message delivery_observed (a plain read observes nothing)")] = False,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Show one page of the inbox of the token's agent, oldest first."""
    page = call(url, token, CourierClient.inbox, cursor=cursor, limit=limit,
                unread_only=unread_only or None, shown=shown, as_json=as_json)
    if as_json:
        print_json(page)
        return
    for m in page["messages"]:
        _show_message(m, f"delivery {m['delivery_id']}")
    if not page["messages"]:
        say("no new messages")
    say(f"next cursor: {page['next_cursor']}")


@app.command()
def thread(
    thread_id: ThreadId,
    limit: PageLimit = 50,
    cursor: Cursor = None,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Show one page of a thread, oldest first (agent or project token)."""
    page = call(url, token, CourierClient.thread_page, thread_id, cursor=cursor, limit=limit,
                as_json=as_json)
    if as_json:
        print_json(page)
        return
    for m in page["messages"]:
        _show_message(m)
    if page["more"]:
        say(f"more: courier thread {visible(thread_id)} --cursor {page['next_cursor']}")
    else:
        say(f"end of thread; next cursor: {page['next_cursor']}")


@app.command()
def delivery(delivery_id: DeliveryId, url: Url = None, token: Token = None,
             as_json: AsJson = False) -> None:
    """Show what happened to one delivery, stage by stage."""
    d = call(url, token, CourierClient.delivery, delivery_id, as_json=as_json)
    if as_json:
        print_json(d)
        return
    say(f"delivery {d['delivery_id']} of {d['message_id']} to {visible(d['recipient'])} "
        f"over {d['transport']}: outcome {d['outcome'] or '-'}")
    out.print(table(["stage", "at"], [[stage, ts or ""] for stage, ts in d["stages"].items()],
                    whole=[1]))
    for a in d["attempts"]:
        say(f"attempt {a['n']}: {a['started_ts']} .. {a['ended_ts'] or '-'}"
            + (f"  {visible(a['error'])}" if a.get("error") else ""))


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="words (all must match); `auth*` is a prefix")] = "",
    topic: Annotated[str | None, typer.Option()] = None,
    sender: Annotated[str | None, typer.Option("--from", help="sender name")] = None,
    since: Annotated[str | None, typer.Option(help="RFC 3339 time")] = None,
    until: Annotated[str | None, typer.Option(help="RFC 3339 time")] = None,
    limit: PageLimit = 20,
    cursor: Cursor = None,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Search what the token's agent sent or received, newest first."""
    page = call(url, token, CourierClient.search, query, cursor=cursor, limit=limit,
                topic=topic, sender=sender, since=since, until=until, as_json=as_json)
    if as_json:
        print_json(page)
        return
    for m in page["messages"]:
        say(visible(f"{m['created_ts']}  {m['from']}: {m['subject']}  ({m['id']})"))
        say(f"    {visible(m['snippet'])}")
    if not page["messages"]:
        say("nothing found")
    if page["next_cursor"]:
        say(f"more: --cursor {page['next_cursor']}")


def _install_commands(root: typer.Typer) -> None:
    """Commands kept in modules of their own."""
    from messaging.cli import hooks, host_commands, mcp_command, targets

    targets.install(root)
    hooks.install(root)
    host_commands.install_resume(root)
    mcp_command.install(root)


_install_commands(app)


@app.command("archive")
def archive_read(
    project_id: ProjectId,
    day: Annotated[str | None, typer.Option(
        "--day", help="UTC day of admission, YYYY-MM-DD [default: list the days]")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON line per message")] = False,
) -> None:
    """Read the archive of removed messages (COURIER_ARCHIVE_DIR or the data dir's)."""
    from messaging.service import archive

    root = get_settings().archive_root
    found = archive.days(root, project_id)
    if not found:
        fail(f"nothing archived for project {visible(project_id)} under {root}: no such "
             "project there, or none of its messages archived yet", Exit.NOT_FOUND)
    if day is None:
        for each in found:
            say(each)
        return
    try:
        messages = archive.read(root, project_id, day)
    except FileNotFoundError:
        fail(f"nothing archived for {project_id} on {visible(day)} under {root} (days: "
             f"{', '.join(found)})", Exit.NOT_FOUND)
    except ValueError as e:
        fail(visible(str(e)), Exit.USAGE)
    for m in messages:
        if as_json:
            sys.stdout.write(json_text(m, one_line=True) + "\n")
            continue
        say(visible(f"{m['created_ts']} {m['from']} -> {', '.join(m['to'] + m['cc'] + m['bcc'])}"
                    f": {m['subject']}  ({m['id']}, thread {m['thread_id']})"))
        for d in m["deliveries"]:
            say(f"    {visible(d['recipient'])}: {d['stage']}, outcome {d['outcome'] or '-'}, "
                f"read {d.get('read_ts') or '-'}")


@app.command()
def lane(
    project_id: ProjectId,
    name: Annotated[str | None, typer.Argument(help="1-32 of a-z, 0-9, -")] = None,
    off: Annotated[bool, typer.Option("--off", help="back to the shared queues")] = False,
    url: Url = None,
    token: OperatorToken = None,
    as_json: AsJson = False,
) -> None:
    """Give a busy project a lane of its own (queues deliver.<transport>.<lane>), or --off."""
    if (name is None) == (not off):
        fail("give a lane name, or --off", Exit.USAGE)
    p = _operator_call(url, token, as_json, CourierClient.set_lane, project_id,
                       None if off else name)
    if as_json:
        print_json(p)
        return
    backlog = ", ".join(f"{kind} {n}" for kind, n in p["backlog"].items())
    if p["lane"]:
        say(f"project {project_id} is on lane {p['lane']} (waiting: {backlog})")
        say(f"serve it: courier up --lane {p['lane']}  (its workers, on any machine that reaches "
            "the store and broker)")
    else:
        say(f"project {project_id} is on the shared queues (waiting: {backlog})")


app.command("backup")(cli_backup.backup)
app.command("restore")(cli_backup.restore)


def main() -> None:
    """Entry point of the ``courier`` script."""
    app()

