"""Logs an operator can keep: no line per task unless asked, warnings always."""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.receiver import Receiver
from tests.stack import make_stack, wait_until


def test_a_worker_writes_no_line_per_task_by_default(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, log_tasks="0")
    try:
        worker = stack.start_worker()
        with stack.operator() as op:
            p = op.create_project(f"/srv/{uuid.uuid4().hex}")
        with stack.client(p["token"]) as admin:
            row = admin.register_agent(p["project_id"], "Alice")
            admin.register_agent(p["project_id"], "Bob")
            with stack.client(row["token"]) as alice:
                sent = alice.send(["Bob"], "Quiet", "# shh\n")
                did = sent["delivery"]["observations"][0]["delivery_id"]
                wait_until(lambda: admin.delivery(did)["outcome"] == "accepted",
                           what="delivery")
        text = worker.log.read_text(errors="replace")
        assert "ready." in text  # the worker does log what matters
        assert "] received" not in text and "succeeded in" not in text
        assert "Sending due task" not in text  # beat ran inside the worker, quietly
    finally:
        stack.stop()


def test_task_logging_names_a_webhook_without_its_query_string(tmp_path: Path) -> None:
    receiver = Receiver()
    receiver.start()
    stack = make_stack(tmp_path, log_tasks="1")
    try:
        worker = stack.start_worker(queues="deliver.inbox,deliver.webhook,courier.sweep")
        with stack.operator() as op:
            p = op.create_project(f"/srv/{uuid.uuid4().hex}")
        with stack.client(p["token"]) as admin:
            row = admin.register_agent(p["project_id"], "Alice")
            admin.register_agent(p["project_id"], "Hook", {
                "kind": "webhook", "url": receiver.url("/hook?token=s3cr3t-in-query")})
            with stack.client(row["token"]) as alice:
                sent = alice.send(["Hook"], "Logged", "# hi\n")
                did = sent["delivery"]["observations"][0]["delivery_id"]
                wait_until(lambda: admin.delivery(did)["outcome"] == "accepted",
                           what="delivery")
        assert receiver.count("/hook?token=s3cr3t-in-query") == 1
        text = worker.log.read_text(errors="replace")
        assert f'HTTP Request: POST {receiver.url("/hook")} "HTTP/1.0 200 OK"' in text
        assert "s3cr3t-in-query" not in text
    finally:
        stack.stop()
        receiver.stop()
