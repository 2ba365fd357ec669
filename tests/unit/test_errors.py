"""Errors: every code of the HTTP API has its status, and every error one body shape."""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, ValidationError

from messaging.errors import (
    RECIPIENT_REASON_ORDER,
    STATUS_BY_CODE,
    Conflict,
    CourierError,
    Invalid,
    NotFound,
    RateLimited,
    Unavailable,
    from_validation,
    invalid,
    not_found,
    store_unavailable,
)

ROOT = Path(__file__).resolve().parents[2]


def _documented_codes() -> dict[str, int]:
    """The status table of docs/http-api.md: every code it names, with its status."""
    codes: dict[str, int] = {}
    for line in (ROOT / "docs" / "http-api.md").read_text().splitlines():
        row = re.match(r"^\| (\d{3}) \| (.*) \|$", line)
        if row:
            for code in re.findall(r"`([A-Z_]+)`", row.group(2)):
                codes[code] = int(row.group(1))
    return codes


DOCUMENTED = _documented_codes()

details = st.dictionaries(st.text(max_size=8), st.one_of(st.text(max_size=8), st.integers()),
                          max_size=3)


def test_the_documented_table_and_the_code_name_the_same_codes():
    assert len(DOCUMENTED) > 10
    assert DOCUMENTED == STATUS_BY_CODE


@pytest.mark.parametrize("code", sorted(STATUS_BY_CODE))
def test_each_code_makes_its_family_and_status(code: str):
    error = CourierError(code, "m")
    assert error.status == STATUS_BY_CODE[code]
    assert type(error) is not CourierError and isinstance(error, CourierError)
    assert {type(CourierError(c, "m")) for c, s in STATUS_BY_CODE.items()
            if s == error.status} == {type(error)}


def test_a_family_catches_every_code_of_its_status():
    with pytest.raises(Conflict):
        raise CourierError("DELIVERY_NOT_HELD", "m")
    with pytest.raises(Invalid):
        raise invalid("to", "bad")
    assert isinstance(not_found("message"), NotFound)
    assert isinstance(store_unavailable(), Unavailable)


def test_a_family_refuses_a_code_of_another():
    with pytest.raises(ValueError):
        NotFound("INVALID_ARGUMENT", "m")


def test_an_error_survives_pickling_as_itself():
    error = CourierError("RATE_LIMITED", "slow down", {"retry_after_s": 1},
                         headers={"Retry-After": "1"})
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is RateLimited and again.body() == error.body()
    assert again.headers == {"Retry-After": "1"}


class _Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str
    retries: int


def test_validation_errors_come_in_as_one_invalid_argument_naming_the_first_field():
    with pytest.raises(ValidationError) as caught:
        _Limits.model_validate({"url": "x", "retries": "many"})
    error = from_validation(caught.value, "transport.")
    assert (error.code, error.status) == ("INVALID_ARGUMENT", 422)
    assert error.details["field"] == "transport.retries"
    assert error.message.startswith("transport.retries: ")
    assert [row["field"] for row in error.details["errors"]] == ["transport.retries"]


@pytest.mark.parametrize("code", sorted(STATUS_BY_CODE))
def test_every_code_is_a_client_or_server_error(code: str):
    assert 400 <= CourierError(code, "m").status <= 599


def test_an_unknown_code_is_refused():
    with pytest.raises(ValueError):
        CourierError("NO_SUCH_CODE", "m")


def test_recipient_reasons_are_422_codes_in_api_md_order():
    # The contract's order, then a tie the resolution rules cannot break.
    assert RECIPIENT_REASON_ORDER == (
        "RECIPIENT_NOT_FOUND", "RECIPIENT_RETIRED", "RECIPIENT_CLOSED", "BOUND_SOURCE_LOST",
        "RECIPIENT_AMBIGUOUS")
    assert {STATUS_BY_CODE[c] for c in RECIPIENT_REASON_ORDER} == {422}


@given(st.sampled_from(sorted(STATUS_BY_CODE)), st.text(max_size=30), details, st.booleans())
def test_the_body_has_api_md_shape(code: str, message: str, extra: dict[str, Any],
                                   persisted: bool):
    body = CourierError(code, message, extra, persisted=persisted).body()
    assert body == {"persisted": persisted,
                    "error": {"code": code, "message": message, "details": extra}}


def test_an_error_says_nothing_was_persisted_unless_told():
    body = CourierError("INVALID_ARGUMENT", "m").body()
    assert body["persisted"] is False and body["error"]["details"] == {}


def test_the_helpers_make_their_codes():
    assert (not_found("message").code, not_found("message").status) == ("NOT_FOUND", 404)
    assert invalid("to.2", "bad").body()["error"]["details"] == {"field": "to.2"}
    assert (store_unavailable().code, store_unavailable().status) == ("STORE_UNAVAILABLE", 503)
