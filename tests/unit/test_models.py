"""The request models of the HTTP API: what they accept and what they refuse.

Bodies are validated as the API validates them: JSON decoded first, then the
model in Python mode (FastAPI's way).
"""

from __future__ import annotations

import json
import re
from typing import Any

import disarm
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from messaging import ids, lookalikes, models
from messaging.models import (
    BIDI_CONTROLS,
    CONTROLS_RE,
    LINE_BREAKS,
    NAME_MAX,
    RECIPIENT_MAX,
    RECIPIENTS_MAX,
    RESERVED_NAMES,
    SUBJECT_MAX,
    SUMMARY_MAX,
    AgentIn,
    SendIn,
    normal_name,
)
from messaging.web.mcp_tools import TOOLS

BREAKS = "".join(sorted(LINE_BREAKS))
IMPORTANCES = ("low", "normal", "high", "urgent")

# Text a client can send: UTF-8 has no lone surrogates.
name_char = st.characters(codec="utf-8", exclude_characters="[]" + BREAKS + "".join(BIDI_CONTROLS),
                          exclude_categories=("Cc", "Cs", "Cf"))
# Valid names as stored: NFKC already, reading as no reserved name.
valid_names = st.text(name_char, min_size=1, max_size=NAME_MAX).filter(
    lambda s: s == s.strip() and s == normal_name(s) and not s.startswith("agt_")
    and lookalikes.reads_as(s, RESERVED_NAMES) is None and s.lower() not in RESERVED_NAMES)
half_names = st.text(name_char, min_size=1, max_size=NAME_MAX // 2 - 1).filter(
    lambda s: s == s.strip())
refs = st.text("0123456789abcdef", min_size=6, max_size=6)
outer_space = st.sampled_from([" ", "\t", "\u00a0", "\u3000"])
json_non_bool = st.one_of(st.integers(), st.floats(allow_nan=False), st.text(),
                          st.lists(st.booleans(), max_size=2))


def parse(model: type[BaseModel], body: dict[str, Any]) -> Any:
    """Validate ``body`` as the API does: through JSON, then the model."""
    return model.model_validate(json.loads(json.dumps(body)))


def accepts(model: type[BaseModel], body: dict[str, Any]) -> bool:
    try:
        parse(model, body)
    except ValidationError:
        return False
    return True


def agent(name: str) -> dict[str, Any]:
    return {"name": name, "transport": {"kind": "inbox"}}


def send(**fields: Any) -> dict[str, Any]:
    return {"to": ["Bob"], "subject": "Handoff", "body_md": "# Next\n", **fields}


# names


@given(valid_names)
@example("API review")
@example("x" * NAME_MAX)
def test_a_one_line_name_without_brackets_or_outer_space_is_accepted(name: str):
    assert parse(AgentIn, agent(name)).name == name


@given(half_names, st.sampled_from(BREAKS), half_names)
def test_a_name_with_a_line_break_is_refused(head: str, brk: str, tail: str):
    assert not accepts(AgentIn, agent(head + brk + tail))


@given(half_names, st.one_of(st.characters(categories=("Cc",)), st.sampled_from(
    sorted(BIDI_CONTROLS))), half_names)
def test_a_name_with_a_control_or_bidi_character_is_refused(head: str, ch: str, tail: str):
    assert not accepts(AgentIn, agent(head + ch + tail))


@given(st.sampled_from(sorted(RESERVED_NAMES)), st.randoms())
def test_a_reserved_name_is_refused_in_any_case(name: str, rnd: Any):
    mixed = "".join(c.upper() if rnd.random() < 0.5 else c for c in name)
    assert not accepts(AgentIn, agent(mixed))


@given(half_names, st.characters(categories=("Cf",)), half_names)
@example("human", "\u200b", "")
@example("Al", "\u2060", "ice")
@example("", "\ufeff", "Bob")
def test_a_name_with_a_format_character_is_refused(head: str, ch: str, tail: str):
    assert not accepts(AgentIn, agent(head + ch + tail))


@pytest.mark.parametrize("name", [
    "hum\u0430n",  # Cyrillic a
    "\u0397UMAN",  # Greek capital eta
    "\u041c\u0430in",  # Cyrillic capital em and a
    "rnain",  # rn reads as m
    "c\u043eurier",  # Cyrillic o
    "\uff48\uff55\uff4d\uff41\uff4e",  # fullwidth, NFKC makes it human
    "\U0001d525\U0001d532\U0001d52a\U0001d51e\U0001d52b",  # mathematical fraktur
])
def test_a_name_that_reads_as_a_reserved_name_is_refused(name: str):
    with pytest.raises(ValidationError) as err:
        parse(AgentIn, agent(name))
    assert err.value.errors()[0]["loc"] == ("name",)


def test_the_lookalike_data_is_of_a_current_unicode_version():
    assert tuple(int(n) for n in disarm.CONFUSABLES_VERSION.split(".")) >= (17, 0, 0)


@pytest.mark.parametrize(("given", "stored"), [
    ("\uff21lice", "Alice"), ("\ufb01le", "file"), ("Zoe\u0308", "Zo\u00eb"),
    ("Emile", "Emile"), ("mainframe", "mainframe"), ("Human Resources", "Human Resources")])
def test_a_name_is_stored_nfkc_normalized(given: str, stored: str):
    assert parse(AgentIn, agent(given)).name == stored


@pytest.mark.parametrize(("given", "stored"), [
    ("\uff21lice", "Alice"), ("\uff21lice [0a1b2c]", "Alice [0a1b2c]")])
def test_a_recipient_name_is_nfkc_normalized(given: str, stored: str):
    assert parse(SendIn, send(to=[given], cc=[given], bcc=[given])).to == [stored]


@given(valid_names)
def test_a_name_starting_agt_is_refused(name: str):
    assert not accepts(AgentIn, agent(("agt_" + name)[:NAME_MAX]))


@given(half_names, st.sampled_from("[]"), half_names)
def test_a_name_with_a_bracket_is_refused(head: str, bracket: str, tail: str):
    assert not accepts(AgentIn, agent(head + bracket + tail))


@given(half_names, outer_space, st.booleans())
def test_a_name_with_outer_white_space_is_refused(name: str, space: str, leading: bool):
    assert not accepts(AgentIn, agent(space + name if leading else name + space))


@given(st.text(name_char, min_size=NAME_MAX + 1, max_size=NAME_MAX + 40))
@example("")
def test_a_name_that_is_empty_or_longer_than_64_is_refused(name: str):
    assert not accepts(AgentIn, agent(name))


# recipients


@given(st.one_of(valid_names, st.builds(lambda n, r: f"{n} [{r}]", valid_names, refs),
                 st.just("prj_0123456789ab").map(ids.new_agent_id)))
def test_a_name_a_label_or_an_agent_id_is_a_recipient(recipient: str):
    assert parse(SendIn, send(to=[recipient], cc=[recipient], bcc=[recipient])).to == [recipient]


@given(st.one_of(
    st.builds(lambda h, b, t: h + b + t, half_names, st.sampled_from(BREAKS), half_names),
    st.builds(lambda n, r: f"{n} [{r.upper()}]", valid_names,
              refs.filter(lambda r: r != r.upper())),
    st.builds(lambda n, r: f"{n} [{r[:5]}]", valid_names, refs),
    st.builds(lambda n, r: f"{n}  [{r}] ", valid_names, refs),
    st.builds(lambda n, s: s + n, valid_names, outer_space),
))
def test_a_recipient_that_is_no_name_label_or_agent_id_is_refused(recipient: str):
    for field in ("to", "cc", "bcc"):
        body = send(**{field: [recipient]}) if field != "to" else send(to=[recipient])
        assert not accepts(SendIn, body)


@given(st.text("abcdefgh", min_size=NAME_MAX + 1, max_size=RECIPIENT_MAX + 8), refs)
def test_a_recipient_longer_than_any_name_is_no_shape_error(name: str, ref: str):
    # It reaches no agent: the send's recipient error says so (RECIPIENT_NOT_FOUND).
    assert accepts(SendIn, send(to=[name]))
    assert accepts(SendIn, send(to=[f"{name} [{ref}]"]))


@given(st.integers(0, RECIPIENTS_MAX), st.integers(0, RECIPIENTS_MAX), st.integers(0, 3))
def test_recipients_are_one_to_a_hundred_in_all(n_to: int, n_cc: int, n_bcc: int):
    body = send(to=["Bob"] * n_to, cc=["Carol"] * n_cc, bcc=["Dan"] * n_bcc)
    assert accepts(SendIn, body) == (n_to >= 1 and n_to + n_cc + n_bcc <= RECIPIENTS_MAX)


# topic and thread id


@given(st.one_of(st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True),
                 st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True).map(lambda s: s + "\n"),
                 st.text(max_size=70)))
@example("a" * 65)
def test_a_topic_is_accepted_exactly_when_it_is_1_to_64_of_the_topic_characters(topic: str):
    expected = re.fullmatch(r"[A-Za-z0-9_-]{1,64}", topic) is not None
    assert accepts(SendIn, send(topic=topic)) == expected


@given(st.one_of(st.from_regex(r"[A-Za-z0-9._-]{1,128}", fullmatch=True),
                 st.from_regex(r"[A-Za-z0-9._-]{1,128}", fullmatch=True).map(lambda s: s + "\n"),
                 st.text(max_size=130)))
@example("t" * 129)
def test_a_thread_id_is_accepted_exactly_when_it_is_1_to_128_of_its_characters(thread: str):
    expected = re.fullmatch(r"[A-Za-z0-9._-]{1,128}", thread) is not None
    assert accepts(SendIn, send(thread_id=thread)) == expected


# subject and summary


@given(st.text(max_size=SUBJECT_MAX + 10))
@example("x" * SUBJECT_MAX)
@example("Handoff\nsecond line")
@example("Handoff\r")
@example("Handoff\x1b[2J")
def test_a_subject_is_accepted_exactly_when_it_is_one_line_of_1_to_200(subject: str):
    expected = (1 <= len(subject) <= SUBJECT_MAX and not set(subject) & LINE_BREAKS
                and not CONTROLS_RE.search(subject))
    assert accepts(SendIn, send(subject=subject)) == expected


@given(st.text(st.characters(exclude_categories=("Cc", "Cs")), max_size=3 * SUMMARY_MAX))
def test_a_summary_is_truncated_to_200_never_refused_for_its_length(summary: str):
    assert parse(SendIn, send(summary=summary)).summary == summary[:SUMMARY_MAX]


# Every single-line text of a send, and how to put a text there.
SINGLE_LINE_SEND_FIELDS = {
    "subject": lambda t: {"subject": t},
    "summary": lambda t: {"summary": t},
    "sender_name": lambda t: {"sender_name": t},
    "idempotency_key": lambda t: {"idempotency_key": t},
    "project_key": lambda t: {"project_key": "/srv/" + t},
    "to": lambda t: {"to": [t]},
    "cc": lambda t: {"cc": [t]},
    "bcc": lambda t: {"bcc": [t]},
    "agent id in to": lambda t: {"to": ["agt_" + t]},
    "label in to": lambda t: {"to": [f"{t} [abcdef]"]},
}
controls = st.characters(categories=("Cc",))
around = st.text("abc xyz", max_size=8)


@given(st.sampled_from(sorted(SINGLE_LINE_SEND_FIELDS)), around, controls, around)
@example("subject", "FYI", "\x15", "touch /tmp/pwned #")
def test_a_control_character_in_any_single_line_text_of_a_send_is_refused(
        field: str, before: str, control: str, after: str):
    text = "x" + before + control + after + "x"  # no outer space to refuse a name for
    assert not accepts(SendIn, send(**SINGLE_LINE_SEND_FIELDS[field](text)))
    assert accepts(SendIn, send(**SINGLE_LINE_SEND_FIELDS[field]("x" + before + after + "x")))


@given(st.sampled_from(["name", "program", "model", "parent"]), controls)
def test_a_control_character_in_an_agents_single_line_text_is_refused(field: str,
                                                                     control: str):
    assert not accepts(AgentIn, {**agent("Carol"), field: f"a{control}b"})


@given(st.text(controls, min_size=1, max_size=5), st.text(max_size=20))
def test_a_body_keeps_every_control_character(controls_: str, text: str):
    body = text + controls_ + "\t\r\n"
    assert parse(SendIn, send(body_md=body)).body_md == body


# extra fields and strict types


@given(st.text(min_size=1, max_size=20).filter(lambda k: k not in SendIn.model_fields),
       st.one_of(st.none(), st.booleans(), st.text(max_size=5)))
def test_an_unknown_field_is_refused(field: str, value: Any):
    with pytest.raises(ValidationError) as refused:
        parse(SendIn, send(**{field: value}))
    assert [e["type"] for e in refused.value.errors()] == ["extra_forbidden"]


@given(json_non_bool)
def test_ack_required_takes_only_a_json_boolean(value: Any):
    assert not accepts(SendIn, send(ack_required=value))


@given(st.one_of(st.integers(), st.booleans(), st.lists(st.text(max_size=3), max_size=2)))
def test_a_subject_takes_only_a_string(value: Any):
    assert not accepts(SendIn, send(subject=value))


@given(valid_names)
def test_to_takes_only_a_list(name: str):
    assert not accepts(SendIn, send(to=name))


@given(st.one_of(st.sampled_from(IMPORTANCES), st.text(max_size=8), st.integers()))
def test_importance_is_one_of_its_four_values(value: Any):
    assert accepts(SendIn, send(importance=value)) == (value in IMPORTANCES)


@pytest.mark.parametrize("breaker", sorted(LINE_BREAKS))
def test_every_line_break_character_makes_a_name_or_subject_more_than_one_line(breaker: str):
    assert not accepts(AgentIn, {"name": f"Blue{breaker}Lake", "transport": {"kind": "inbox"}})
    assert not accepts(SendIn, send(subject=f"first{breaker}second"))


def _integer_fields() -> list[Any]:
    """(model, field) of every integer field of a request model or tool's arguments."""
    found = {m for m in vars(models).values()
             if isinstance(m, type) and issubclass(m, BaseModel)} | {t.arguments for t in TOOLS}
    return [pytest.param(m, f, id=f"{m.__name__}.{f}") for m in sorted(found, key=str)
            for f, info in m.model_fields.items() if info.annotation is int]


@pytest.mark.parametrize(("model", "field"), _integer_fields())
def test_an_integer_field_takes_an_integral_float_and_refuses_a_fraction(
        model: type[BaseModel], field: str):
    # JSON Schema's integer, which the schemas say: 3.0 is one, 3.5 is not; on every face.
    schema = model.model_json_schema()["properties"][field]
    assert schema["type"] == "integer" and "minimum" in schema and "maximum" in schema
    base = {"target": "Bob"} if "target" in model.model_fields else {}
    whole = model.model_validate_json(json.dumps({**base, field: 3.0}), strict=True)
    assert getattr(whole, field) == 3 and type(getattr(whole, field)) is int
    for refused in (3.5, "3", True):
        with pytest.raises(ValidationError):
            model.model_validate_json(json.dumps({**base, field: refused}), strict=True)


def _schema_of(prop: dict[str, Any]) -> dict[str, Any]:
    """A property's string schema (the non-null side of an optional one)."""
    return next((s for s in prop.get("anyOf", [prop]) if s.get("type") == "string"), prop)


def test_the_schema_states_the_single_line_rule_as_a_pattern():
    props = SendIn.model_json_schema()["properties"]
    for field in ("subject", "summary", "sender_name", "idempotency_key", "project_key"):
        assert _schema_of(props[field])["pattern"] == models.ONE_LINE_PATTERN, field
    for field in ("to", "cc", "bcc"):
        assert props[field]["items"]["pattern"] == models.ONE_LINE_PATTERN, field


@given(st.text(max_size=12))
@example("\n")
@example("a\u2028b")
def test_the_pattern_refuses_exactly_what_the_validator_refuses(text: str):
    # JSON Schema's $ is the end of the text, as fullmatch reads the pattern here.
    by_pattern = re.fullmatch(models.ONE_LINE_PATTERN.strip("^$"), text) is not None
    assert by_pattern == accepts(SendIn, send(summary=text))
