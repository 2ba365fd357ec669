"""Rendered threads: Markdown rendered off the event loop, once per message, within a budget."""

from __future__ import annotations

import html
import threading
import time
from typing import Any

import pytest

from messaging.client import CourierAPIError, CourierClient
from tests.integration.conftest import Agent, Project

# Bodies crafted against Markdown parsers (about 1 MB each, under the body limit):
# seconds each for a backtracking parser, most of a second for ours.
PATHOLOGICAL = {
    "images": "![" * 500_000,
    "links": "[" * 1_000_000,
    "emphasis": "*_" * 500_000,
    "nested lists": "".join("  " * depth + "- x\n" for depth in range(700)),
    "long table": ("|" + "a|" * 2000 + "\n|" + "-|" * 2000 + "\n"
                   + ("|" + "b|" * 2000 + "\n") * 200),
}
# A render budget no 1 MB body fits in, on any machine.
TINY_BUDGET_S = "0.01"
UNRENDERED = '<pre class="unrendered">'
ANSWER_WITHIN_S = 2.0
OTHER_PROJECT_WITHIN_S = 1.0

Json = dict[str, Any]


def rendered(agent: Agent, thread_id: str) -> tuple[float, dict[str, str]]:
    """How long the slowest page of the rendered thread took, and each message's
    body_html by subject."""
    messages, params, took_s = [], {}, 0.0
    while True:
        started = time.monotonic()
        page = agent.api.request("GET", f"/v1/threads/{thread_id}/rendered", params=params)
        took_s = max(took_s, time.monotonic() - started)
        messages += page["messages"]
        if not page["more"]:
            break
        params = {"cursor": page["next_cursor"]}
    return took_s, {m["subject"]: m["body_html"] for m in messages}


class Reader(threading.Thread):
    """Reads an agent's inbox over and over, keeping each answer's time."""

    def __init__(self, agent: Agent) -> None:
        super().__init__(daemon=True)
        self.agent, self.times_s, self.stopping = agent, [], threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            started = time.monotonic()
            self.agent.api.inbox(limit=10)
            self.times_s.append(time.monotonic() - started)
            time.sleep(0.02)


def test_markdown_renders_sanitized_and_the_same_each_time(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send("Bob", "Plan", "**bold** <script>alert(1)</script> "
                          "[x](javascript:alert(1)) ![i](http://e.example/i.png)\n\n"
                          "| a |\n|---|\n| 1 |\n")
    _, first = rendered(bob, sent["thread_id"])
    shown = first["Plan"]
    assert "<strong>bold</strong>" in shown and "<table>" in shown
    assert "<script" not in shown and 'href="javascript' not in shown and "<img" not in shown
    assert rendered(bob, sent["thread_id"])[1] == first


def test_pathological_bodies_answer_in_time_and_never_slow_another_project(
        project: Project, stack: Any):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    first = alice.api.send("Bob", "start", "Bodies follow.")
    for shape, body in PATHOLOGICAL.items():
        alice.api.send("Bob", shape, body, thread_id=first["thread_id"])
    other = Project(stack, **_new_project(stack))
    reader = Reader(other.agent("Carol"))
    other.agent("Dave").api.send("Carol", "hello", "fine")
    reader.start()
    try:
        time.sleep(0.5)
        took_s, bodies = rendered(bob, first["thread_id"])
        assert took_s < ANSWER_WITHIN_S
        assert bodies["start"] == "<p>Bodies follow.</p>\n"
        # Asked again and again, as the console does: each answer in time, each
        # body rendered or, while it renders, shown as text.
        times_s = [rendered(bob, first["thread_id"])[0] for _ in range(6)]
        assert max(times_s) < ANSWER_WITHIN_S, times_s
        again_s, again = rendered(bob, first["thread_id"])
        for shape, body in PATHOLOGICAL.items():
            shown = again[shape]
            assert not shown.startswith(UNRENDERED) or html.escape(body) in shown, shape
        assert again_s < 1.0, again_s
    finally:
        reader.stopping.set()
        reader.join(10)
        for c in other.clients:
            c.close()
    assert len(reader.times_s) > 20
    assert max(reader.times_s) < OTHER_PROJECT_WITHIN_S, sorted(reader.times_s)[-5:]


def test_a_body_past_its_budget_is_shown_as_text_and_kept_so(project: Project, stack: Any):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    crafted = PATHOLOGICAL["emphasis"]
    first = alice.api.send("Bob", "start", "Bodies *follow*.")
    alice.api.send("Bob", "crafted", crafted, thread_id=first["thread_id"])
    api, url = stack.start_api(env={"COURIER_RENDER_BUDGET_S": TINY_BUDGET_S})
    try:
        with CourierClient(url, bob.row["token"]) as client:
            path = f"/v1/threads/{first['thread_id']}/rendered"
            shown = {m["subject"]: m["body_html"] for m in client.request("GET", path)["messages"]}
            assert shown["crafted"] == f"{UNRENDERED}{html.escape(crafted)}</pre>"
            # The short body fits its budget on a quiet machine; on a busy one it may
            # not, and is then text too: either way it is kept as first shown.
            assert shown["start"] in ("<p>Bodies <em>follow</em>.</p>\n",
                                      f"{UNRENDERED}Bodies *follow*.</pre>")
            started = time.monotonic()
            again = {m["subject"]: m["body_html"] for m in client.request("GET", path)["messages"]}
            assert time.monotonic() - started < 1.0
            assert again == shown
    finally:
        api.stop()


def _new_project(stack: Any) -> Json:
    import uuid

    key = f"/srv/checkouts/{uuid.uuid4().hex}"
    with stack.operator() as op:
        p = op.create_project(key)
    return {"project_id": p["project_id"], "project_key": key, "token": p["token"]}


def test_a_rendered_thread_carries_the_html_in_place_of_the_markdown(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send("Bob", "Plan", "# Plan\n\nstep *one*")
    plain = bob.api.request("GET", f"/v1/threads/{sent['thread_id']}")["messages"][0]
    shown = bob.api.request("GET", f"/v1/threads/{sent['thread_id']}/rendered")["messages"][0]
    assert "body_md" not in shown and "<em>one</em>" in shown["body_html"]
    assert {k: v for k, v in plain.items() if k != "body_md"} == {
        k: v for k, v in shown.items() if k != "body_html"}


def test_an_unchanged_rendered_thread_answers_304_and_a_changed_one_a_new_etag(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    project.agent("Carol")
    sent = alice.api.send("Bob", "Plan", "step *one*", bcc=["Carol"])
    path = f"/v1/threads/{sent['thread_id']}/rendered"
    first = bob.api.http.get(path)
    etag = first.headers["ETag"]
    assert first.status_code == 200 and etag == bob.api.http.get(path).headers["ETag"]
    again = bob.api.http.get(path, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b"" and again.headers["ETag"] == etag
    assert bob.api.http.get(path, headers={"If-None-Match": '"other"'}).status_code == 200
    # Another view of the same thread (only the sender sees its bcc) has a tag of its own.
    assert alice.api.http.get(path, headers={"If-None-Match": etag}).status_code == 200
    bob.api.reply(sent["id"], "step *two*")
    grown = bob.api.http.get(path, headers={"If-None-Match": etag})
    assert grown.status_code == 200 and grown.headers["ETag"] != etag
    assert [m["subject"] for m in grown.json()["messages"]] == ["Plan", "Re: Plan"]


def _rendered_fully(agent: Agent, thread_id: str) -> None:
    """View the thread until every body shows rendered (each is rendered once)."""
    deadline = time.monotonic() + 10
    while any(UNRENDERED in h for h in rendered(agent, thread_id)[1].values()):
        assert time.monotonic() < deadline, "bodies still shown as text"
        time.sleep(0.1)


def _store_quiet(r: Any) -> int:
    """Wait until the store sends next to nothing (the bodies' search indexing is done);
    the bytes it has sent so far."""
    deadline = time.monotonic() + 20
    sent = int(r.info("stats")["total_net_output_bytes"])
    while True:
        time.sleep(0.3)
        now = int(r.info("stats")["total_net_output_bytes"])
        if now - sent < 16 * 1024:
            return now
        assert time.monotonic() < deadline, "the store never went quiet"
        sent = now


def test_a_rendered_thread_viewed_again_reads_no_body_from_the_store(project: Project,
                                                                    stack: Any):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    bodies = [f"part {n}: " + "plain words " * 20_000 for n in range(4)]  # 240 KB each
    first = alice.api.send("Bob", "part 0", bodies[0])
    for n, body in enumerate(bodies[1:], start=1):
        alice.api.send("Bob", f"part {n}", body, thread_id=first["thread_id"])
    _rendered_fully(bob, first["thread_id"])
    with stack.redis() as r:
        sent_before = _store_quiet(r)
        _, shown = rendered(bob, first["thread_id"])
        sent_by_store = int(r.info("stats")["total_net_output_bytes"]) - sent_before
    assert all(shown[f"part {n}"].startswith(f"<p>part {n}: plain words") for n in range(4))
    # The bodies are 960 KB; what may change of four messages is a few hundred bytes.
    assert sent_by_store < 64 * 1024, sent_by_store


def test_what_changes_of_a_kept_message_shows_in_its_rendered_thread(project: Project):
    alice, guarded = project.agent("Alice"), project.agent("Guarded", inbound="hold")
    opened = alice.api.send("Guarded", "Open", "to **Guarded**")
    path = f"/v1/threads/{opened['thread_id']}/rendered"
    _rendered_fully(alice, opened["thread_id"])  # the sender's view keeps the message
    with pytest.raises(CourierAPIError) as e:
        guarded.api.request("GET", path)
    assert e.value.status == 404  # held: the recipient sees nothing of it yet
    delivery_id = opened["delivery"]["observations"][0]["delivery_id"]
    project.admin.request("POST", f"/v1/deliveries/{delivery_id}/release")
    (shown,) = guarded.api.request("GET", path)["messages"]
    assert shown["id"] == opened["id"]
    assert shown["body_html"] == "<p>to <strong>Guarded</strong></p>\n"
