"""The project's human (docs/http-api.md: The console): sending as ``human``, the human inbox.

On the real stack: the project token writes as ``human`` (always wake), agents
send and reply to ``human``, and the human inbox keeps the inbox cursor rules.
"""

from __future__ import annotations

from typing import Any

import pytest

from messaging.client import CourierAPIError
from tests.integration.conftest import Agent, Project
from tests.stack import wait_until

Json = dict[str, Any]


def as_human(project: Project, **body: Any) -> Json:
    """Send as the project's human with its token."""
    return project.admin.request("POST", f"/v1/projects/{project.project_id}/messages",
                                 json=body)


def human_inbox(project: Project, cursor: str | None = None) -> Json:
    params = {"cursor": cursor} if cursor else {}
    return project.admin.request("GET", f"/v1/projects/{project.project_id}/human/inbox",
                                 params=params)


def new_mail(agent: Agent, count: int = 1) -> list[Json]:
    return wait_until(lambda: (m := agent.api.inbox()["messages"]) and len(m) >= count and m,
                      what=f"mail for {agent.label}")


def human_mail(project: Project, count: int) -> list[Json]:
    return wait_until(lambda: (m := human_inbox(project)["messages"]) and len(m) >= count and m,
                      what="mail in the human inbox")


def test_the_project_token_sends_as_human_and_it_always_wakes(project: Project):
    bob = project.agent("Bob")
    sent = as_human(project, to=["Bob"], subject="Stop", body_md="Please **stop** the deploy.")
    assert (sent["from"], sent["sender_id"]) == ("human", "human")
    assert sent["notification_policy"] == "wake"
    assert not any("human" in w for w in sent["delivery"]["warnings"])
    [mail] = new_mail(bob)
    assert (mail["id"], mail["from"], mail["body_md"]) == (
        sent["id"], "human", "Please **stop** the deploy.")


def test_quiet_is_refused_for_the_human(project: Project):
    project.agent("Bob")
    with pytest.raises(CourierAPIError) as caught:
        as_human(project, to=["Bob"], subject="x", body_md="y", notification_policy="quiet")
    assert (caught.value.status, caught.value.code) == (422, "INVALID_ARGUMENT")
    assert caught.value.body["error"]["details"]["field"] == "notification_policy"


def test_only_the_project_token_speaks_as_human(project: Project):
    bob = project.agent("Bob")
    for call in (lambda: bob.api.request("POST", f"/v1/projects/{project.project_id}/messages",
                                         json={"to": ["Bob"], "subject": "x", "body_md": "y"}),
                 lambda: bob.api.request("GET",
                                         f"/v1/projects/{project.project_id}/human/inbox")):
        with pytest.raises(CourierAPIError) as caught:
            call()
        assert caught.value.status == 403


def test_agents_write_and_reply_to_human_and_the_inbox_cursor_is_exact(project: Project):
    alice = project.agent("Alice")
    asked = alice.api.send("human", "Need a decision", "Ship on Friday?")
    assert asked["delivery"]["observations"][0]["recipient"] == "human"
    [first] = human_mail(project, 1)
    assert (first["id"], first["from"]) == (asked["id"], alice.label)
    page = human_inbox(project)
    cursor = page["next_cursor"]
    assert human_inbox(project, cursor)["messages"] == []

    told = as_human(project, to=["Alice"], subject="Question", body_md="Is auth done?")
    [mail] = [m for m in new_mail(alice) if m["id"] == told["id"]]
    answer = alice.api.reply(mail["id"], "Yes, merged.")
    assert answer["to"] == ["human"] and answer["thread_id"] == told["thread_id"]
    later = wait_until(lambda: human_inbox(project, cursor)["messages"], what="the reply")
    assert [m["id"] for m in later] == [answer["id"]]
    thread = project.admin.request("GET", f"/v1/threads/{told['thread_id']}")["messages"]
    assert [m["from"] for m in thread] == ["human", alice.label]


def test_the_human_is_not_listed_as_an_agent(project: Project):
    project.agent("Alice")
    assert [a["name"] for a in project.admin.list_agents(project.project_id)] == ["Alice"]


def test_the_humans_own_mail_is_never_held(project: Project):
    guarded = project.agent("Guarded", inbound="hold")
    sent = as_human(project, to=["Guarded"], subject="Hi", body_md="from the human")
    assert sent["delivery"]["observations"][0]["held"] is False
    assert new_mail(guarded)[0]["id"] == sent["id"]
