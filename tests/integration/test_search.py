"""Search (docs/http-api.md: Reading) on the real stack: the worker fills the index after delivery.

Words, prefixes, accents and case, topic, sender, time range, cursors, bcc
privacy, quiet mail, and what a caller may not see.
"""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from messaging.client import CourierAPIError
from tests.integration.conftest import Agent, Project
from tests.integration.test_cli import courier
from tests.integration.test_mcp import mcp
from tests.stack import wait_until

Json = dict[str, Any]


def found(agent: Agent, q: str = "", **filters: Any) -> list[str]:
    """The subjects an agent's search finds, newest first (every page)."""
    out, cursor = [], None
    while True:
        page = agent.api.search(q, cursor=cursor, limit=2, **filters)
        out += [m["subject"] for m in page["messages"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return out


def indexed(agent: Agent, subject: str) -> None:
    """Wait until the agent's search finds a subject (the worker indexes after delivery)."""
    wait_until(lambda: subject in found(agent, ""), what=f"{subject!r} searchable")


@pytest.fixture
def mail(project: Project) -> tuple[Agent, Agent, Agent]:
    """Alice sent Bob three messages; Carol sent Bob one."""
    alice, bob, carol = project.agent("Alice"), project.agent("Bob"), project.agent("Carol")
    alice.api.send("Bob", "Deploy plan", "The **authentication** service moves tonight.",
                   topic="ops")
    alice.api.send("Bob", "Café menu", "Crème brûlée on Friday, déjà vu.", topic="food")
    alice.api.send("Bob", "Auth tokens", "Rotate the AUTHOR keys too.", topic="ops")
    carol.api.send("Bob", "Review", "Please look at the authorization diff.")
    indexed(bob, "Review")
    indexed(bob, "Auth tokens")
    return alice, bob, carol


def test_every_word_must_match_in_subject_or_body(mail: tuple[Agent, Agent, Agent]):
    _, bob, _ = mail
    assert found(bob, "deploy tonight") == ["Deploy plan"]
    assert found(bob, "plan friday") == []
    assert found(bob, "auth") == ["Auth tokens"]


def test_a_star_makes_a_word_a_prefix(mail: tuple[Agent, Agent, Agent]):
    _, bob, _ = mail
    assert found(bob, "auth*") == ["Review", "Auth tokens", "Deploy plan"]
    assert found(bob, "autho* diff") == ["Review"]
    assert found(bob, "zzz*") == []


def test_case_and_accents_do_not_matter(mail: tuple[Agent, Agent, Agent]):
    _, bob, _ = mail
    assert found(bob, "CREME brulee") == ["Café menu"]
    assert found(bob, "cafe DÉJÀ") == ["Café menu"]
    assert found(bob, "Authentication") == ["Deploy plan"]


def test_topic_and_sender_filter(mail: tuple[Agent, Agent, Agent]):
    _, bob, _ = mail
    assert found(bob, topic="ops") == ["Auth tokens", "Deploy plan"]
    assert found(bob, "auth*", sender="Carol") == ["Review"]
    assert found(bob, "auth*", sender="Alice", topic="ops") == ["Auth tokens", "Deploy plan"]
    assert found(bob, sender="Nobody") == []


def test_time_range(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    first = alice.api.send("Bob", "First", "early")
    indexed(bob, "First")
    middle = datetime.now(UTC)
    # the search score counts milliseconds: keep the two sends apart
    wait_until(lambda: datetime.now(UTC) > middle + timedelta(milliseconds=5))
    alice.api.send("Bob", "Second", "late")
    indexed(bob, "Second")
    at = middle.isoformat()
    assert found(bob, since=at) == ["Second"]
    assert found(bob, until=at) == ["First"]
    assert found(bob, since=first["created_ts"], until=first["created_ts"]) == ["First"]


def test_pages_are_newest_first_and_never_repeat(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    subjects = [f"Note {i}" for i in range(7)]
    for s in subjects:
        alice.api.send("Bob", s, "same words")
    indexed(bob, "Note 6")
    wait_until(lambda: len(found(bob, "same")) == 7)
    assert found(bob, "same words") == subjects[::-1]


def test_a_message_of_many_words_is_found_by_any_of_them(project: Project):
    """Its words reach the store in slices; the last slice's words are found too."""
    alice, bob = project.agent("Alice"), project.agent("Bob")
    alice.api.send("Bob", "Glossary", " ".join(f"w{i:04d}" for i in range(1200)))
    indexed(bob, "Glossary")
    for q in ("w0000", "w0600", "w1199", "w119*"):
        assert found(bob, q) == ["Glossary"], q


def test_the_sender_finds_what_it_sent_others_find_nothing(mail: tuple[Agent, Agent, Agent]):
    alice, _, carol = mail
    wait_until(lambda: found(alice, "auth*") == ["Auth tokens", "Deploy plan"])
    assert found(carol, "deploy") == []


def test_a_snippet_shows_the_words_found(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    body = "Filler words here. " * 20 + "The needle is in this part of the body. " + "x " * 200
    alice.api.send("Bob", "Haystack", body)
    indexed(bob, "Haystack")
    [hit] = bob.api.search("needle")["messages"]
    assert "needle" in hit["snippet"]
    assert len(hit["snippet"]) < 200


def test_bcc_finds_it_and_others_never_see_the_bcc(project: Project):
    alice, bob, eve = project.agent("Alice"), project.agent("Bob"), project.agent("Eve")
    alice.api.send("Bob", "Secret plan", "quietly copied", bcc=["Eve"])
    indexed(eve, "Secret plan")
    indexed(bob, "Secret plan")
    [for_eve] = eve.api.search("copied")["messages"]
    [for_bob] = bob.api.search("copied")["messages"]
    assert for_eve["bcc"] == ["Eve"]
    assert for_bob["bcc"] == []
    assert "Eve" not in str(for_bob)
    [for_alice] = alice.api.search("copied")["messages"]
    assert for_alice["bcc"] == ["Eve"]


def test_quiet_mail_is_found(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send("Bob", "Low key", "a quiet word", notification_policy="quiet")
    assert sent["notification_policy"] == "quiet"
    indexed(bob, "Low key")
    assert found(bob, "quiet") == ["Low key"]


def test_mail_is_indexed_after_the_store_forgot_its_scripts(project: Project):
    """The worker indexes by script hash; a store that lost its scripts (restarted
    without persistence) is given them again, and nothing goes unindexed."""
    alice, bob = project.agent("Alice"), project.agent("Bob")
    alice.api.send("Bob", "Before", "an ordinary word")
    indexed(bob, "Before")
    with project.stack.redis() as r:
        r.script_flush()
    alice.api.send("Bob", "After", "a remembered word")
    indexed(bob, "After")
    assert found(bob, "remembered") == ["After"]


def test_the_project_token_searches_every_message(mail: tuple[Agent, Agent, Agent],
                                                  project: Project):
    page = project.admin.request("GET", f"/v1/projects/{project.project_id}/search",
                                 params={"q": "auth*"})
    assert [m["subject"] for m in page["messages"]] == ["Review", "Auth tokens", "Deploy plan"]


@pytest.mark.parametrize("params", [{"cursor": "abc"}, {"limit": "0"}, {"since": "yesterday"},
                                    {"topic": "bad topic"}, {"nope": "1"},
                                    {"q": "a b c d e f g h i"}])
def test_bad_queries_are_rejected_clearly(project: Project, params: Json):
    bob = project.agent("Bob")
    with pytest.raises(CourierAPIError) as caught:
        bob.api.request("GET", "/v1/agents/me/search", params=params)
    assert (caught.value.status, caught.value.code) == (422, "INVALID_ARGUMENT")


def test_the_mcp_tool_returns_the_http_json(mail: tuple[Agent, Agent, Agent], project: Project):
    _, bob, _ = mail

    async def call() -> Json:
        async with mcp(project, bob) as tools:
            return await tools("search_messages", q="auth*", limit=1, **{"from": "Alice"})

    assert asyncio.run(call()) == bob.api.search("auth*", sender="Alice", limit=1)


def test_the_cli_prints_subjects_and_snippets(mail: tuple[Agent, Agent, Agent], project: Project):
    alice, bob, _ = mail
    env = {**os.environ, "COURIER_URL": project.stack.api_url, "COLUMNS": "200"}
    shown = courier("search", "brûlée", "--from", "Alice", "--token", bob.row["token"], env=env)
    assert f"{alice.label}: Café menu" in shown and "Crème brûlée on Friday" in shown
    assert "Deploy plan" not in shown


def test_the_sender_finds_its_held_mail_the_recipient_only_once_released(project: Project):
    alice, guarded = project.agent("Alice"), project.agent("Guarded", inbound="hold")
    sent = alice.api.send("Guarded", "Held proposal", "a careful word")
    assert sent["delivery"]["observations"][0]["held"] is True
    indexed(alice, "Held proposal")
    assert found(alice, "careful") == ["Held proposal"]
    assert found(guarded, "careful") == []
    project.admin.release(sent["delivery"]["observations"][0]["delivery_id"])
    indexed(guarded, "Held proposal")


def test_the_sender_finds_mail_waiting_for_a_name_not_yet_registered(project: Project):
    alice = project.agent("Alice")
    project.admin.allow_name(project.project_id, "Later")
    sent = alice.api.send("Later", "Pending brief", "an early word")
    assert sent["delivery"]["observations"][0]["target"] == "pending"
    indexed(alice, "Pending brief")
    assert found(alice, "early") == ["Pending brief"]


def test_a_subagent_finds_what_it_sent_under_its_session_s_address(project: Project):
    lead = project.agent("Lead")
    sub, other = project.agent("Sub", parent=lead.id), project.agent("Other")
    sent = sub.api.send("Other", "Cross session", "a travelling word")
    assert sent["via"] == sub.label
    indexed(other, "Cross session")
    for agent in (sub, lead):
        indexed(agent, "Cross session")
    [hit] = sub.api.search("travelling")["messages"]
    assert (hit["from"], hit["via"]) == (lead.label, sub.label)
