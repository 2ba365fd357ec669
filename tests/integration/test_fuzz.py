"""A fuzz run over the OpenAPI schema finds no 5xx (schemathesis against the real stack).

For each kind of token (operator, project, agent), schemathesis
generates requests for every documented operation from the schema
(coverage cases, then random ones) and checks that none is answered 5xx.
The event stream is left out: with a valid token it never ends (its inputs
have their own tests).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.stack import Stack, make_stack

# Random cases per operation beyond the coverage phase's (about 3,000 per token kind in
# all with 40, some 20 s each here); COURIER_FUZZ_EXAMPLES raises it for a longer run.
# One worker: the generator is not thread-safe on every Python.
EXAMPLES = int(os.environ.get("COURIER_FUZZ_EXAMPLES", "40"))
SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
MIN_CASES = 2500


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = make_stack(tmp_path_factory.mktemp("fuzz"))
    yield s
    s.stop()


def _tokens(stack: Stack) -> dict[str, str]:
    with stack.operator() as op:
        p = op.create_project(f"/srv/fuzz-{uuid.uuid4().hex}")
    with stack.client(p["token"]) as admin:
        agent = admin.register_agent(p["project_id"], "Fuzzed")
        admin.register_agent(p["project_id"], "Other")
    return {"operator": stack.operator_token, "project": p["token"], "agent": agent["token"]}


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["operator", "project", "agent"])
def test_the_schema_fuzzed_finds_no_server_error(fuzzed: Stack, kind: str, tmp_path: Path):
    token = _tokens(fuzzed)[kind]  # requests without a token: see test_limits
    command = [str(SCHEMATHESIS), "run", f"{fuzzed.api_url}/openapi.json",
               "--checks", "not_a_server_error", "--max-examples", str(EXAMPLES),
               "--phases", "coverage,fuzzing", "--exclude-path", "/v1/agents/me/events",
               "--request-timeout", "10", "--seed", "1", "--workers", "1",
               "--report-dir", str(tmp_path), "--header", f"Authorization: Bearer {token}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=580, cwd=tmp_path,
                          env={**os.environ, "NO_COLOR": "1"})
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    found = re.search(r"(\d+) generated, (\d+) passed", done.stdout)
    assert found and int(found.group(1)) >= MIN_CASES, done.stdout[-2000:]
    print(f"{kind} token: {found.group(1)} cases, none answered 5xx")


@pytest.mark.slow
def test_the_schema_documents_the_bearer_scheme_and_the_error_shape(fuzzed: Stack):
    schema = httpx.get(f"{fuzzed.api_url}/openapi.json").json()
    schemes = schema["components"]["securitySchemes"]
    assert [s["scheme"].lower() for s in schemes.values()] == ["bearer"]
    send = schema["paths"]["/v1/messages"]["post"]
    assert send["security"] and list(send["security"][0]) == list(schemes)
    for status in ("401", "403", "422", "429"):
        ref = send["responses"][status]["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith("/Error"), (status, ref)
    body = schema["components"]["schemas"]["Error"]
    assert set(body["properties"]) == {"persisted", "error"}
