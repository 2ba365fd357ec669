"""Exactly once, or the run is void: every admitted delivery accepted once, in its inbox once."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import redis

from bench.loadgen import LoadResult
from messaging.store import keys

DONE_STAGES = ("provider_result_recorded", "delivery_observed")
# The fields of a send's answer that ``admitted`` reads (the load generator keeps only these).
SEND_FIELDS = ["id", "delivery"]
POLL_S = 0.1
PIPE_CHUNK = 2000


class RunVoid(RuntimeError):
    """A sent message was not delivered exactly once: the run's figures prove nothing."""


@dataclass(frozen=True)
class Admitted:
    """One admitted message as its send's answer described it."""

    message_id: str
    sent_us: int  # when the request left (or was due to, under an open loop)
    deliveries: tuple[tuple[str, str], ...]  # (delivery id, recipient agent id)


def admitted(result: LoadResult, what: str) -> list[Admitted]:
    """The messages a load of sends admitted.

    Raises:
        RunVoid: a request got no answer, or an answer other than 201.
    """
    if result.errors:
        raise RunVoid(f"{what}: {len(result.errors)} sends got no answer, so their fate is "
                      f"unknown; first: {result.errors[0]}")
    refused = {s: n for s, n in result.statuses.items() if s != "201"}
    if refused:
        sample: Any = next((k for _, s, k in result.answers if s != 201), {})
        raise RunVoid(f"{what}: sends not admitted, by status: {refused}; e.g. {sample}")
    return [admitted_answer(kept, int(sent_us)) for sent_us, _, kept in result.answers]


def admitted_answer(answer: dict[str, Any], sent_us: int | None = None) -> Admitted:
    """One send's 201 answer as an ``Admitted`` (sent now unless ``sent_us`` says when)."""
    return Admitted(answer["id"], time.time_ns() // 1000 if sent_us is None else sent_us,
                    tuple((o["delivery_id"], o["agent_id"])
                          for o in answer["delivery"]["observations"]))


def _hmget(r: redis.Redis, project_id: str, dids: list[str],
           fields: list[str]) -> list[list[str | None]]:
    out: list[list[str | None]] = []
    for start in range(0, len(dids), PIPE_CHUNK):
        pipe = r.pipeline(transaction=False)
        for did in dids[start:start + PIPE_CHUNK]:
            pipe.hmget(keys.delivery(project_id, did), fields)
        out += pipe.execute()
    return out


def wait_delivered(r: redis.Redis, project_id: str, sent: list[Admitted], timeout_s: float,
                   what: str) -> None:
    """Wait until every delivery of ``sent`` has an outcome.

    Raises:
        RunVoid: some have none after ``timeout_s``.
    """
    pending = [did for m in sent for did, _ in m.deliveries]
    deadline = time.monotonic() + timeout_s
    while pending:
        stages = _hmget(r, project_id, pending, ["stage"])
        pending = [d for d, (stage,) in zip(pending, stages, strict=True)
                   if stage not in DONE_STAGES]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise RunVoid(f"{what}: {len(pending)} of {sum(len(m.deliveries) for m in sent)} "
                          f"deliveries had no outcome after {timeout_s:g} s; e.g. {pending[0]}")
        time.sleep(POLL_S)


def check_exactly_once(r: redis.Redis, project_id: str, sent: list[Admitted], what: str,
                       inbox_sizes: dict[str, int] | None = None) -> dict[str, dict[str, str]]:
    """Check each delivery of ``sent`` was dispatched once, accepted, and is in its inbox once.

    ``inbox_sizes`` (agent id -> entries) also checks that no inbox holds anything more.
    Returns each delivery's stage times (``*_us`` fields) by delivery id.

    Raises:
        RunVoid: any delivery broke exactly-once.
    """
    pairs = [(m, did, aid) for m in sent for did, aid in m.deliveries]
    dids = [did for _, did, _ in pairs]
    dupes = [d for d, n in Counter(dids).items() if n > 1]
    if dupes:
        raise RunVoid(f"{what}: delivery ids admitted twice: {dupes[:3]}")
    fields = ["stage", "outcome", "attempts", "message_id", "agent_id", "admitted_us",
              "dispatch_started_us", "provider_result_recorded_us"]
    rows = _hmget(r, project_id, dids, fields)
    problems: list[str] = []
    times: dict[str, dict[str, str]] = {}
    for (m, did, aid), row in zip(pairs, rows, strict=True):
        d = dict(zip(fields, row, strict=True))
        attempts = json.loads(d["attempts"] or "[]")
        if d["stage"] not in DONE_STAGES or d["outcome"] != "accepted":
            problems.append(f"{did}: stage {d['stage']}, outcome {d['outcome']}")
        elif len(attempts) != 1:
            problems.append(f"{did}: dispatched {len(attempts)} times")
        elif d["message_id"] != m.message_id or d["agent_id"] != aid:
            problems.append(f"{did}: belongs to {d['message_id']}/{d['agent_id']}")
        times[did] = {k: v or "" for k, v in d.items() if k.endswith("_us")}
    problems += _check_inboxes(r, project_id, pairs, inbox_sizes)
    if problems:
        raise RunVoid(f"{what}: {len(problems)} breaches of exactly-once; "
                      f"e.g. {'; '.join(problems[:3])}")
    return times


def _check_inboxes(r: redis.Redis, project_id: str, pairs: list[tuple[Admitted, str, str]],
                   inbox_sizes: dict[str, int] | None) -> list[str]:
    """Each delivery is in its recipient's inbox, and its message names exactly ours."""
    problems = []
    for start in range(0, len(pairs), PIPE_CHUNK):
        chunk = pairs[start:start + PIPE_CHUNK]
        pipe = r.pipeline(transaction=False)
        for m, did, aid in chunk:
            pipe.zscore(keys.inbox(project_id, aid), did)
            pipe.hget(keys.message(project_id, m.message_id), "deliveries")
        answers = pipe.execute()
        for i, (m, did, _) in enumerate(chunk):
            score, stored = answers[2 * i], answers[2 * i + 1]
            if score is None:
                problems.append(f"{did}: not in its recipient's inbox")
            elif sorted(map(tuple, json.loads(stored or "[]"))) != sorted(m.deliveries):
                problems.append(f"{m.message_id}: stored deliveries differ from the answer's")
    for aid, size in (inbox_sizes or {}).items():
        held = r.zcard(keys.inbox(project_id, aid))
        if held != size:
            problems.append(f"inbox of {aid} holds {held} entries, not {size}")
    return problems


def inbox_total(r: redis.Redis, project_id: str, agent_ids: list[str]) -> int:
    """Entries in these agents' inboxes, together."""
    pipe = r.pipeline(transaction=False)
    for aid in agent_ids:
        pipe.zcard(keys.inbox(project_id, aid))
    return sum(pipe.execute())
