"""``courier`` as scripts use it, on the real stack: --json prints the API's answer
objects, exit codes say what went wrong, ids are whole at any width, empty bodies
are refused, and text from agents never reaches the terminal raw."""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.integration.conftest import Project
from tests.integration.test_cli import COURIER, client_env
from tests.stack import ROOT, free_port, wait_until

# Its tests start processes of their own (stacks, API processes, `courier up`, the
# CLI) or wait out real deadlines: the slow tier (`./dev test --all`).
pytestmark = pytest.mark.slow

HOSTILE = "x\x1b]0;TITLE\x07\x1b[31mRED \u202eevil\u202c \x9b2J"
RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\u202c")
# What a subject may hold of it: a subject refuses control characters, not bidi ones.
HOSTILE_SUBJECT = "x \u202eevil\u202c"


def run(*args: str, env: dict[str, str], stdin: str | None = None,
        cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """One ``courier`` command, whatever its exit code."""
    return subprocess.run([*COURIER, *args], input=stdin, capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=60)


def ok_json(*args: str, env: dict[str, str], stdin: str | None = None) -> object:
    done = run(*args, "--json", env=env, stdin=stdin)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_json_prints_the_apis_answer_objects_release_decline_and_name_end_included(
    project: Project,
):
    alice = project.agent("Alice")
    project.agent("Guarded", inbound="hold")
    env = client_env(project, COURIER_TOKEN=project.token, COURIER_PROJECT=project.project_id)
    assert ok_json("agents", project.project_id, env=env) == project.admin.agents_answer(
        project.project_id)
    ok_json("name", "allow", "Later", env=env)
    assert ok_json("names", env=env) == project.admin.names_answer(project.project_id)
    ended = ok_json("name", "end", "Later", env=env)
    assert isinstance(ended, dict)
    first = alice.api.send("Guarded", "Keep", "x")["delivery"]["observations"][0]["delivery_id"]
    second = alice.api.send("Guarded", "Drop", "x")["delivery"]["observations"][0]["delivery_id"]
    held = ok_json("held", env=env)
    assert held == project.admin.held_answer(project.project_id)
    assert [d["delivery_id"] for d in held["deliveries"]] == [first, second]  # type: ignore[index]
    released = ok_json("release", first, env=env)
    assert released["delivery_id"] == first  # type: ignore[index]
    declined = ok_json("decline", second, env=env)
    assert declined == project.admin.delivery(second)


def test_exit_codes_say_what_went_wrong(project: Project, tmp_path: Path):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    project.admin.retire_agent(project.project_id, bob.id)
    env = client_env(project)
    agent = ["--token", alice.row["token"]]
    cases = {
        "usage: unknown option": (2, ["inbox", "--no-such-option", *agent]),
        "usage: invalid argument": (2, ["presence", "sleepy", *agent]),
        "usage: not an id": (2, ["delivery", "dlv_\x1b[31m", "--token", project.token]),
        "usage: a path for an id": (2, ["read", "../agents/me/inbox", *agent]),
        "not authenticated": (3, ["inbox", "--token", "cat_not_a_token"]),
        "forbidden": (3, ["held", "--project", project.project_id, *agent]),
        "no token at all": (3, ["inbox"]),
        "not found": (4, ["delivery", f"dlv_{project.project_id[4:]}{'0' * 16}", "--token",
                          project.token]),
        "unknown recipient": (4, ["send", "--to", "Nobody", "--subject", "s", "--body", "b",
                                  *agent]),
        "unknown project": (4, ["agents", "prj_000000000000", "--token",
                                project.stack.operator_token]),
        "conflict": (5, ["project", "create", project.project_key, "--token",
                         project.stack.operator_token]),
        "unreachable": (6, ["inbox", "--url", f"http://127.0.0.1:{free_port()}", *agent]),
        "other: retired recipient": (1, ["send", "--to", "Bob", "--subject", "s", "--body",
                                         "b", *agent]),
    }
    for what, (code, args) in cases.items():
        done = run(*args, env=env)
        assert done.returncode == code, (what, done.stdout, done.stderr)
        assert done.stderr.strip() and "\x1b" not in done.stderr, what
        assert "Traceback" not in done.stderr, what
    as_json = run("project", "create", project.project_key, "--json", "--token",
                  project.stack.operator_token, env=env)
    assert as_json.returncode == 5
    assert json.loads(as_json.stdout)["error"]["code"] == "PROJECT_EXISTS"


def test_archive_of_an_unknown_project_says_so_and_exits_4(project: Project, tmp_path: Path):
    env = client_env(project, COURIER_DATA_DIR=str(tmp_path))
    done = run("archive", "prj_doesnotexist", env=env)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "prj_doesnotexist" in done.stderr and "nothing archived" in done.stderr


@pytest.mark.parametrize("source", ["stdin /dev/null", "--body ''", "empty --body-file",
                                    "blank stdin"])
def test_an_empty_body_is_refused_from_any_source_and_nothing_is_sent(
    project: Project, tmp_path: Path, source: str
):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    env = client_env(project)
    send = ["send", "--to", "Bob", "--subject", "empty?", "--token", alice.row["token"]]
    empty = tmp_path / "empty.md"
    empty.write_text("")
    if source == "stdin /dev/null":
        with open(os.devnull) as nothing:
            done = subprocess.run([*COURIER, *send], stdin=nothing, capture_output=True,
                                  text=True, env=env, cwd=ROOT, timeout=60)
    elif source == "--body ''":
        done = run(*send, "--body", "", env=env)
    elif source == "empty --body-file":
        done = run(*send, "--body-file", str(empty), env=env)
    else:
        done = run(*send, env=env, stdin=" \n\n")
    assert done.returncode == 2, done.stderr
    assert "empty" in done.stderr and "nothing was sent" in done.stderr
    alice.api.send(["Bob"], "after", "the one that counts")
    got = wait_until(lambda: bob.api.inbox()["messages"], what="the real message")
    assert [m["subject"] for m in got] == ["after"]


@pytest.mark.parametrize("columns", ["40", "80"])
def test_ids_are_whole_in_tables_at_any_width(project: Project, columns: str):
    alice = project.agent("An agent with a rather long name")
    project.agent("Guarded", inbound="hold")
    sent = [alice.api.send("Guarded", "A subject long enough to need folding " * 2, "x")
            for _ in range(2)]
    env = client_env(project, COLUMNS=columns)
    shown = run("held", "--project", project.project_id, "--token", project.token, env=env)
    assert shown.returncode == 0, shown.stderr
    for m in sent:
        assert m["delivery"]["observations"][0]["delivery_id"] in shown.stdout, shown.stdout
    listed = run("project", "list", "--limit", "500", "--token", project.stack.operator_token,
                 env=env)
    assert listed.returncode == 0, listed.stderr
    assert project.project_id in listed.stdout, listed.stdout


def test_project_list_and_a_new_project_token_from_the_command_line(project: Project):
    env = client_env(project, COURIER_OPERATOR_TOKEN=project.stack.operator_token)
    key = f"/srv/cli/{uuid.uuid4().hex}"
    made = ok_json("project", "create", key, env=env)
    page = ok_json("project", "list", "--limit", "500", env=env)
    row = next(p for p in page["projects"]  # type: ignore[index]
               if p["project_id"] == made["project_id"])  # type: ignore[index]
    assert row["project_key"] == key and row["agents"] == 0
    shown = run("project", "token", made["project_id"], env=env)  # type: ignore[index]
    assert shown.returncode == 0, shown.stderr
    new = shown.stdout.split("new project token (shown once): ")[1].split()[0]
    old = ["agents", made["project_id"]]  # type: ignore[index]
    assert run(*old, "--token", made["token"], env=env).returncode == 3  # type: ignore[index]
    assert run(*old, "--token", new, env=env).returncode == 0
    missing = run("project", "token", "prj_000000000000", env=env)
    assert missing.returncode == 4 and "NOT_FOUND" in missing.stderr


def test_text_from_agents_is_shown_with_its_escapes_never_raw(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    project.agent("Guarded", inbound="hold")
    body = f"line one {HOSTILE}\nline two\ttabbed\r overwritten?"
    alice.api.send(["Bob"], HOSTILE_SUBJECT, body)
    alice.api.send(["Guarded"], HOSTILE_SUBJECT, body)
    env = client_env(project, COLUMNS="200")
    wait_until(lambda: bob.api.inbox()["messages"], what="the message")
    shown = run("inbox", "--token", bob.row["token"], env=env).stdout
    held = run("held", "--project", project.project_id, "--token", project.token,
               env=env).stdout
    for output in (shown, held):  # the held list shows subjects, the inbox bodies too
        assert not any(ch in output for ch in RAW), repr(output)
        assert "x \\u202eevil\\u202c" in output, output
    assert "x\\x1b]0;TITLE\\x07\\x1b[31mRED" in shown and "\\x9b2J" in shown, shown
    assert re.search(r"\nline two\s+tabbed\\x0d overwritten\?", shown)  # newlines, tabs stay
    as_json = run("inbox", "--json", "--token", bob.row["token"], env=env).stdout
    assert not any(ch in as_json for ch in RAW)
    message = json.loads(as_json)["messages"][0]
    assert message["subject"] == HOSTILE_SUBJECT and message["body_md"] == body
