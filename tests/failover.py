"""What the failover tests share, whether Sentinel or a Redis Cluster promotes the
replica: a ledger of sends, senders that keep sending through the failovers as a
client that retries would, the accounting of what the store holds afterwards,
and Flower asked for a lane made after a failover.

The ledger is the clients' side: every idempotency key sent and the message id
each answered one got. The accounting is the store's side, read from the store
itself rather than through the API: each answered send stored, in its
recipient's inbox once, its delivery accepted, nothing left due.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import httpx

from messaging.client import CourierAPIError, CourierUnreachable
from messaging.store import connect, keys
from messaging.store.schema import DeliveryField
from tests.integration.conftest import new_project
from tests.stack import Stack, wait_until

RETRY_PAUSE_S = 0.1
ACCEPTED = "accepted"
# How long a read waits for a store that does not answer (Sentinels that have not
# all agreed on a primary yet, a cluster still settling).
READ_TIMEOUT_S = 30.0
# How long the accounting waits for every delivery to be accepted.
SETTLE_TIMEOUT_S = 120.0
FLOWER_TIMEOUT_S = 30.0

T = TypeVar("T")


class Served(Protocol):
    """A store the tests read: one watched by Sentinels, or a cluster."""

    @property
    def url(self) -> str: ...


@dataclass
class Ledger:
    """Every send's idempotency key with its project, the message id of each
    answered 201 (or 200, a replay of one), and how many answers were refusals."""

    sent: dict[str, str] = field(default_factory=dict)
    answered: dict[str, str] = field(default_factory=dict)
    refused: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, key: str, project_id: str, answer: httpx.Response | None) -> bool:
        """Record a send of ``key`` and its answer (None: none came); True when it
        was answered with a message id."""
        with self.lock:
            self.sent[key] = project_id
            if answer is not None and answer.status_code in (200, 201):
                self.answered[key] = answer.json()["id"]
                return True
            self.refused += 1
            return False

    def of(self, project_id: str) -> list[str]:
        """The message ids answered for sends of ``project_id``."""
        with self.lock:
            return [mid for key, mid in self.answered.items() if self.sent[key] == project_id]

    def repeated_ids(self) -> int:
        """How many answered keys share a message id with another key (replays of one
        key share their first answer's id; two keys never should)."""
        with self.lock:
            return len(self.answered) - len(set(self.answered.values()))


@dataclass(frozen=True)
class Sender:
    """An agent of a project that sends to Bob through the API."""

    api_url: str
    token: str
    project_id: str

    def client(self) -> httpx.Client:
        """An HTTP client of the API acting as the agent."""
        return httpx.Client(base_url=self.api_url, timeout=30,
                            headers={"Authorization": f"Bearer {self.token}"})

    def send(self, client: httpx.Client, key: str, body: str = "") -> httpx.Response | None:
        """One send to Bob with the idempotency key ``key``; None when the API did not
        answer at all."""
        try:
            return client.post("/v1/messages", json={
                "to": ["Bob"], "subject": "Handoff", "body_md": body or key,
                "idempotency_key": key})
        except httpx.TransportError:
            return None

    def keep_sending(self, ledger: Ledger, stop: threading.Event, pause_s: float = 0.0,
                     drain_s: float = 0.0) -> None:
        """Send with a new key, ``pause_s`` between two sends, until ``stop``; a key
        not answered is sent again (as a client would) until it is, after ``stop``
        too, for up to ``drain_s``."""
        with self.client() as client:
            while not stop.is_set():
                self._until_answered(client, uuid.uuid4().hex, ledger, stop, drain_s)
                time.sleep(pause_s)

    def _until_answered(self, client: httpx.Client, key: str, ledger: Ledger,
                        stop: threading.Event, drain_s: float) -> None:
        deadline = None
        while deadline is None or time.monotonic() < deadline:
            if ledger.note(key, self.project_id, self.send(client, key)):
                return
            if stop.is_set() and deadline is None:
                deadline = time.monotonic() + drain_s
            time.sleep(RETRY_PAUSE_S)


@dataclass(frozen=True)
class Inbox:
    """A project's messages and one recipient's inbox, as the store holds them."""

    store: Served
    project_id: str
    agent_id: str

    def _read(self, read: Callable[[Any], T]) -> T:
        """``read`` on a new client of the store (its URL asked each time: a cluster's
        names a node that runs), asked again while the store does not answer."""
        def ask() -> tuple[T] | None:
            try:
                with connect.sync_client(self.store.url) as r:
                    return (read(r),)
            except connect.STORE_DOWN:
                return None

        found: tuple[T] = wait_until(ask, timeout_s=READ_TIMEOUT_S, what="the store")
        return found[0]

    def stored(self, message_ids: list[str]) -> set[str]:
        """The messages of ``message_ids`` the store has."""
        def read(r: Any) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            for mid in message_ids:
                pipe.exists(keys.message(self.project_id, mid))
            return list(pipe.execute())

        found = self._read(read)
        return {mid for mid, f in zip(message_ids, found, strict=True) if f}

    def entries(self) -> list[tuple[str, str | None]]:
        """The inbox: each entry's message id and outcome."""
        def read(r: Any) -> list[tuple[str, str | None]]:
            delivery_ids = r.zrange(keys.inbox(self.project_id, self.agent_id), 0, -1)
            pipe = r.pipeline(transaction=False)
            for did in delivery_ids:
                pipe.hmget(keys.delivery(self.project_id, did),
                           [DeliveryField.MESSAGE_ID, DeliveryField.OUTCOME])
            return [(mid, outcome) for mid, outcome in pipe.execute()]

        return self._read(read)

    def due(self) -> int:
        """Deliveries of the project still due: in the outbox or waiting for a retry."""
        return self._read(lambda r: int(r.zcard(keys.due(self.project_id))))


def lost(inbox: Inbox, ledger: Ledger) -> int:
    """How many sends of the inbox's project were answered and are not in the store."""
    answered = set(ledger.of(inbox.project_id))
    return len(answered - inbox.stored(sorted(answered)))


def settled(inbox: Inbox, n: int) -> list[tuple[str, str | None]]:
    """The inbox once it holds ``n`` entries or more, each accepted, and nothing of
    the project is due; as it is when that has not come within SETTLE_TIMEOUT_S."""
    def done() -> list[tuple[str, str | None]] | None:
        entries = inbox.entries()
        accepted = len(entries) >= n and all(o == ACCEPTED for _, o in entries)
        return entries if accepted and inbox.due() == 0 else None

    try:
        found: list[tuple[str, str | None]] = wait_until(
            done, timeout_s=SETTLE_TIMEOUT_S, what="every delivery accepted")
    except AssertionError:
        return inbox.entries()
    return found


def accounted(inboxes: list[Inbox], ledger: Ledger) -> dict[str, int]:
    """Every answered send in the store and in its recipient's inbox once, with its
    outcome recorded: what is lost, repeated, missing, in an inbox unanswered, or
    stuck (not accepted, or still due), counted over ``inboxes``."""
    counts = Counter[str]()
    for inbox in inboxes:
        answered = set(ledger.of(inbox.project_id))
        counts["lost"] += lost(inbox, ledger)
        entries = settled(inbox, len(answered))
        in_inbox = Counter(mid for mid, _ in entries)
        counts["repeated"] += sum(n - 1 for n in in_inbox.values())
        counts["missing"] += len(answered - set(in_inbox))
        counts["unanswered"] += len(set(in_inbox) - answered)
        counts["stuck"] += sum(1 for _, o in entries if o != ACCEPTED) + inbox.due()
    return dict(counts)


def flower_queues(http: httpx.Client) -> set[str]:
    """The queues Flower's ``/api/queues/length`` lists (none while it refuses)."""
    answer = http.get("/api/queues/length")
    if answer.status_code != 200:
        return set()
    return {q["name"] for q in answer.json()["active_queues"]}


def set_lane(op: Any, project_id: str, lane: str) -> bool:
    """Put the project on the lane; False while the API still refuses (503)."""
    try:
        op.set_lane(project_id, lane)
    except (CourierAPIError, CourierUnreachable):
        return False
    return True


def lanes_after_failover(stack: Stack, fail_over: Callable[[], object]) -> list[str]:
    """Start Flower, put a project on lane ``before`` and wait until Flower lists it,
    run ``fail_over``, put another project on lane ``after`` (asked again while the
    store settles), and wait until Flower, never restarted, lists both lanes. The
    inbox lane queues it lists then."""
    _, url = stack.start_flower(["-m", "messaging.launch.flower"])
    first, second = new_project(stack), new_project(stack)
    with stack.operator() as op, httpx.Client(
            base_url=url, timeout=10, auth=("operator", stack.operator_token)) as http:
        op.set_lane(first.project_id, "before")
        wait_until(lambda: "deliver.inbox.before" in flower_queues(http),
                   timeout_s=FLOWER_TIMEOUT_S, what="Flower listing the first lane")
        fail_over()
        wait_until(lambda: set_lane(op, second.project_id, "after"),
                   timeout_s=FLOWER_TIMEOUT_S, what="a lane set after the failover")
        both = {"deliver.inbox.before", "deliver.inbox.after"}
        found: set[str] = wait_until(lambda: (names := flower_queues(http)) >= both and names,
                                     timeout_s=FLOWER_TIMEOUT_S,
                                     what="Flower listing the lane set after the failover")
    return sorted(n for n in found if ".inbox." in n)
