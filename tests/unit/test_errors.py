"""Errors: every code of the HTTP API has its status, and every error one body shape."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from messaging.errors import (
    RECIPIENT_REASON_ORDER,
    STATUS_BY_CODE,
    CourierError,
    invalid,
    not_found,
    store_unavailable,
)

# The error codes docs/http-api.md names, with their statuses.
API_MD_CODES = {
    "UNAUTHENTICATED": 401,
    "FORBIDDEN": 403,
    "SENDER_MISMATCH": 403,
    "PROJECT_EXISTS": 409,
    "IDEMPOTENCY_KEY_CONFLICT": 409,
    "IDEMPOTENCY_KEY_IN_USE": 409,
    "BODY_TOO_LARGE": 413,
    "INVALID_ARGUMENT": 422,
    "RECIPIENT_NOT_FOUND": 422,
    "RECIPIENT_RETIRED": 422,
    "RECIPIENT_CLOSED": 422,
    "BOUND_SOURCE_LOST": 422,
    "QUIET_NOT_ALLOWED": 422,
    "RESOURCE_NOTICE_INVALID": 422,
    "RATE_LIMITED": 429,
    "STORE_UNAVAILABLE": 503,
}

details = st.dictionaries(st.text(max_size=8), st.one_of(st.text(max_size=8), st.integers()),
                          max_size=3)


@pytest.mark.parametrize(("code", "status"), sorted(API_MD_CODES.items()))
def test_every_code_of_api_md_has_its_status(code: str, status: int):
    assert STATUS_BY_CODE[code] == status
    assert CourierError(code, "m").status == status


@pytest.mark.parametrize("code", sorted(STATUS_BY_CODE))
def test_every_code_is_a_client_or_server_error(code: str):
    assert 400 <= CourierError(code, "m").status <= 599


def test_an_unknown_code_is_refused():
    with pytest.raises(ValueError):
        CourierError("NO_SUCH_CODE", "m")


def test_recipient_reasons_are_422_codes_in_api_md_order():
    assert RECIPIENT_REASON_ORDER == (
        "RECIPIENT_NOT_FOUND", "RECIPIENT_RETIRED", "RECIPIENT_CLOSED", "BOUND_SOURCE_LOST")
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
