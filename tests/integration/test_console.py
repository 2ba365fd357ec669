"""The console at /ui in a real headless Chromium (Playwright), against the real stack.

Chromium comes from the distribution (``apt-get install chromium``); Playwright
only drives it (its own browser download is never used).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import Agent, Project
from tests.stack import wait_until

CHROMIUM = os.environ.get("COURIER_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
WAIT_MS = 15_000
VIEWS = ("agents", "messages", "held", "names", "human", "compose")

Json = dict[str, Any]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module's tests."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium); .ci/run installs it")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


class Console:
    """One browser tab signed in to the console, with what went wrong in it."""

    def __init__(self, browser: Any, project: Project, viewport: dict[str, int]) -> None:
        self.context = browser.new_context(viewport=viewport)
        self.page = self.context.new_page()
        self.page.set_default_timeout(WAIT_MS)
        self.project = project
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        # Script errors and CSP violations; a failed request is the API's answer, not one.
        self.page.on("console", lambda m: m.type == "error" and "Failed to load resource"
                     not in m.text and self.errors.append(m.text))

    def sign_in(self) -> Console:
        page = self.page
        page.goto(f"{self.project.stack.api_url}/ui")
        page.fill("#project-id", self.project.project_id)
        page.fill("#project-token", self.project.token)
        page.click("#signin button[type=submit]")
        page.wait_for_selector("#app:not([hidden])")
        return self

    def go(self, view: str) -> None:
        self.page.click(f"#tabs a[data-view={view}]")
        self.page.wait_for_selector(f"#view[data-view={view}]")

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def console(browser: Any, project: Project) -> Iterator[Console]:
    c = Console(browser, project, DESKTOP)
    try:
        yield c
    finally:
        c.close()


def delivered(agent: Agent, message_id: str) -> None:
    """Wait until the message's deliveries have an outcome."""
    wait_until(lambda: all(d["outcome"] for d in agent.api.message_deliveries(message_id)),
               what=f"{message_id} delivered")


def searchable(project: Project, subject: str) -> None:
    """Wait until the project's search finds a subject (indexed after dispatch)."""
    def found() -> bool:
        page = project.admin.request("GET", f"/v1/projects/{project.project_id}/search")
        return any(m["subject"] == subject for m in page["messages"])
    wait_until(found, what=f"{subject!r} searchable")


def test_the_page_forbids_inline_script_and_remote_sources(project: Project):
    response = httpx.get(f"{project.stack.api_url}/ui")
    assert response.status_code == 200 and "console.js" in response.text
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp
    assert "unsafe-inline" not in csp and "http" not in csp
    assert "set-cookie" not in response.headers
    assert httpx.get(f"{project.stack.api_url}/ui/nope.js").status_code == 404


def test_sign_in_keeps_the_token_out_of_urls_and_cookies(console: Console):
    console.sign_in()
    page = console.page
    assert console.project.token not in page.url
    assert console.context.cookies() == []
    stored = page.evaluate("sessionStorage.getItem('courier.token')")
    assert stored == console.project.token
    page.click("#signout")
    page.wait_for_selector("#signin-view:not([hidden])")
    assert page.evaluate("sessionStorage.getItem('courier.token')") is None


def test_a_wrong_token_is_refused(console: Console):
    page = console.page
    page.goto(f"{console.project.stack.api_url}/ui")
    page.fill("#project-id", console.project.project_id)
    page.fill("#project-token", "cpt_wrong")
    page.click("#signin button[type=submit]")
    page.wait_for_selector("#signin-error:has-text('does not open')")


def test_the_agents_show_with_presence_and_transport(console: Console, project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    alice.api.set_presence("busy")
    console.sign_in()
    page = console.page
    row = page.wait_for_selector(f"li.agent[data-agent='{alice.id}'] .agent-row")
    assert alice.label in row.inner_text() and "busy" in row.inner_text()
    assert "inbox" in page.inner_text(f"li.agent[data-agent='{bob.id}']")
    assert console.errors == []


def test_a_thread_shows_rendered_markdown_and_each_delivery_timeline(console: Console,
                                                                     project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send("Bob", "Review auth.py", "Please **check** the `token` code.\n\n"
                          "| a | b |\n|---|---|\n| 1 | 2 |\n")
    delivered(alice, sent["id"])
    searchable(project, "Review auth.py")
    console.sign_in()
    console.go("messages")
    page = console.page
    page.click("a.subject:has-text('Review auth.py')")
    page.wait_for_selector("article.message .body strong")
    assert page.inner_text("article.message .body strong") == "check"
    assert page.inner_text("article.message .body code") == "token"
    assert page.query_selector("article.message .body table") is not None
    done = page.query_selector_all(".delivery ol.timeline li.stage.done")
    names = [d.get_attribute("data-stage") for d in done]
    assert names[:4] == ["admitted", "target_selected", "dispatch_started",
                         "provider_result_recorded"]
    assert "accepted" in page.inner_text(".delivery .delivery-head")
    bob.api.inbox()  # the recipient fetches: the timeline's last stage follows by polling
    page.wait_for_selector(".delivery li.stage.done[data-stage=delivery_observed]")
    assert console.errors == []


def test_a_thread_refreshed_unchanged_is_a_304_and_a_new_message_still_shows(
        console: Console, project: Project):
    alice, bob = project.agent("Alice"), project.agent("Bob")
    sent = alice.api.send("Bob", "Deploy plan", "Step *one*.")
    searchable(project, "Deploy plan")
    page = console.page
    console.sign_in()
    console.go("messages")
    with page.expect_response(lambda r: "/rendered" in r.url) as first:
        page.click("a.subject:has-text('Deploy plan')")
    assert first.value.status == 200
    # The next refresh (every 2 s) sends the thread's ETag back; it has not changed.
    with page.expect_response(lambda r: "/rendered" in r.url) as refresh:
        pass
    assert refresh.value.status == 304
    page.wait_for_timeout(100)  # the refresh draws what it had: the thread still shows
    assert page.inner_text("article.message .body em") == "one"
    bob.api.reply(sent["id"], "Step *two* is done.")
    page.wait_for_selector("article.message:nth-of-type(2) .body em")
    assert page.inner_text("article.message:nth-of-type(2) .body em") == "two"
    assert console.errors == []


def test_a_long_thread_shows_a_page_and_its_later_messages_on_request(
        console: Console, project: Project):
    alice, _ = project.agent("Alice"), project.agent("Bob")
    first = alice.api.send("Bob", "Long thread", "post 0")
    for n in range(1, 55):
        alice.api.send("Bob", "Long thread", f"post {n}", thread_id=first["thread_id"])
    page = console.page
    console.sign_in()
    page.evaluate(f"location.hash = '#thread/{first['thread_id']}'")
    page.wait_for_selector("button.later")
    assert len(page.query_selector_all("article.message")) == 50
    page.click("button.later")
    page.wait_for_selector("button.later", state="detached")
    page.wait_for_timeout(2500)  # a refresh keeps the pages opened
    bodies = [a.inner_text() for a in page.query_selector_all("article.message .body")]
    assert bodies == [f"post {n}" for n in range(55)]
    assert console.errors == []


def test_search_finds_by_words_and_sender(console: Console, project: Project):
    alice, carol = project.agent("Alice"), project.agent("Carol")
    project.agent("Bob")
    alice.api.send("Bob", "Deploy plan", "The authentication service moves tonight.")
    carol.api.send("Bob", "Lunch", "Crème brûlée?")
    searchable(project, "Deploy plan")
    searchable(project, "Lunch")
    console.sign_in()
    console.go("messages")
    page = console.page
    page.fill("#search input[name=q]", "creme")
    page.click("#search button[type=submit]")
    page.wait_for_selector("h2:has-text('Search results')")
    page.wait_for_function("document.querySelectorAll('li.message-item').length === 1")
    assert "Lunch" in page.inner_text("li.message-item")
    page.fill("#search input[name=q]", "auth*")
    page.fill("#search input[name=from]", "Alice")
    page.click("#search button[type=submit]")
    page.wait_for_selector("li.message-item:has-text('Deploy plan')")
    assert "authentication" in page.inner_text("li.message-item .snippet")


HOSTILE_SUBJECT = ('<script>window.__pwned = "subject"</script>'
                   '<img src=x onerror="window.__pwned=1">')
HOSTILE_BODY = """<script>window.__pwned = "body"</script>

<img src=x onerror="window.__pwned = 'img'">
<a href="javascript:window.__pwned='raw-link'">raw link</a>
[md link](javascript:window.__pwned='md-link')
<svg onload="window.__pwned='svg'"></svg>
<iframe src="javascript:window.__pwned='iframe'"></iframe>
![remote](http://192.0.2.1/tracker.png)
<div style="background:url(http://192.0.2.1/x)" onmouseover="window.__pwned='hover'">hover</div>
"""


def test_script_in_a_message_never_runs(console: Console, project: Project):
    alice = project.agent("Alice")
    project.agent("Bob")
    sent = alice.api.send("Bob", HOSTILE_SUBJECT, HOSTILE_BODY, topic="x-ss")
    delivered(alice, sent["id"])
    searchable(project, HOSTILE_SUBJECT)
    console.sign_in()
    page = console.page
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    console.go("messages")
    item = page.wait_for_selector("li.message-item")
    assert HOSTILE_SUBJECT in item.inner_text()  # shown as text, not markup
    page.click("li.message-item a.subject")
    page.wait_for_selector("article.message .body")
    page.hover("article.message .body")
    for link in page.query_selector_all("article.message a"):
        href = link.get_attribute("href") or ""
        assert not href.lower().startswith("javascript"), href
    page.wait_for_timeout(500)
    assert page.evaluate("window.__pwned") is None
    scripts = page.evaluate("[...document.scripts].map(s => s.src)")
    assert scripts == [f"{project.stack.api_url}/ui/console.js"]
    handlers = page.evaluate(
        "[...document.querySelectorAll('*')].flatMap(e => [...e.attributes])"
        ".filter(a => a.name.startsWith('on')).map(a => a.name)")
    assert handlers == []
    assert page.query_selector_all("#view img, #view iframe, #view svg") == []
    assert all(u.startswith(project.stack.api_url) for u in requests), requests


def test_releasing_held_mail_sends_it_to_the_agent(console: Console, project: Project):
    alice, guarded = project.agent("Alice"), project.agent("Guarded", inbound="hold")
    project.agent("Other")
    kept = alice.api.send("Guarded", "Hold me", "for the human first")
    refused = alice.api.send("Guarded", "Decline me", "not wanted")
    console.sign_in()
    console.go("held")
    page = console.page
    page.wait_for_selector("li.held-item:has-text('Hold me')")
    assert guarded.api.inbox()["messages"] == []
    page.click("li.held-item:has-text('Hold me') button.release")
    page.wait_for_selector("#status:has-text('Released')")
    mail = wait_until(lambda: guarded.api.inbox()["messages"], what="released mail")
    assert [m["id"] for m in mail] == [kept["id"]]
    page.click("li.held-item:has-text('Decline me') button.decline")
    page.wait_for_selector("#content:has-text('No mail is waiting')")
    [declined] = alice.api.message_deliveries(refused["id"])
    assert declined["outcome"] == "rejected"
    console.go("messages")
    page.click("a.subject:has-text('Hold me')")
    page.wait_for_selector(".delivery li.stage.done[data-stage=provider_result_recorded]")
    assert console.errors == []


def test_names_are_authorized_and_removed(console: Console, project: Project):
    console.sign_in()
    console.go("names")
    page = console.page
    page.fill("#authorize input[name=name]", "Reviewer")
    page.click("#authorize button[type=submit]")
    page.wait_for_selector("ul.names li:has-text('Reviewer')")
    names = project.admin.request("GET", f"/v1/projects/{project.project_id}/names")["names"]
    assert [n["name"] for n in names] == ["Reviewer"]
    page.click("ul.names li:has-text('Reviewer') button")
    page.wait_for_selector("#content:has-text('No name is authorized')")


def test_compose_as_human_and_see_the_agents_reply(console: Console, project: Project):
    bob = project.agent("Bob")
    console.sign_in()
    console.go("compose")
    page = console.page
    page.fill("#compose input[name=to]", "Bob")
    page.fill("#compose input[name=subject]", "Status?")
    page.fill("#compose textarea[name=body_md]", "Where is the **auth** review?")
    page.click("#compose button[type=submit]")
    page.wait_for_selector("article.message .body strong")
    [mail] = wait_until(lambda: bob.api.inbox()["messages"], what="the human's mail")
    assert (mail["from"], mail["subject"]) == ("human", "Status?")
    bob.api.reply(mail["id"], "Done, see `auth.py`.")
    page.wait_for_selector("article.message:has-text('Done, see')")
    console.go("human")
    page.wait_for_selector("li.message-item:has-text('Re: Status?')")
    assert "Bob" in page.inner_text("li.message-item")
    assert console.errors == []


@pytest.mark.slow
def test_screenshots_of_each_page(browser: Any, project: Project, tmp_path: Path):
    lead = project.agent("Lead")
    alice = project.agent("Alice", parent=lead.id)
    bob = project.agent("Bob", parent=lead.id)
    project.agent("Guarded", inbound="hold")
    alice.api.set_presence("busy")
    alice.api.send("Guarded", "Deploy window", "May I deploy at 18:00?")
    alice.api.send("human", "Decision needed", "Ship the **auth** change on Friday?")
    project.admin.request("PUT", f"/v1/projects/{project.project_id}/names/Reviewer",
                          json={})
    sent = alice.api.send("Bob", "Review auth.py", "# Findings\n\n- tokens are **hashed**\n"
                          "- rotate the `signing` key\n\n```py\nrotate(key)\n```\n", topic="review")
    delivered(alice, sent["id"])
    bob.api.reply(sent["id"], "Done: rotated, see `keys.py`.")
    searchable(project, "Re: Review auth.py")
    out = Path(os.environ.get("COURIER_SCREENSHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    for label, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
        c = Console(browser, project, viewport)
        try:
            c.sign_in()
            c.page.wait_for_selector("li.agent")
            for view in VIEWS:
                c.go(view)
                c.page.wait_for_selector("#content > *")
                c.page.screenshot(path=str(out / f"{view}-{label}.png"), full_page=True)
            c.go("messages")
            c.page.click("a.subject:has-text('Re: Review auth.py')")
            c.page.wait_for_selector(".delivery ol.timeline")
            c.page.screenshot(path=str(out / f"thread-{label}.png"), full_page=True)
        finally:
            c.close()
    shots = sorted(out.glob("*.png"))
    assert len(shots) == 2 * (len(VIEWS) + 1) and all(s.stat().st_size > 2000 for s in shots)
    if os.environ.get("COURIER_SCREENSHOTS") is None:
        shutil.rmtree(out, ignore_errors=True)
