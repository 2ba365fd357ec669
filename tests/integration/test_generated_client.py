"""Clients generated from /openapi.json send mail (docs/http-api.md).

The send route's body is one typed object, so the generated send method takes
a typed ``SendIn`` (subject, to, resource_notice as attributes), not ``Any``.
A program on openapi-python-client's client and one on openapi-typescript's
types (default options) send with the three documented fields, read every
documented field of the answer by name and search: mypy and tsc check each
strictly, and each runs against the stack.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import Agent, Project
from tests.npm import CACHE, installed
from tests.stack import wait_until

PACKAGE = "courier_generated"
GENERATOR = Path(sys.executable).with_name("openapi-python-client")
PROGRAMS = Path(__file__).parents[1] / "fixtures" / "generated_clients"
DOCS = Path(__file__).parents[2] / "docs" / "http-api.md"
# openapi-typescript 7.13 (what users of the TypeScript face run) and the compiler.
NPM_TOOLS = {"openapi-typescript": "7.13.0", "typescript": "5.9.3", "@types/node": "20.19.43"}
TSCONFIG = {"compilerOptions": {
    "strict": True, "target": "es2022", "module": "nodenext", "lib": ["es2022", "dom"],
    "types": ["node"], "skipLibCheck": True}, "files": ["program.ts"]}


def generate(project: Project, out: Path) -> Path:
    """The Python client package generated from the running API's document, in ``out``."""
    spec = out / "openapi.json"
    spec.write_bytes(httpx.get(project.stack.api_url + "/openapi.json").content)
    config = out / "config.yaml"
    config.write_text("post_hooks: []\n")  # no formatter needed to use the client
    run = subprocess.run(
        [str(GENERATOR), "generate", "--path", str(spec), "--meta", "none",
         "--output-path", str(out / PACKAGE), "--config", str(config)],
        capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Warning" not in run.stdout + run.stderr, run.stdout + run.stderr
    return out / PACKAGE


@pytest.fixture
def generated(project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The client package generated from the running API's document, imported."""
    generate(project, tmp_path)
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


def documented_answer_fields() -> set[str]:
    """The field names of the send's answer as docs/http-api.md shows it, nested ones too."""
    text = DOCS.read_text()
    block = re.search(r"The answer, 201:\n\n```json\n(.*?)```", text, re.S)
    assert block, "the send's answer is in docs/http-api.md"

    def names(value: Any) -> set[str]:
        if isinstance(value, dict):
            return set(value) | {n for v in value.values() for n in names(v)}
        if isinstance(value, list):
            return {n for v in value for n in names(v)}
        return set()
    return names(json.loads(block.group(1)))


@pytest.mark.parametrize(("program", "spelling"), [
    ("program.py", {"from": "from_"}), ("program.ts", {})])
def test_each_program_reads_every_documented_field_of_a_send_s_answer(
        program: str, spelling: dict[str, str]):
    text = (PROGRAMS / program).read_text()
    unread = {f for f in documented_answer_fields()
              if f".{spelling.get(f, f)}" not in text}
    assert not unread, f"{program} does not read {sorted(unread)}"


@pytest.fixture
def mail(project: Project) -> tuple[Agent, Agent]:
    """Alice, who sent Bob a message about auth.py that search finds, and Bob."""
    alice, bob = project.agent("Alice"), project.agent("Bob")
    alice.api.send("Bob", "auth.py: the token check", "The old check, for the record.")
    wait_until(lambda: alice.api.search("auth")["messages"], what="the first message indexed")
    return alice, bob


def check_answers(out: Any, alice: Agent) -> None:
    """What a program printed: the send, the notice and the search as the server answered."""
    sent, notice = out["sent"], out["notice"]
    assert sent["subject"] == "Review auth.py before the release"
    assert (sent["sender_id"], sent["from"], sent["revision"]) == (alice.id, alice.label, 1)
    assert (sent["delivery_policy"], sent["probe"], sent["resource_notice"]) == (
        "checked", False, None)
    assert sent["observations"][0][6:] == ["pinned", False]
    assert notice["resource_notice"][0::2] == ["db-lock", "released"]
    assert "auth.py: the token check" in [subject for _, subject, _ in out["hits"]]


@pytest.mark.slow
def test_a_program_on_the_python_client_type_checks_and_runs(
        project: Project, mail: tuple[Agent, Agent], tmp_path: Path):
    generate(project, tmp_path)
    program = tmp_path / "program.py"
    program.write_text((PROGRAMS / "program.py").read_text())
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
         "--cache-dir", str(CACHE / "mypy-generated-client"), str(program)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    alice = mail[0]
    ran = subprocess.run([sys.executable, str(program), project.stack.api_url,
                          alice.row["token"]], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    check_answers(json.loads(ran.stdout), alice)


@pytest.mark.slow
def test_a_program_on_openapi_typescript_s_types_compiles_and_runs(
        project: Project, mail: tuple[Agent, Agent], tmp_path: Path):
    tools = installed("openapi-clients", NPM_TOOLS) / "node_modules"
    spec = tmp_path / "openapi.json"
    spec.write_bytes(httpx.get(project.stack.api_url + "/openapi.json").content)
    made = subprocess.run([str(tools / ".bin" / "openapi-typescript"), str(spec),
                           "-o", str(tmp_path / "courier.ts")],
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stdout + made.stderr
    (tmp_path / "program.ts").write_text((PROGRAMS / "program.ts").read_text())
    config = {**TSCONFIG, "compilerOptions": {**TSCONFIG["compilerOptions"],
                                              "typeRoots": [str(tools / "@types")]}}
    (tmp_path / "tsconfig.json").write_text(json.dumps(config))
    compiled = subprocess.run([str(tools / ".bin" / "tsc"), "-p", str(tmp_path)],
                              capture_output=True, text=True, timeout=120)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    alice = mail[0]
    ran = subprocess.run(["node", str(tmp_path / "program.js"), project.stack.api_url,
                          alice.row["token"]], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    check_answers(json.loads(ran.stdout), alice)
