"""A client generated from /openapi.json by openapi-python-client sends mail (docs/http-api.md).

The send route's body is one typed object, so the generated send method takes
a typed ``SendIn`` (subject, to, resource_notice as attributes), not ``Any``.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import Project
from tests.stack import wait_until

PACKAGE = "courier_generated"
GENERATOR = Path(sys.executable).with_name("openapi-python-client")


@pytest.fixture
def generated(project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The client package generated from the running API's document."""
    spec = tmp_path / "openapi.json"
    spec.write_bytes(httpx.get(project.stack.api_url + "/openapi.json").content)
    config = tmp_path / "config.yaml"
    config.write_text("post_hooks: []\n")  # no formatter needed to use the client
    run = subprocess.run(
        [str(GENERATOR), "generate", "--path", str(spec), "--meta", "none",
         "--output-path", str(tmp_path / PACKAGE), "--config", str(config)],
        capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Warning" not in run.stdout + run.stderr, run.stdout + run.stderr
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module(PACKAGE)
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
        del sys.modules[name]


def test_the_generated_send_method_takes_a_typed_body(generated: Any):
    send = importlib.import_module(f"{PACKAGE}.api.messages.send_message_v1_messages_post")
    models = importlib.import_module(f"{PACKAGE}.models")
    method = typing.get_type_hints(send.sync_detailed, localns=vars(models))
    assert method["body"] is models.SendIn
    # The model's own annotations name its nested models, imported only for type checkers.
    fields = typing.get_type_hints(models.SendIn, localns=vars(models))
    assert fields["to"] == list[str]
    assert str in typing.get_args(fields["subject"])
    assert models.ResourceNoticeIn in typing.get_args(fields["resource_notice"])
    assert models.Sent in typing.get_args(typing.get_args(method["return"])[0])


def test_a_message_sent_through_the_generated_client_arrives(generated: Any, project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    send = importlib.import_module(f"{PACKAGE}.api.messages.send_message_v1_messages_post")
    models = importlib.import_module(f"{PACKAGE}.models")
    client = generated.AuthenticatedClient(base_url=project.stack.api_url,
                                           token=alice.row["token"])
    with client:
        answer = send.sync_detailed(client=client, body=models.SendIn(
            to=["Bob"], subject="Review auth.py before the release", body_md="# auth.py\n"))
        refused = send.sync_detailed(client=client, body=models.SendIn(to=["Bob"]))
    assert answer.status_code == 201 and isinstance(answer.parsed, models.Sent)
    assert answer.parsed.subject == "Review auth.py before the release"
    assert refused.status_code == 422 and isinstance(refused.parsed, models.Error)
    assert refused.parsed.error.code == "INVALID_ARGUMENT"
    mail = wait_until(lambda: bob.api.inbox()["messages"], what="the message in Bob's inbox")
    assert [(m["id"], m["body_md"]) for m in mail] == [(answer.parsed.id, "# auth.py\n")]
