"""Markdown to safe HTML for people's eyes: a CommonMark parser, then a sanitizer.

The parser never passes raw HTML through, and the sanitizer keeps only
harmless tags: no script, no event handlers, no images (nothing remote loads),
links only to http, https and mailto, opened without a referrer.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import nh3
from markdown_it import MarkdownIt

from messaging.service.caller import Caller
from messaging.service.reading import get_thread
from messaging.store.store import Store

Json = dict[str, Any]

TAGS = frozenset(nh3.ALLOWED_TAGS) - {"img", "map", "area"}
ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "td": {"align"}, "th": {"align"},
              "code": {"class"}}
URL_SCHEMES = frozenset({"http", "https", "mailto"})
LINK_REL = "noopener noreferrer nofollow"


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(
        ["table", "strikethrough"])


def render_markdown(text: str) -> str:
    """Markdown as sanitized HTML."""
    html = _parser().render(text)
    return nh3.clean(html, tags=set(TAGS), attributes={k: set(v) for k, v in ATTRIBUTES.items()},
                     url_schemes=set(URL_SCHEMES), link_rel=LINK_REL)


async def rendered_thread(store: Store, caller: Caller, thread_id: str) -> Json:
    """The thread as ``GET /v1/threads/{id}`` shows it, each message with ``body_html``."""
    thread = await get_thread(store, caller, thread_id)
    for msg in thread["messages"]:
        msg["body_html"] = render_markdown(msg.get("body_md") or "")
    return thread
