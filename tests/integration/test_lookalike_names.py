"""Names that read as others (docs/http-api.md: Projects and agents).

Names are NFKC-normalized, stored and compared that way; names with invisible
format characters, and names that read as a reserved name, are refused, so mail
to a lookalike of ``human`` reaches no impostor.
"""

from __future__ import annotations

import pytest

from tests.integration.conftest import Project

IMPOSTORS = [
    "hum\u0430n",  # Cyrillic a
    "human\u200b",  # zero-width space
    "Al\u2060ice",  # word joiner
    "\ufeffBob",  # zero-width no-break space
    "\u0397UMAN",  # Greek capital eta
    "c\u043eurier",  # Cyrillic o
    "rnain",  # rn reads as m
]


def _names(project: Project) -> list[str]:
    got = project.admin.http.get(f"/v1/projects/{project.project_id}/agents")
    return [a["name"] for a in got.json()["agents"]]


@pytest.mark.parametrize("name", IMPOSTORS)
def test_a_lookalike_or_invisible_name_is_refused_and_nothing_is_registered(
        project: Project, name: str):
    got = project.admin.http.post(f"/v1/projects/{project.project_id}/agents", json={
        "name": name, "transport": {"kind": "inbox"}})
    assert got.status_code == 422, got.text
    error = got.json()["error"]
    assert (error["code"], error["details"]["field"]) == ("INVALID_ARGUMENT", "name")
    assert got.json()["persisted"] is False
    assert _names(project) == []
    authorized = project.admin.http.put(f"/v1/projects/{project.project_id}/names/{name}",
                                        json={})
    assert authorized.status_code == 422, authorized.text


def test_mail_to_a_lookalike_of_human_reaches_no_impostor(project: Project):
    bob = project.agent("Bob")
    for name in ("hum\u0430n", "\u0397UMAN"):
        sent = bob.api.http.post("/v1/messages", json={
            "to": [name], "subject": "For the human", "body_md": "x"})
        assert sent.status_code == 422, sent.text
        assert sent.json()["error"]["code"] == "RECIPIENT_NOT_FOUND"
    for name in ("human\u200b", "Al\u2060ice"):
        sent = bob.api.http.post("/v1/messages", json={
            "to": [name], "subject": "For the human", "body_md": "x"})
        assert sent.status_code == 422, sent.text
        error = sent.json()["error"]
        assert (error["code"], error["details"]["field"]) == ("INVALID_ARGUMENT", "to.0")
    sent = bob.api.http.post("/v1/messages", json={
        "to": ["human"], "subject": "For the human", "body_md": "x"})
    assert sent.status_code == 201, sent.text
    assert sent.json()["delivery"]["observations"][0]["agent_id"] == "human"


def test_a_name_is_stored_nfkc_and_reached_by_any_of_its_forms(project: Project):
    alice = project.agent("\uff21lice")  # fullwidth A
    assert alice.row["name"] == "Alice"
    assert _names(project) == ["Alice"]
    bob = project.agent("Bob")
    for to in ("\uff21lice", f"\uff21lice [{alice.row['ref']}]", "Alice"):
        sent = bob.api.http.post("/v1/messages", json={
            "to": [to], "subject": f"To {to}", "body_md": "x"})
        assert sent.status_code == 201, sent.text
        assert sent.json()["delivery"]["observations"][0]["agent_id"] == alice.id
    again = project.admin.http.post(f"/v1/projects/{project.project_id}/agents", json={
        "name": "Alice", "transport": {"kind": "inbox"}})
    assert again.status_code == 201 and again.json()["name"] == "Alice"
    assert sorted(_names(project)) == ["Alice", "Alice", "Bob"]
