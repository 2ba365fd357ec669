"""Markdown to safe HTML for people's eyes: a CommonMark parser, then a sanitizer.

The parser is cmark-gfm (C, built to take time linear in its input, crafted
input included), with tables and strikethrough. Raw HTML in the Markdown
goes through with the rest to the sanitizer, which keeps only harmless tags
and their text: no script, no event handlers, no images (nothing remote
loads), links only to http, https and mailto, opened without a referrer. (Left
out by the parser instead, a body of raw HTML would show nothing at all.)

A megabyte of crafted Markdown still costs the parser most of a second, so
rendering never runs on the event loop: it runs in a ``BudgetPool`` of child processes,
each body within a time budget. A body that does not render within its budget
is shown as escaped preformatted text. A message never changes, so each
body's HTML is kept (in this process, up to ``CACHE_CHARS`` characters) and rendered
once. A request waits at most ``WAIT_S`` for its bodies: what is not ready by
then is shown preformatted this time and goes on rendering for the next.
"""

from __future__ import annotations

import asyncio
import html
from collections import OrderedDict

import cmarkgfm
import nh3

from messaging.runtime.budgetpool import BudgetPool, PoolBusy
from messaging.service.caller import Caller
from messaging.service.reading import get_thread
from messaging.store.store import Store
from messaging.types import Json

TAGS = frozenset(nh3.ALLOWED_TAGS) - {"img", "map", "area"}
ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "td": {"align"}, "th": {"align"},
              "code": {"class"}}
URL_SCHEMES = frozenset({"http", "https", "mailto"})
LINK_REL = "noopener noreferrer nofollow"
# The class of the <pre> that shows a body the budget could not render.
UNRENDERED_CLASS = "unrendered"

# How long one request waits for its bodies; with the read of the thread it
# answers within 2 s even on a busy machine.
WAIT_S = 1.0
# The HTML kept in this process, in characters.
CACHE_CHARS = 64 * 1024 * 1024
# Bodies waiting for a child process at most; beyond, shown preformatted at once.
MAX_WAITING = 256


# cmark-gfm's extensions in use.
EXTENSIONS = ("table", "strikethrough")
# Raw HTML passes the parser; the sanitizer below is what makes it safe.
PARSER_OPTIONS = cmarkgfm.Options.CMARK_OPT_UNSAFE


def render_markdown(text: str) -> str:
    """Markdown as sanitized HTML."""
    rendered = cmarkgfm.markdown_to_html_with_extensions(text, options=PARSER_OPTIONS,
                                                         extensions=list(EXTENSIONS))
    return nh3.clean(rendered, tags=set(TAGS),
                     attributes={k: set(v) for k, v in ATTRIBUTES.items()},
                     url_schemes=set(URL_SCHEMES), link_rel=LINK_REL)


def preformatted(text: str) -> str:
    """The body as escaped preformatted text: what a body the budget cannot render shows."""
    return f'<pre class="{UNRENDERED_CLASS}">{html.escape(text)}</pre>'


class Renderer:
    """Bodies to HTML off the event loop, each message once, within a budget."""

    def __init__(self, processes: int, budget_s: float, cache_chars: int = CACHE_CHARS,
                 wait_s: float = WAIT_S) -> None:
        self.pool = BudgetPool(render_markdown, processes, budget_s, MAX_WAITING)
        self.cache_chars, self.wait_s = cache_chars, wait_s
        self._cache: OrderedDict[str, str] = OrderedDict()
        self._cached_chars = 0
        self._rendering: dict[str, asyncio.Task[str]] = {}

    async def start(self) -> None:
        """Start the child processes."""
        await self.pool.start()

    async def stop(self) -> None:
        """Stop the child processes."""
        await self.pool.stop()

    async def bodies(self, messages: dict[str, str]) -> dict[str, str]:
        """Each message id's body as HTML; preformatted where not ready within ``wait_s``."""
        out: dict[str, str] = {}
        waiting: dict[str, asyncio.Task[str]] = {}
        for message_id, text in messages.items():
            if (cached := self._cached(message_id)) is not None:
                out[message_id] = cached
            elif text:
                waiting[message_id] = self._render(message_id, text)
            else:
                out[message_id] = ""
        if waiting:
            # Shielded: a body not ready in time goes on rendering, for the next request.
            await asyncio.wait([asyncio.shield(t) for t in waiting.values()],
                               timeout=self.wait_s)
        for message_id, task in waiting.items():
            out[message_id] = task.result() if task.done() else preformatted(messages[message_id])
        return out

    def _render(self, message_id: str, text: str) -> asyncio.Task[str]:
        """The one rendering of this message, started unless already under way."""
        task = self._rendering.get(message_id)
        if task is None:
            task = asyncio.create_task(self._rendered(message_id, text))
            self._rendering[message_id] = task
            task.add_done_callback(lambda _: self._rendering.pop(message_id, None))
        return task

    async def _rendered(self, message_id: str, text: str) -> str:
        try:
            result = await self.pool.run(text)
        except PoolBusy:
            return preformatted(text)  # shown now, rendered when there is room
        shown = preformatted(text) if result is None else result
        self._keep(message_id, shown)
        return shown

    def _cached(self, message_id: str) -> str | None:
        found = self._cache.get(message_id)
        if found is not None:
            self._cache.move_to_end(message_id)
        return found

    def _keep(self, message_id: str, shown: str) -> None:
        size = len(shown)
        if size > self.cache_chars:
            return
        self._cache[message_id] = shown
        self._cached_chars += size
        while self._cached_chars > self.cache_chars:
            _, dropped = self._cache.popitem(last=False)
            self._cached_chars -= len(dropped)


async def rendered_thread(store: Store, caller: Caller, thread_id: str,
                          renderer: Renderer) -> Json:
    """The thread as ``GET /v1/threads/{id}`` shows it, each message with ``body_html``."""
    thread = await get_thread(store, caller, thread_id)
    shown = await renderer.bodies({msg["id"]: msg.get("body_md") or ""
                                   for msg in thread["messages"]})
    for msg in thread["messages"]:
        msg["body_html"] = shown[msg["id"]]
    return thread
