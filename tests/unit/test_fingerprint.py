"""Canonical fingerprints: the same request always, any other request never."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from messaging.models import SendIn
from messaging.service.sending import NOT_FINGERPRINTED, _canonical, fingerprint

# Explicit values equal to what an omitted field means.
DEFAULTS: dict[str, Any] = {
    "cc": [], "bcc": [], "importance": "normal", "ack_required": False,
    "delivery_policy": "checked", "body_md": "", "topic": None, "thread_id": None,
    "notification_policy": None, "resource_notice": None,
}

recipients = st.lists(st.sampled_from(["Bob", "Carol", "Dan [0a1b2c]"]), min_size=1, max_size=3)
words = st.text("abc xyz", min_size=1, max_size=12).filter(lambda s: s == s.strip())
# A value for each fingerprinted field of a plain send.
FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "to": recipients,
    "cc": st.lists(st.sampled_from(["Erin", "Fay"]), max_size=2),
    "bcc": st.lists(st.sampled_from(["Gus", "Hal"]), max_size=2),
    "subject": words,
    "body_md": st.text(max_size=20),
    "topic": st.sampled_from(["build", "review", "deploy-1"]),
    "thread_id": st.sampled_from(["t-1", "t.2", "thread_3"]),
    "importance": st.sampled_from(["low", "normal", "high", "urgent"]),
    "ack_required": st.booleans(),
    "delivery_policy": st.sampled_from(["checked", "durable"]),
    "notification_policy": st.sampled_from(["wake", "quiet"]),
}
# Fields that label or route the request, never part of it.
LABELS: dict[str, st.SearchStrategy[Any]] = {
    "idempotency_key": st.text("k0123", min_size=1, max_size=8),
    "summary": st.text(st.characters(exclude_categories=("Cc", "Cs")), max_size=20),
    "sender_name": st.sampled_from(["Alice", "Mallory"]),
    "project_key": st.sampled_from(["/srv/app", "/srv/other"]),
}


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    """A valid send body with a random subset of its optional fields."""
    body = {"to": draw(FIELDS["to"]), "subject": draw(FIELDS["subject"])}
    for name in draw(st.sets(st.sampled_from(sorted(set(FIELDS) - {"to", "subject"})))):
        body[name] = draw(FIELDS[name])
    return body


def fp(body: dict[str, Any]) -> str:
    """The fingerprint the API stores for this send body."""
    return fingerprint("send", _canonical(SendIn.model_validate(json.loads(json.dumps(body)))))


def shuffled(mapping: dict[str, Any], rnd: Any) -> dict[str, Any]:
    items = list(mapping.items())
    rnd.shuffle(items)
    return dict(items)


@given(requests(), st.randoms(use_true_random=False))
def test_field_order_does_not_change_the_fingerprint(body: dict[str, Any], rnd: Any):
    canonical = _canonical(SendIn.model_validate(body))
    assert fp(shuffled(body, rnd)) == fp(body)
    assert fingerprint("send", shuffled(canonical, rnd)) == fingerprint("send", canonical)


@given(requests(), st.sets(st.sampled_from(sorted(DEFAULTS))))
def test_explicit_defaults_do_not_change_the_fingerprint(body: dict[str, Any], spelled: set[str]):
    explicit = {**{k: DEFAULTS[k] for k in spelled if k not in body}, **body}
    assert fp(explicit) == fp(body)


@given(requests(), st.data())
def test_any_change_to_a_fingerprinted_field_changes_the_fingerprint(
    body: dict[str, Any], data: st.DataObject
):
    field = data.draw(st.sampled_from(sorted(FIELDS)))
    changed = {**body, field: data.draw(FIELDS[field])}
    canonical = _canonical(SendIn.model_validate(body))
    assume(_canonical(SendIn.model_validate(changed))[field] != canonical[field])
    assert fp(changed) != fp(body)


@given(requests(), st.data())
def test_labels_of_the_request_do_not_change_the_fingerprint(
    body: dict[str, Any], data: st.DataObject
):
    labels = {k: data.draw(s) for k, s in LABELS.items() if data.draw(st.booleans())}
    assert fp({**body, **labels}) == fp(body)


def test_the_labels_are_exactly_the_unfingerprinted_fields():
    assert set(LABELS) == NOT_FINGERPRINTED


@given(requests())
def test_a_send_and_a_reply_of_the_same_fields_differ(body: dict[str, Any]):
    canonical = _canonical(SendIn.model_validate(body))
    assert fingerprint("send", canonical) != fingerprint("reply", canonical)
