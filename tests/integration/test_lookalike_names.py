"""Names that read as others (docs/http-api.md: Projects and agents).

Names are NFKC-normalized, stored and compared that way; names with invisible
format characters, and names that read as a reserved name (once what shows
nothing is removed and confusables are folded), are refused, so mail to a
lookalike of ``human`` reaches no impostor.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

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
# Each renders as `human`, `main` or `courier`: code points that show nothing
# (default ignorable, or the braille blank), small capitals and other confusables.
READ_AS_RESERVED = [
    "human\ufe0f",  # variation selector 16
    "main\ufe00",  # variation selector 1
    "human\U000e0100",  # variation selector 17
    "hu\u034fman",  # combining grapheme joiner
    "human\u180b",  # Mongolian free variation selector 1
    "ma\u180fin",  # Mongolian free variation selector 4
    "human\u3164",  # Hangul filler
    "\u115fhuman",  # Hangul choseong filler
    "hu\u1160man",  # Hangul jungseong filler
    "hu\uffa0man",  # halfwidth Hangul filler
    "human\u2800",  # braille pattern blank
    "cour\u17b4ier",  # Khmer vowel inherent aq
    "\u029cuman",  # small capital h
    "\u1d0dain",  # small capital m
    "\u1d04\u1d0f\u1d1c\u0280\u026a\u1d07\u0280",  # courier in small capitals
    "\u029c\u1d1c\u1d0d\u1d00\u0274",  # human in small capitals
    "\u04bbu\u043c\u0430n",  # Cyrillic shha, em and a
    "c0urier",  # digit zero
    "ma\u0131n",  # dotless i
    "Hum\u00e1n",  # an accent
]
# Ordinary names, Latin or not, that read as no reserved name.
ORDINARY = [
    "さくら", "山田 太郎", "민준", "محمد",  # Japanese, Korean, Arabic
    "\u0410\u043b\u0435\u043a\u0441\u0435\u0439", "\u041d\u0438\u043d\u0430",  # Алексей, Нина
    "\u039c\u03b1\u03c1\u03af\u03b1",  # Μαρία
    "\u2764\ufe0f bot", "Human Resources", "mainframe", "Courier pigeon",
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


def _refused(got: Any) -> None:
    assert got.status_code == 422, got.text
    error = got.json()["error"]
    assert (error["code"], error["details"]["field"]) == ("INVALID_ARGUMENT", "name")
    assert "reads as the reserved name" in error["message"]
    assert got.json()["persisted"] is False


@pytest.mark.parametrize("name", READ_AS_RESERVED)
def test_a_name_that_renders_as_a_reserved_name_is_refused_registered_and_authorized(
        project: Project, name: str):
    path = f"/v1/projects/{project.project_id}"
    _refused(project.admin.http.post(f"{path}/agents", json={
        "name": name, "transport": {"kind": "inbox"}}))
    _refused(project.admin.http.put(f"{path}/names/{quote(name)}", json={}))
    assert _names(project) == []
    assert project.admin.http.get(f"{path}/names").json()["names"] == []


def test_ordinary_names_in_any_script_are_registered_and_authorized(project: Project):
    path = f"/v1/projects/{project.project_id}"
    for name in ORDINARY:
        got = project.admin.http.post(f"{path}/agents", json={
            "name": name, "transport": {"kind": "inbox"}})
        assert got.status_code == 201, got.text
        authorized = project.admin.http.put(f"{path}/names/{quote(name)}-x", json={})
        assert authorized.status_code == 200, authorized.text
    assert sorted(_names(project)) == sorted(ORDINARY)


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
