"""The API's own docs: /docs and /redoc work with no network, /openapi.json is valid OpenAPI."""

from __future__ import annotations

import re
import shutil
import subprocess

import httpx
import jsonschema
import pytest
from openapi_spec_validator import validate

from tests.integration.conftest import Project
from tests.stack import Stack, wait_until

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_load_every_asset_from_courier_itself(stack: Stack, page: str):
    html = httpx.get(stack.api_url + page, timeout=10).text
    urls = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert urls, html
    for url in urls:
        assert url.startswith("/"), f"{page} loads {url} from elsewhere"
        answer = httpx.get(stack.api_url + url, timeout=10)
        assert answer.status_code == 200, url
        assert answer.content, url


def test_an_unknown_docs_asset_is_a_not_found_error(stack: Stack):
    answer = httpx.get(stack.api_url + "/docs/assets/..%2Fcore.py", timeout=10)
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "NOT_FOUND"


def test_openapi_document_is_valid_openapi(stack: Stack):
    validate(httpx.get(stack.api_url + "/openapi.json", timeout=10).json())


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium to render /docs with (apt-get install "
                                               "chromium); the asset checks above still ran")
def test_swagger_ui_renders_the_operations_with_the_network_cut_off(stack: Stack):
    # Every host name but loopback fails to resolve: a CDN fetch could not work.
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
         "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
         "--virtual-time-budget=15000", "--dump-dom", stack.api_url + "/docs"],
        capture_output=True, text=True, timeout=90)
    assert 'data-path="/v1/messages"' in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]


def test_real_answers_match_their_documented_schemas(project: Project):
    doc = httpx.get(project.stack.api_url + "/openapi.json", timeout=10).json()

    def check(answer: object, model: str) -> None:
        schema = {"$ref": f"#/components/schemas/{model}", "components": doc["components"]}
        jsonschema.validate(answer, schema)

    alice, bob = project.agent("Alice"), project.agent("Bob")
    check(alice.row, "AgentRegistered")
    check({"agents": project.admin.list_agents(project.project_id)}, "Agents")
    sent = alice.api.send(["Bob"], "Schema", "checked")
    check(sent, "Sent")
    page = wait_until(lambda: (p := bob.api.inbox())["messages"] and p, what="the message")
    check(page, "InboxPage")
    check(bob.api.mark_read(sent["id"]), "Marks")
    check(project.admin.delivery(sent["delivery"]["observations"][0]["delivery_id"]), "Delivery")
    with pytest.raises(Exception) as refused:
        alice.api.send(["Nobody"], "x", "y")
    check(refused.value.body, "Error")
