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
body's HTML is kept (in this process, up to ``CACHE_BYTES`` bytes, already
encoded as a JSON string, so that an answer only copies it) and rendered once. A
request waits at most ``WAIT_S`` for its bodies: what is not ready by then is
shown preformatted this time and goes on rendering for the next.

A rendered thread carries ``body_html`` in place of ``body_md``: it is for
showing, and sending both would double every view of a long thread (the
Markdown is in ``GET /v1/threads/{id}``). Its ``tag`` changes whenever what it
shows does, and is cheap to make (a digest of each body's HTML is kept with
it), so a viewer refreshing an unchanged thread is told so without the thread.
"""

from __future__ import annotations

import asyncio
import hashlib
import html
from collections import OrderedDict
from dataclasses import dataclass

import cmarkgfm
import nh3
import orjson

from messaging.models import ThreadQuery
from messaging.runtime.budgetpool import BudgetPool, PoolBusy
from messaging.service.caller import Caller
from messaging.service.reading import get_thread
from messaging.store.facts import Lru
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
# The HTML kept in this process, in bytes of its JSON encoding.
CACHE_BYTES = 64 * 1024 * 1024
# Messages whose fields but the body are kept in this process, at most: with their
# HTML kept too, a rendered view reads only what changes of them from the store.
HEADS_KEPT = 10_000
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


# A body's HTML not kept: shown preformatted for now, or the empty body. Either is
# the same for the same message, so a thread's tag can stand for it by this mark.
NOT_KEPT = b"-"
# Bytes of each body's digest, and of a thread's tag.
DIGEST_BYTES = 16


@dataclass(frozen=True)
class Shown:
    """A body's HTML, encoded once as a JSON string (orjson copies it into each answer
    as it is), and a digest that changes when the HTML does."""

    html: orjson.Fragment
    digest: bytes = NOT_KEPT


def shown_now(text: str) -> Shown:
    """``text`` (a body not rendered yet, or the empty one) as it is shown for now."""
    return Shown(orjson.Fragment(orjson.dumps(preformatted(text) if text else "")))


def kept(html_text: str) -> tuple[Shown, int]:
    """A body's final HTML as kept: encoded, digested; and its size in bytes."""
    json_text = orjson.dumps(html_text)
    digest = hashlib.blake2b(json_text, digest_size=DIGEST_BYTES).digest()
    return Shown(orjson.Fragment(json_text), digest), len(json_text)


class Renderer:
    """Bodies to HTML off the event loop, each message once, within a budget."""

    def __init__(self, processes: int, budget_s: float, cache_bytes: int = CACHE_BYTES,
                 wait_s: float = WAIT_S) -> None:
        self.pool = BudgetPool(render_markdown, processes, budget_s, MAX_WAITING)
        self.cache_bytes, self.wait_s = cache_bytes, wait_s
        # Each body's HTML as shown, with its size in bytes.
        self._cache: OrderedDict[str, tuple[Shown, int]] = OrderedDict()
        self._cached_bytes = 0
        self._rendering: dict[str, asyncio.Task[Shown]] = {}
        # Each rendered message's stored fields but its body (a message never changes).
        self.heads: Lru[str, Json] = Lru(HEADS_KEPT)

    async def start(self) -> None:
        """Start the child processes."""
        await self.pool.start()

    async def stop(self) -> None:
        """Stop the child processes."""
        await self.pool.stop()

    async def bodies(self, messages: dict[str, str]) -> dict[str, Shown]:
        """Each message id's body as HTML; preformatted where not ready within ``wait_s``."""
        out: dict[str, Shown] = {}
        waiting: dict[str, asyncio.Task[Shown]] = {}
        for message_id, text in messages.items():
            if (cached := self.kept(message_id)) is not None:
                out[message_id] = cached
            elif text:
                waiting[message_id] = self._render(message_id, text)
            else:
                out[message_id] = shown_now(text)
        if waiting:
            # Shielded: a body not ready in time goes on rendering, for the next request.
            await asyncio.wait([asyncio.shield(t) for t in waiting.values()],
                               timeout=self.wait_s)
        for message_id, task in waiting.items():
            out[message_id] = task.result() if task.done() else shown_now(messages[message_id])
        return out

    def _render(self, message_id: str, text: str) -> asyncio.Task[Shown]:
        """The one rendering of this message, started unless already under way."""
        task = self._rendering.get(message_id)
        if task is None:
            task = asyncio.create_task(self._rendered(message_id, text))
            self._rendering[message_id] = task
            task.add_done_callback(lambda _: self._rendering.pop(message_id, None))
        return task

    async def _rendered(self, message_id: str, text: str) -> Shown:
        try:
            result = await self.pool.run(text)
        except PoolBusy:
            return shown_now(text)  # rendered when there is room
        shown, size = kept(preformatted(text) if result is None else result)
        self._keep(message_id, shown, size)
        return shown

    def kept(self, message_id: str) -> Shown | None:
        """The message's body as kept here, once rendered (or shown as text for good)."""
        found = self._cache.get(message_id)
        if found is None:
            return None
        self._cache.move_to_end(message_id)
        return found[0]

    def _keep(self, message_id: str, shown: Shown, size: int) -> None:
        if size > self.cache_bytes:
            return
        self._cache[message_id] = shown, size
        self._cached_bytes += size
        while self._cached_bytes > self.cache_bytes:
            _, (_, dropped) = self._cache.popitem(last=False)
            self._cached_bytes -= dropped


class _Viewing:
    """The messages a rendered view may read without their bodies: those whose head
    and HTML this process keeps. Each body's HTML is held from the moment it is
    counted on, so the cache letting it go meanwhile changes nothing."""

    def __init__(self, renderer: Renderer) -> None:
        self.renderer = renderer
        self.shown: dict[str, Shown] = {}

    def head(self, message_id: str) -> Json | None:
        head = self.renderer.heads.get(message_id)
        shown = self.renderer.kept(message_id)
        if head is None or shown is None:
            return None
        self.shown[message_id] = shown
        return dict(head)

    def keep(self, message_id: str, msg: Json) -> None:
        self.renderer.heads.put(message_id, {k: v for k, v in msg.items() if k != "body_md"})


async def rendered_thread(store: Store, caller: Caller, thread_id: str, q: ThreadQuery,
                          renderer: Renderer) -> tuple[Json, str]:
    """The thread's page as ``GET /v1/threads/{id}`` shows it, each message's ``body_md``
    as ``body_html``; and its tag, which changes whenever the answer does.

    A message rendered before is read from the store without its JSON: only what
    may change (who may see it) is asked for, the rest is kept in this process.
    """
    viewing = _Viewing(renderer)
    thread = await get_thread(store, caller, thread_id, q.cursor, q.limit, known=viewing)
    shown = viewing.shown | await renderer.bodies({
        msg["id"]: msg.pop("body_md", None) or ""
        for msg in thread["messages"] if msg["id"] not in viewing.shown})
    # Everything but the bodies, then each body's digest: the bodies are the bulk.
    tag = hashlib.blake2b(orjson.dumps(thread), digest_size=DIGEST_BYTES)
    for msg in thread["messages"]:
        body = shown[msg["id"]]
        tag.update(body.digest)
        msg["body_html"] = body.html
    return thread, tag.hexdigest()
