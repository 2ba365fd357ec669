"""Many stored messages, fast: the product's own admission and delivery code, in bulk.

Each message is admitted by the admission script with the keys and arguments
``Store.admission_call`` gives (sent down a pipeline instead of one round trip
per message), and delivered by the worker's ``Dispatcher``
with the inbox transport, as a delivery task does. The key layout is therefore the
product's by construction; only HTTP, validation and Celery are skipped.
Messages are copies of one message sent through the API, each with its own id
and thread.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import redis
import redis.asyncio as aioredis

from bench.population import Agent
from bench.procs import BenchError
from messaging import ids
from messaging.config import get_settings
from messaging.store import connect
from messaging.store.admission import AdmitRequest
from messaging.store.deliveries import DeliveryStore
from messaging.store.schema import pack_message, unpack_message, without_sender
from messaging.store.scripts import scripts_for
from messaging.store.searchindex import index_messages
from messaging.store.store import Store
from messaging.timefmt import now_us
from messaging.transports.inbox import InboxTransport
from workers.dispatch import Dispatcher

CHUNK = 1_000  # messages admitted down one pipeline, then delivered
DELIVER_BATCH = 100  # deliveries per lease and inbox script (as one task carries)
# Processes side by side, so the store works while a client builds its next chunk.
PROCESSES = 2
# A message admitted without an explicit policy: the script decides (as a send does).
AUTO_POLICY = "auto"
# Words drawn from the vocabulary for each preloaded body (search bench).
VOCABULARY_WORDS = 4


def preload(url: str, project_id: str, sender: Agent, recipient: Agent, template: str,
            count: int, vocabulary: tuple[str, ...] = ()) -> None:
    """Admit and deliver ``count`` copies of the message JSON ``template``, ``sender`` to
    ``recipient``.

    With a ``vocabulary``, each copy's body is a few words drawn from it, and the
    worker's search indexing runs after each delivery batch, as ``deliver`` does.

    Raises:
        BenchError: the store refused an admission or a delivery.
    """
    parts = [count // PROCESSES + (1 if i < count % PROCESSES else 0) for i in range(PROCESSES)]
    with ProcessPoolExecutor(PROCESSES, mp_context=multiprocessing.get_context("spawn")) as pool:
        runs = [pool.submit(_preload, url, project_id, sender, recipient, template, n,
                            vocabulary, seed) for seed, n in enumerate(parts) if n]
        for run in runs:
            run.result()


def _preload(url: str, project_id: str, sender: Agent, recipient: Agent, template_json: str,
             count: int, vocabulary: tuple[str, ...], seed: int) -> None:
    client = connect.sync_client(url)
    scripts = scripts_for(client)
    admit_script = scripts["admit_message"]
    store = Store(aioredis.Redis())  # never connects: it only spells the script's call
    settings = get_settings().model_copy(update={"redis_url": url})
    dispatcher = Dispatcher(DeliveryStore(client), settings)
    inbox = InboxTransport(settings)
    template = unpack_message(template_json)
    words = random.Random(seed)
    grace_ms = int(settings.outbox_grace_s * 1000)
    try:
        for start in range(0, count, CHUNK):
            dids = [ids.new_delivery_id(project_id) for _ in range(min(CHUNK, count - start))]
            pipe = client.pipeline(transaction=False)
            for did in dids:
                if vocabulary:
                    template["body_md"] = " ".join(words.sample(vocabulary, VOCABULARY_WORDS))
                keys, args = store.admission_call(
                    _send(project_id, sender, recipient, template, did, grace_ms))
                admit_script(keys=keys, args=args, client=pipe)
            refused = [a for a in pipe.execute() if json.loads(a).get("status") != "ok"]
            if refused:
                raise BenchError(f"preload: {len(refused)} admissions refused: {refused[0]}")
            for b in range(0, len(dids), DELIVER_BATCH):
                batch = dids[b:b + DELIVER_BATCH]
                counts, leased = dispatcher.run(inbox, project_id, batch)
                if counts.get("accepted") != len(batch):
                    raise BenchError(f"preload: {dict(counts)} of {len(batch)} deliveries")
                if vocabulary:
                    index_messages(client, scripts, project_id, {
                        lease.message_id: {lease.agent_id, lease.sender_id} for lease in leased})
    finally:
        client.close()


def _send(project_id: str, sender: Agent, recipient: Agent, template: dict[str, Any],
          delivery_id: str, grace_ms: int) -> AdmitRequest:
    """One send's admission, as ``sending.send`` puts it."""
    mid = ids.new_message_id(project_id)
    now = now_us()
    return AdmitRequest(
        project_id=project_id, sender_id=sender.id, message_id=mid, thread_id=mid,
        message_json=pack_message(without_sender({**template, "id": mid, "thread_id": mid})),
        recipients=[recipient.name], delivery_ids=[delivery_id], now_us=now,
        due_ms=now // 1000 + grace_ms, policy=AUTO_POLICY, quiet_invalid=False,
        has_bcc=False)


def wait_persisted(r: redis.Redis, timeout_s: float = 600.0) -> float:
    """Wait until no AOF rewrite runs or is scheduled (it would steal a core); seconds waited.

    Raises:
        BenchError: still rewriting after ``timeout_s``.
    """
    start = time.monotonic()
    while True:
        info = r.info("persistence")
        if not info.get("aof_rewrite_in_progress") and not info.get("aof_rewrite_scheduled"):
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise BenchError("the store's AOF rewrite did not finish")
        time.sleep(0.2)
