"""One agent sends, another reads: the whole path on real processes."""

from __future__ import annotations

from tests.integration.conftest import Project
from tests.stack import wait_until

STAGES = ["admitted", "target_selected", "dispatch_started", "provider_result_recorded",
          "delivery_observed"]
BODY = "# Handoff\n\nRun `make test` in /srv/app   \n\n- naïve café ☃ 🚀\ntrailing spaces   \n"


def test_body_comes_back_byte_for_byte_and_all_five_stages_are_recorded(project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send(["Bob"], "Handoff", BODY)
    assert sent["persisted"] is True and sent["from"] == alice.label
    [obs] = sent["delivery"]["observations"]
    assert obs["recipient"] == bob.label and obs["stage"] == "target_selected"

    inbox = wait_until(lambda: bob.api.inbox()["messages"], what="the message in Bob's inbox")
    assert [m["id"] for m in inbox] == [sent["id"]]
    assert inbox[0]["body_md"] == BODY
    assert inbox[0]["delivery_id"] == obs["delivery_id"]

    d = alice.api.delivery(obs["delivery_id"])
    assert d["stage"] == "delivery_observed" and d["outcome"] == "accepted"
    assert list(d["stages"]) == STAGES
    times = [d["stages"][s] for s in STAGES]
    assert times == sorted(times)
    assert [a["n"] for a in d["attempts"]] == [1]
