"""How mail is put into an agent's conversation by a host adapter: Courier's own
markup around it, a peer's text kept from passing for that markup, a body cut to
the room a host gives, and the seal that lets a hook find a channel event of its
own in the session's transcript.

A hook's context wraps each message in ``<courier-message ...>`` (a notice of
Courier's own in ``<courier-notice ...>``); Claude Code wraps each channel event
in ``<channel source="courier" ...>``. A peer's text reaches the model inside
such an element, so every opening or closing tag of these names in a body, a
subject or a name, whatever its case, spacing or spelling (``</ Channel >``,
``&lt;courier-message``, ``&#60;/channel``, a full-width ``＜``), has its ``<``
(or the entity's ``&``) escaped: the model sees the text, never the markup.
Attribute values are HTML-escaped besides. What the inbox and ``get_message``
return is untouched: this is how a host shows a message, not how it is stored.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import re

from messaging.types import Json

# Claude Code shows the model at most 10,000 characters of a hook's context; a
# channel event's content is held to the same room.
CONTEXT_MAX_CHARS = 9_000
# What a cut body keeps room for: the note that says how to read the rest.
CUT_NOTE_ROOM = 200
MESSAGE_TAG = "courier-message"
NOTICE_TAG = "courier-notice"
CHANNEL_TAG = "channel"
# Courier's notices (idle notices) are sent by this sender, which is no agent.
COURIER_SENDER = "courier"
# The names of the elements a host or a model could read as the wrapping of mail.
WRAPPING_TAGS = (MESSAGE_TAG, NOTICE_TAG, CHANNEL_TAG)
# An opening of a tag: "<", its full-width and small forms, or an entity for "<".
_OPENERS = r"<|\uff1c|\ufe64|&lt;?|&#0*60;?|&#x0*3c;?"
_TAG_RE = re.compile(
    rf"(?P<open>{_OPENERS})(?P<rest>\s*/?\s*(?:{'|'.join(WRAPPING_TAGS)})(?![\w-]))",
    re.IGNORECASE)
# The channel event's meta attribute that carries the seal, and the seal's length.
SEAL_KEY = "courier_seal"
SEAL_HEX = 24
SEAL_RE = re.compile(rb'courier_seal=\\{0,3}"([0-9a-f]{24})')


def _neutral(match: re.Match[str]) -> str:
    opener = match["open"]
    escaped = "&amp;" + opener[1:] if opener.startswith("&") else "&lt;"
    return escaped + match["rest"]


def neutral(text: str) -> str:
    """``text`` with every tag that could pass for the wrapping of mail escaped."""
    return _TAG_RE.sub(_neutral, text)


def attribute(value: object) -> str:
    """A value as an attribute of the wrapping: HTML-escaped, its tags escaped too."""
    return html.escape(neutral(str(value if value is not None else "")), quote=True)


def cut(body: str, room: int, message_id: str, whole: int | None = None) -> str:
    """``body`` in ``room`` characters: whole when it fits, else cut with a note naming
    the ``get_message`` tool and the message's id. ``whole``: the whole body's length,
    when ``body`` is already a part of it."""
    whole = max(whole or 0, len(body))
    if whole <= room:
        return body
    keep = min(max(room - CUT_NOTE_ROOM, 0), len(body))
    return body[:keep] + (f"\n[cut: {whole - keep} more characters; read the whole "
                          f"message with the get_message tool, message_id {message_id}]")


def is_notice(message: Json) -> bool:
    """Whether ``message`` is one of Courier's own notices (no agent wrote it)."""
    return message.get("sender_id") == COURIER_SENDER or message.get("from") == COURIER_SENDER


def whole_length(message: Json) -> int:
    """The length of the message's whole body, also when the inbox cut it."""
    return int(message.get("body_chars") or len(message.get("body_md") or ""))


def seal(token: str, delivery_id: str) -> str:
    """The seal of a delivery's channel event: only holders of the agent's token can
    make it, so a peer's text cannot pass for a channel event in the transcript."""
    digest = hmac.new(token.encode(), f"courier-channel\n{delivery_id}".encode(),
                      hashlib.sha256).hexdigest()
    return digest[:SEAL_HEX]
