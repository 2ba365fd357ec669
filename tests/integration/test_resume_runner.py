"""``courier resume claude-code`` on the real stack, with a stand-in ``claude`` on
PATH that records how it was run, runs the real Claude Code hooks a resumed
session runs (``SessionStart`` with ``source: resume``, then ``SessionEnd``),
and notes whether another resume of the session was running meanwhile
(docs/hosts.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from messaging.hosts import claude_code
from tests import npm
from tests.integration.conftest import Project
from tests.stack import wait_until

# Each test starts `courier` processes of its own: the slow tier.
pytestmark = pytest.mark.slow

COURIER = [sys.executable, "-m", "messaging.cli"]

Json = dict[str, Any]

STAND_IN = textwrap.dedent('''\
    #!{python}
    """A stand-in for claude: records its run, runs the hooks a resumed session runs."""
    import fcntl, json, os, subprocess, sys, time
    log = os.environ["STAND_IN_LOG"]
    argv = sys.argv[1:]
    session = argv[argv.index("--resume") + 1]
    try:
        os.close(os.open(log + ".running", os.O_CREAT | os.O_EXCL))
        overlap = False
    except FileExistsError:
        overlap = True
    entry = {{"argv": argv, "cwd": os.getcwd(), "overlap": overlap,
             "env": {{k: v for k, v in os.environ.items() if k.startswith("COURIER_")}},
             "env_values": list(os.environ.values()), "started": time.time()}}

    def hook(event, **fields):
        payload = {{"session_id": session, "transcript_path": "/dev/null", "cwd": os.getcwd(),
                   "permission_mode": "default", "hook_event_name": event, **fields}}
        done = subprocess.run({courier} + ["hook", "claude-code"], input=json.dumps(payload),
                              capture_output=True, text=True)
        return json.loads(done.stdout) if done.stdout.strip() else {{}}

    shown = hook("SessionStart", source="resume")
    entry["context"] = shown.get("hookSpecificOutput", {{}}).get("additionalContext", "")
    time.sleep(float(os.environ.get("STAND_IN_TURN_S", "0")))
    code = int(os.environ.get("STAND_IN_EXIT", "0"))
    if code == 0:
        hook("SessionEnd", reason="other")
    if not overlap:
        os.unlink(log + ".running")
    entry["ended"] = time.time()
    with open(log, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(json.dumps(entry) + "\\n")
    sys.exit(code)
    ''')


class Host:
    """A host machine's side: the session's hook state, the stand-in on PATH, runners."""

    def __init__(self, project: Project, tmp: Path) -> None:
        self.project, self.tmp = project, tmp
        self.session_id = str(uuid.uuid4())
        self.url = project.stack.api_url
        self.state_dir = tmp / "hook-state"
        self.log = tmp / "claude-runs.jsonl"
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        stand_in = bin_dir / "claude"
        stand_in.write_text(STAND_IN.format(python=sys.executable, courier=repr(COURIER)))
        stand_in.chmod(0o755)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
        self.env.update(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                        COURIER_URL=self.url, COURIER_HOOK_STATE_DIR=str(self.state_dir),
                        XDG_STATE_HOME=str(tmp / "state"), STAND_IN_LOG=str(self.log))
        self.token = ""
        self.stderr = ""
        self.quiet_ids: list[str] = []

    def hook(self, event: str, **fields: Any) -> None:
        """A hook of the session as Claude Code runs it, with the project's token (the
        first one registers the session's agent, bound to the session)."""
        payload = {"session_id": self.session_id, "transcript_path": "/dev/null",
                   "cwd": str(self.tmp), "permission_mode": "default",
                   "hook_event_name": event, **fields}
        env = {**self.env, "COURIER_TOKEN": self.project.token,
               "COURIER_PROJECT": self.project.project_id, "COURIER_AGENT_NAME": "Builder"}
        done = subprocess.run([*COURIER, "hook", "claude-code"], input=json.dumps(payload),
                              capture_output=True, text=True, env=env, timeout=30)
        assert done.returncode == 0 and not done.stderr, done.stderr
        session = claude_code.SessionFiles(self.url, self.state_dir).load(self.session_id)
        assert session is not None
        self.token = session.token

    def builder(self) -> Json:
        [row] = [a for a in self.project.admin.list_agents(self.project.project_id)
                 if a["name"] == "Builder"]
        return row

    @contextmanager
    def runner(self, *args: str, **env: str) -> Iterator[subprocess.Popen[str]]:
        """``courier resume claude-code`` with the agent's token, following its stream
        once this returns."""
        state = self.tmp / f"runner-{uuid.uuid4().hex}.event"
        proc = subprocess.Popen(
            [*COURIER, "resume", "claude-code", "--cwd", str(self.tmp), "--state-file",
             str(state), *args], env={**self.env, "COURIER_TOKEN": self.token, **env},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            self._until_following(state)
            yield proc
        finally:
            if proc.poll() is None:
                proc.terminate()
            self.stderr = proc.communicate(timeout=30)[1]

    def _until_following(self, state: Path) -> None:
        self.quiet_ids += until_following(self.project, self.builder()["label"], state)

    def runs(self) -> list[Json]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


def until_following(project: Project, target: str, state: Path) -> list[str]:
    """Quiet mail to ``target`` until its runner has seen some (its state file names
    the event): its stream is open then. The quiet messages' ids."""
    sender = project.agent(f"Probe-{uuid.uuid4().hex[:6]}")
    sent: list[str] = []

    def seen() -> bool:
        sent.append(sender.api.send(target, "FYI", "no hurry",
                                    notification_policy="quiet")["id"])
        return state.exists()
    wait_until(seen, what="the runner following the agent's stream", timeout_s=30,
               interval_s=0.5)
    return sent


def did(message: Json) -> str:
    """The delivery id of a message's one recipient."""
    return str(message["delivery"]["observations"][0]["delivery_id"])


def host_events(project: Project, message: Json) -> list[str]:
    return [e["kind"] for e in project.admin.delivery(did(message)).get("host_events") or []]


@pytest.fixture
def host(project: Project, tmp_path: Path) -> Host:
    """A Claude Code session that ran and ended: its agent, Builder, is exited."""
    h = Host(project, tmp_path)
    h.hook("SessionStart", source="startup")
    h.hook("SessionEnd", reason="prompt_input_exit")
    assert h.builder()["presence"] == "exited"
    bound = h.builder()["bound_source"]
    assert (bound["kind"], bound["thread_id"]) == ("claude-code", h.session_id)
    return h


def test_an_exited_session_is_resumed_once_per_wake_message_with_its_session_id(
        project: Project, host: Host):
    alice = project.agent("Alice")
    with host.runner("--count", "2") as runner:
        first = alice.api.send("Builder", "Take the auth task", "Start with `auth.py`.\n")
        wait_until(lambda: len(host.runs()) == 1, what="the first resume", timeout_s=60)
        wait_until(lambda: host_events(project, first) == ["resume_started", "resume_ended"],
                   what="the first resume's outcome on its delivery", timeout_s=30)
        assert host.builder()["presence"] == "exited"
        second = alice.api.send("Builder", "One more", "Also `session.py`.\n")
        runner.wait(timeout=60)
    assert runner.returncode == 0, host.stderr
    runs = host.runs()
    assert len(runs) == 2
    for run, message, body in ((runs[0], first, "Start with `auth.py`."),
                               (runs[1], second, "Also `session.py`.")):
        assert run["argv"][:3] == ["--resume", host.session_id, "-p"] and len(run["argv"]) == 4
        prompt = run["argv"][3]
        assert message["id"] in prompt and "Courier" in prompt
        assert body not in prompt and not any(body in v for v in run["env_values"])
        assert run["env"]["COURIER_TOKEN"] == host.token and run["env"]["COURIER_URL"]
        assert run["cwd"] == str(host.tmp)
        assert body in run["context"]  # the resumed session's SessionStart showed the mail
    assert host_events(project, second) == ["resume_started", "resume_ended"]
    assert not any(q in r["argv"][3] for q in host.quiet_ids for r in runs)


def test_quiet_mail_resumes_nothing(project: Project, host: Host):
    alice = project.agent("Alice")
    with host.runner():
        quiet = alice.api.send("Builder", "FYI", "read it when you like",
                               notification_policy="quiet")
        marker = alice.api.send("Builder", "Now", "wake up\n")
        wait_until(lambda: len(host.runs()) == 1, what="the resume for the wake message",
                   timeout_s=60)
    [run] = host.runs()
    assert quiet["id"] not in run["argv"][3] and marker["id"] in run["argv"][3]
    assert host_events(project, quiet) == []


def test_no_resume_while_the_agent_is_not_exited(project: Project, host: Host):
    alice = project.agent("Alice")
    host.hook("SessionStart", source="resume")  # the user opened the session again
    assert host.builder()["presence"] == "busy"
    with host.runner():
        busy = alice.api.send("Builder", "While you work", "x\n")
        host.hook("Stop", stop_hook_active=True)
        assert host.builder()["presence"] == "idle"
        idle = alice.api.send("Builder", "While you wait", "y\n")
        host.hook("SessionEnd", reason="other")
        after = alice.api.send("Builder", "Once you left", "z\n")
        wait_until(lambda: len(host.runs()) == 1, what="the resume once exited",
                   timeout_s=60)
    [run] = host.runs()
    assert after["id"] in run["argv"][3]
    assert busy["id"] not in run["argv"][3] and idle["id"] not in run["argv"][3]
    assert host_events(project, busy) == host_events(project, idle) == []


def test_two_runners_never_resume_one_session_twice_at_once(project: Project, host: Host):
    alice = project.agent("Alice")
    with host.runner(STAND_IN_TURN_S="2"), host.runner(STAND_IN_TURN_S="2"):
        sent = [alice.api.send("Builder", f"Task {n}", f"do {n}\n") for n in range(3)]
        # Each is shown by the SessionStart of some resume (and then observed).
        for m in sent:
            wait_until(lambda m=m: project.admin.delivery(did(m))["observed_ts"],
                       what=f"{m['id']} shown by a resume", timeout_s=60)
        wait_until(lambda: host.builder()["presence"] == "exited", what="the last turn's end",
                   timeout_s=30)
        time.sleep(1.0)  # a resume more, if any, would have started by now
    runs = host.runs()
    assert runs and not any(r["overlap"] for r in runs)
    ordered = sorted(runs, key=lambda r: r["started"])
    assert all(a["ended"] <= b["started"] for a, b in zip(ordered, ordered[1:], strict=False))
    for m in sent:  # no message was resumed for twice, by either runner
        assert host_events(project, m) in ([], ["resume_started", "resume_ended"])
        assert sum(m["id"] in r["argv"][3] for r in runs) <= 1
    assert sent[0]["id"] in ordered[0]["argv"][3]


def test_mail_the_resumed_turn_showed_resumes_nothing_more(project: Project, host: Host):
    alice = project.agent("Alice")
    with host.runner(STAND_IN_TURN_S="4"):
        first = alice.api.send("Builder", "Take the auth task", "x\n")
        # The turn is under way once its SessionStart hook said the agent is busy.
        wait_until(lambda: host.builder()["presence"] == "busy", what="the resumed turn",
                   timeout_s=60)
        shown = alice.api.send("Builder", "While you work", "y\n")
        missed = alice.api.send("Builder", "Also", "z\n")
        # The turn's hooks put the first into the conversation, as a Stop hook would.
        wait_until(lambda: project.admin.delivery(did(shown))["outcome"] == "accepted",
                   what="the second message in the inbox")
        project.client(host.token).observed(did(shown))
        wait_until(lambda: len(host.runs()) == 2, what="the resume for the missed message",
                   timeout_s=60)
        wait_until(lambda: "resume_ended" in host_events(project, missed),
                   what="its outcome", timeout_s=30)
    first_run, second_run = sorted(host.runs(), key=lambda r: r["started"])
    assert first["id"] in first_run["argv"][3] and missed["id"] in second_run["argv"][3]
    assert shown["id"] not in second_run["argv"][3] and host_events(project, shown) == []


def test_a_failed_resume_is_recorded_and_leaves_the_agent_exited(project: Project, host: Host):
    alice = project.agent("Alice")
    with host.runner(STAND_IN_EXIT="3"):
        sent = alice.api.send("Builder", "Take the auth task", "x\n")
        wait_until(lambda: host_events(project, sent) == ["resume_started", "resume_failed"],
                   what="the failed resume on the delivery", timeout_s=60)
        wait_until(lambda: host.builder()["presence"] == "exited", what="presence exited")
    [failed] = [e for e in project.admin.delivery(did(sent))["host_events"]
                if e["kind"] == "resume_failed"]
    assert "claude exited 3" in failed["detail"]
    assert f"session {host.session_id}: claude exited 3" in host.stderr


# Claude Code's own CLI, from npm: it runs its hooks and writes its transcript offline.
CLAUDE_CODE = {"@anthropic-ai/claude-code": "2.1.197"}


def real_claude() -> str:
    """Claude Code's own CLI: ``COURIER_TEST_CLAUDE``, else the one npm installs once (the
    test is skipped, saying why, where npm cannot install it)."""
    given = os.environ.get("COURIER_TEST_CLAUDE")
    if given:
        return given
    return str(npm.installed("claude-code", CLAUDE_CODE) / "node_modules" / ".bin" / "claude")


def test_the_real_claude_code_resumed_offline_shows_the_mail_in_the_resumed_session(
        project: Project, tmp_path: Path):
    claude = real_claude()
    checkout, home = tmp_path / "checkout", tmp_path / "home"
    checkout.mkdir()
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
    env.update(HOME=str(home), COURIER_URL=project.stack.api_url,
               COURIER_HOOK_STATE_DIR=str(tmp_path / "hook-state"),
               XDG_STATE_HOME=str(tmp_path / "state"))
    subprocess.run([*COURIER, "hook", "install", "claude-code", "--project", str(checkout)],
                   env=env, check=True, capture_output=True, timeout=30)
    (checkout / ".mcp.json").unlink()  # the hooks alone: no MCP server for an offline run
    session_id = str(uuid.uuid4())
    # A first session, offline: Claude Code runs its hooks, then stops, not logged in.
    subprocess.run([claude, "-p", "hello", "--session-id", session_id], cwd=checkout,
                   env={**env, "COURIER_TOKEN": project.token,
                        "COURIER_PROJECT": project.project_id,
                        "COURIER_AGENT_NAME": "Builder"},
                   capture_output=True, timeout=120)
    [builder] = [a for a in project.admin.list_agents(project.project_id)
                 if a["name"] == "Builder"]
    assert builder["presence"] == "exited", "the real session's hooks did not run"
    assert builder["bound_source"]["thread_id"] == session_id
    hooks = claude_code.SessionFiles(project.stack.api_url, tmp_path / "hook-state")
    session = hooks.load(session_id)
    assert session is not None
    alice = project.agent("Alice")
    state = tmp_path / "runner.event"
    runner = subprocess.Popen(
        [*COURIER, "resume", "claude-code", "--cwd", str(checkout), "--claude", claude,
         "--count", "1", "--state-file", str(state)],
        env={**env, "COURIER_TOKEN": session.token},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        until_following(project, builder["label"], state)
        sent = alice.api.send("Builder", "Take the auth task", "Start with `auth.py`.\n")
        runner.wait(timeout=180)
    finally:
        if runner.poll() is None:
            runner.kill()
        _, stderr = runner.communicate(timeout=30)
    assert runner.returncode == 0, stderr
    transcript = next(home.glob(f".claude/projects/*/{session_id}.jsonl"))
    shown = [json.loads(line).get("attachment") or {} for line in
             transcript.read_text().splitlines()]
    context = [c for a in shown if a.get("type") == "hook_additional_context"
               for c in a.get("content", [])]
    assert any("Start with `auth.py`." in c and sent["id"] in c for c in context), stderr
    prompts = [json.loads(line) for line in transcript.read_text().splitlines()]
    assert any(sent["id"] in json.dumps(p.get("message", {})) for p in prompts
               if p.get("type") == "user")
    # Offline, the turn itself stops at once (not logged in): a failed turn, recorded.
    assert host_events(project, sent) in (["resume_started", "resume_ended"],
                                          ["resume_started", "resume_failed"])
