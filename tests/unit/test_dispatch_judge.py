"""What a worker records of an idempotent transport's step that met the store away
after hand-off: a retry a second later that spends none of the schedule, however
far into it the delivery is; any other trouble waits its turn of the schedule
(tests/integration/cluster/test_cluster_failover.py runs it through failovers)."""

from __future__ import annotations

import pytest
import redis

from messaging import transports
from messaging.config import Level, Settings
from messaging.store.deliveries import Leased
from messaging.store.durability import NotDurable
from messaging.transports.base import Delivery, OutcomeKind, Transport, TransportSettings
from workers.dispatch import STORE_AWAY_RETRY_MS, judge, result_of

SCHEDULE = (1.0, 5.0, 30.0)


def transport(kind: str) -> Transport:
    return transports.installed()[kind](Settings())


def handed_off() -> Delivery:
    d = Delivery("dlv_1", 1, "prj_1", {}, TransportSettings())
    d.hand_off()
    return d


def lease(round_attempt: int) -> Leased:
    return Leased("dlv_1", 1, "agt_1", "msg_1", "agt_2", round_attempt, round_attempt, 0)


@pytest.mark.parametrize("away", [
    redis.ConnectionError("Connection closed by server."),
    redis.exceptions.ClusterError("the store node no longer serves the slot: nothing was run"),
    redis.TimeoutError("Timeout reading from socket"),
    NotDurable(Level.REPLICA, "0 of 1 replicas had it within the wait"),
])
@pytest.mark.parametrize("round_attempt", [1, 3, 4, 9])
def test_the_store_away_after_hand_off_retries_in_a_second_whatever_the_round(
        away: Exception, round_attempt: int) -> None:
    inbox = transport("inbox")
    assert inbox.idempotent
    outcome = judge(inbox, handed_off(), away)
    result = result_of(SCHEDULE, lease(round_attempt), outcome)
    assert (result.kind, result.retry_in_ms) == (OutcomeKind.RETRY, STORE_AWAY_RETRY_MS)
    assert result.error.startswith("the store was away: ")
    assert result.endpoint == ""  # nothing said of the recipient's side


@pytest.mark.parametrize(("round_attempt", "kind", "wait_ms"), [
    (1, OutcomeKind.RETRY, 1000), (3, OutcomeKind.RETRY, 30_000), (4, OutcomeKind.FAILED, 0)])
def test_other_trouble_after_hand_off_waits_its_turn_of_the_schedule(
        round_attempt: int, kind: OutcomeKind, wait_ms: int) -> None:
    inbox = transport("inbox")
    outcome = judge(inbox, handed_off(), RuntimeError("the transport's own bug"))
    result = result_of(SCHEDULE, lease(round_attempt), outcome)
    assert (result.kind, result.retry_in_ms) == (kind, wait_ms)
    assert result.error.startswith("crashed after hand-off: ")


def test_the_store_away_after_a_webhook_hand_off_is_still_unknown() -> None:
    webhook = transport("webhook")
    assert not webhook.idempotent
    outcome = judge(webhook, handed_off(), redis.ConnectionError("gone"))
    assert outcome.kind == OutcomeKind.UNKNOWN
