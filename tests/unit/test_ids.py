"""Server ids: prefixes, and the project inside every scoped id."""

from __future__ import annotations

import re

from hypothesis import example, given
from hypothesis import strategies as st

from messaging import ids

SCOPED = re.compile(r"(agt|msg|dlv)_(?P<project>[0-9a-f]{12})[0-9a-f]{16}")
HEX = "0123456789abcdef"

project_ids = st.text(HEX, min_size=ids.PROJECT_HEX, max_size=ids.PROJECT_HEX).map(
    lambda h: "prj_" + h)
makers = st.sampled_from([ids.new_agent_id, ids.new_message_id, ids.new_delivery_id])


def test_a_new_project_id_is_prj_and_12_hex_digits():
    assert re.fullmatch(r"prj_[0-9a-f]{12}", ids.new_project_id())


@given(project_ids, makers)
def test_the_project_of_a_scoped_id_is_the_project_it_was_made_for(project_id: str, make):
    assert ids.project_of(make(project_id)) == project_id


@given(project_ids)
def test_scoped_ids_carry_their_kind_as_prefix(project_id: str):
    made = [ids.new_agent_id(project_id), ids.new_message_id(project_id),
            ids.new_delivery_id(project_id)]
    assert [m.split("_")[0] for m in made] == ["agt", "msg", "dlv"]


@given(st.one_of(
    st.text(max_size=40),
    st.builds(lambda p, h: f"{p}_{h}", st.sampled_from(["agt", "msg", "dlv", "prj", "att", ""]),
              st.text(HEX + "ABCDEFxg_", min_size=26, max_size=30)),
))
@example("")
@example("agt")
@example("prj_0123456789ab")
@example("dlv_0123456789ab0123456789abcdeF")
@example("msg_0123456789ab0123456789abcdef\n")
def test_a_malformed_id_has_no_project(value: str):
    match = SCOPED.fullmatch(value)
    assert ids.project_of(value) == ("prj_" + match["project"] if match else None)


def test_a_ref_is_6_hex_digits():
    assert re.fullmatch(r"[0-9a-f]{6}", ids.new_ref())


def test_a_token_is_never_stored_as_itself():
    token = ids.new_token("cat")
    assert token.startswith("cat_")
    assert ids.token_hash(token) != token and len(ids.token_hash(token)) == 64
