"""The API's own docs: /docs and /redoc work with no network, /openapi.json is valid OpenAPI."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable

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


def documented(project: Project) -> Callable[[object, str], None]:
    """A check of an answer against a schema of the served OpenAPI document."""
    doc = httpx.get(project.stack.api_url + "/openapi.json", timeout=10).json()

    def check(answer: object, model: str) -> None:
        schema = {"$ref": f"#/components/schemas/{model}", "components": doc["components"]}
        jsonschema.validate(answer, schema)

    return check


def test_real_answers_match_their_documented_schemas(project: Project):
    check = documented(project)
    alice, bob = project.agent("Alice"), project.agent("Bob")
    check(alice.row, "AgentRegistered")
    check({"agents": project.admin.list_agents(project.project_id)}, "Agents")
    sent = alice.api.send(["Bob"], "Schema", "checked")
    check(sent, "Sent")
    page = wait_until(lambda: (p := bob.api.inbox())["messages"] and p, what="the message")
    check(page, "InboxPage")
    check(bob.api.request("GET", f"/v1/threads/{sent['thread_id']}/rendered"), "RenderedThread")
    check(bob.api.mark_read(sent["id"]), "Marks")
    check(project.admin.delivery(sent["delivery"]["observations"][0]["delivery_id"]), "Delivery")
    with pytest.raises(Exception) as refused:
        alice.api.send(["Nobody"], "x", "y")
    check(refused.value.body, "Error")


def test_real_answers_of_the_projects_own_routes_match_their_documented_schemas(
    project: Project,
):
    check = documented(project)
    admin, base = project.admin, f"/v1/projects/{project.project_id}"
    alice = project.agent("Alice")
    project.agent("Guarded", inbound="hold")
    rotated = admin.request("POST", f"{base}/agents/{project.agent('Carol').id}/token")
    check(rotated, "AgentRegistered")
    check(admin.project(project.project_id), "Project")
    with project.stack.operator() as op:
        check(op.set_lane(project.project_id, "docs-check"), "Project")
        check(op.set_lane(project.project_id, None), "Project")

    check(admin.allow_name(project.project_id, "Later"), "NameAllowed")
    waiting = alice.api.send(["Later"], "Early", "for the name's first agent")
    check(waiting, "Sent")
    check(admin.delivery(waiting["delivery"]["observations"][0]["delivery_id"]), "Delivery")
    names = admin.request("GET", f"{base}/names")
    assert [(n["name"], n["waiting"]) for n in names["names"]] == [("Later", 1)]
    check(names, "Names")
    check(admin.end_name(project.project_id, "Later"), "NameEnded")

    held = [alice.api.send(["Guarded"], subject, "x")["delivery"]["observations"][0][
        "delivery_id"] for subject in ("Released", "Declined")]
    listed = admin.request("GET", f"{base}/held")
    assert [d["delivery_id"] for d in listed["deliveries"]] == held
    check(listed, "Held")
    check(admin.release(held[0]), "Delivery")
    check(admin.decline(held[1]), "Delivery")

    check(admin.request("POST", f"{base}/messages",
                        json={"to": ["Alice"], "subject": "From the human"}), "Sent")
    alice.api.send(["human"], "To the human", "x")
    check(wait_until(lambda: (p := admin.request("GET", f"{base}/human/inbox"))["messages"]
                     and p, what="the human's mail"), "InboxPage")
