"""Rendered threads: Markdown rendered off the event loop, once per message, within a budget."""

from __future__ import annotations

import html
import threading
import time
from typing import Any

from tests.integration.conftest import Agent, Project

# Bodies that cost the Markdown parser seconds of CPU each (about 1 MB, under the body limit).
PATHOLOGICAL = {
    "images": "![" * 500_000,
    "links": "[" * 1_000_000,
    "emphasis": "*_" * 500_000,
    "nested lists": "".join("  " * depth + "- x\n" for depth in range(700)),
    "long table": ("|" + "a|" * 2000 + "\n|" + "-|" * 2000 + "\n"
                   + ("|" + "b|" * 2000 + "\n") * 200),
}
# Shapes that cannot render within the budget on any machine.
UNRENDERABLE = ("images", "links", "emphasis")
ANSWER_WITHIN_S = 2.0
OTHER_PROJECT_WITHIN_S = 1.0

Json = dict[str, Any]


def rendered(agent: Agent, thread_id: str) -> tuple[float, dict[str, str]]:
    """How long the rendered thread took, and each message's body_html by subject."""
    started = time.monotonic()
    thread = agent.api.request("GET", f"/v1/threads/{thread_id}/rendered")
    took_s = time.monotonic() - started
    return took_s, {m["subject"]: m["body_html"] for m in thread["messages"]}


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


def test_pathological_bodies_answer_in_time_as_text_and_never_slow_another_project(
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
        for shape in UNRENDERABLE:
            assert bodies[shape].startswith('<pre class="unrendered">'), shape
            assert html.escape(PATHOLOGICAL[shape]) in bodies[shape]
        assert bodies["start"] == "<p>Bodies follow.</p>\n"
        # Asked again and again, as the console does: each answer in time, and the
        # bodies the budget gave up on are kept as text, not rendered again.
        times_s = [rendered(bob, first["thread_id"])[0] for _ in range(6)]
        assert max(times_s) < ANSWER_WITHIN_S, times_s
        again_s, again = rendered(bob, first["thread_id"])
        for shape in UNRENDERABLE:
            assert again[shape] == bodies[shape]
        assert again_s < 1.0, again_s
    finally:
        reader.stopping.set()
        reader.join(10)
        for c in other.clients:
            c.close()
    assert len(reader.times_s) > 20
    assert max(reader.times_s) < OTHER_PROJECT_WITHIN_S, sorted(reader.times_s)[-5:]


def _new_project(stack: Any) -> Json:
    import uuid

    key = f"/srv/checkouts/{uuid.uuid4().hex}"
    with stack.operator() as op:
        p = op.create_project(key)
    return {"project_id": p["project_id"], "project_key": key, "token": p["token"]}
