"""Deployment policy per transport kind: today's defaults, the operator's overrides, and a
plug-in kind that never inherits a webhook setting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from messaging.config import Settings
from messaging.launch import workerpool
from messaging.transports import policy
from messaging.transports.policy import DEFAULT, Policy


def _settings(tmp_path: Path, **values: object) -> Settings:
    return Settings(data_dir=tmp_path, redis_url="redis://db:6379/0", **values)  # type: ignore[arg-type]


def test_inbox_and_webhook_keep_their_settings_as_defaults(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    assert policy.policy("inbox", s) == Policy(2, 1, 30.0, (1, 5, 30, 300, 1800))
    assert policy.policy("webhook", s) == Policy(2, 1, 10.0 + 15.0, (1, 5, 30, 300, 1800), 8, 4)
    assert (policy.policy("inbox", s).in_flight_per_project,
            policy.policy("inbox", s).in_flight_per_endpoint) == (0, 0)
    tuned = _settings(tmp_path, inbox_lease_s=7, webhook_timeout_s=3, webhook_lease_margin_s=2,
                      webhook_retry_schedule_s="0.5,2", webhook_in_flight_per_project=3,
                      webhook_in_flight_per_endpoint=0)
    assert policy.policy("inbox", tuned).lease_s == 7
    assert policy.policy("webhook", tuned) == Policy(2, 1, 5.0, (0.5, 2.0), 3, 0)


def test_a_plug_in_kind_gets_the_documented_defaults_never_a_webhook_value(
        tmp_path: Path) -> None:
    s = _settings(tmp_path, webhook_timeout_s=99, webhook_lease_margin_s=99,
                  webhook_retry_schedule_s="600,600")
    assert policy.policy("pager", s) == DEFAULT == Policy(2, 1, 30.0, (1, 5, 30, 300, 1800))


def test_the_operator_sets_a_kinds_policy_field_by_field(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COURIER_TRANSPORT_POLICY", json.dumps({
        "pager": {"concurrency": 4, "lease_s": 20, "retry_schedule_s": [1, 5],
                  "in_flight_per_endpoint": 2},
        "webhook": {"prefetch": 3},
    }))
    s = _settings(tmp_path)
    assert policy.policy("pager", s) == Policy(4, 1, 20.0, (1.0, 5.0), 0, 2)
    assert policy.policy("webhook", s) == Policy(2, 3, 25.0, (1, 5, 30, 300, 1800), 8, 4)
    argv = workerpool.worker_argv("webhook", settings=s)
    assert argv[argv.index("--prefetch-multiplier") + 1] == "3"


def test_worker_concurrency_still_wins_for_every_kind(tmp_path: Path) -> None:
    s = _settings(tmp_path, worker_concurrency=5,
                  transport_policy={"pager": {"concurrency": 4}})
    assert {policy.policy(k, s).concurrency for k in ("inbox", "webhook", "pager")} == {5}


@pytest.mark.parametrize("bad", [
    {"pager": {"concurrency": 0}},
    {"pager": {"lease_s": 0}},
    {"pager": {"retry_schedule_s": [1, -1]}},
    {"pager": {"lease": 20}},
    {"pager": 4},
])
def test_a_policy_that_cannot_work_is_refused_at_start(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ValidationError, match="transport_policy"):
        _settings(tmp_path, transport_policy=bad)


def test_queues_are_named_by_kind_and_lane() -> None:
    assert policy.queue("pager") == "deliver.pager"
    assert policy.queue("pager", "bulk") == "deliver.pager.bulk"
