"""What every ``courier`` command shares: its options, calling the API, exit codes,
and printing text from agents so that it can never drive the terminal.

Exit codes: 0 ok, 1 any other error (a send the API refused for its
recipients' state, a server error), 2 usage (the command line, or an argument
the API found invalid), 3 not authenticated or forbidden, 4 not found (an
unknown recipient included), 5 conflict, 6 server unreachable or unavailable
(rate limited included: try again later).
"""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from messaging.client import CourierAPIError, CourierClient, CourierUnreachable
from messaging.config import get_settings


class Exit(IntEnum):
    """The exit codes of ``courier``."""

    OK = 0
    ERROR = 1
    USAGE = 2
    DENIED = 3
    NOT_FOUND = 4
    CONFLICT = 5
    UNAVAILABLE = 6


# An API error to the exit code that says the same: by its code, else by its status.
CODE_EXITS = {"INVALID_ARGUMENT": Exit.USAGE, "RESOURCE_NOTICE_INVALID": Exit.USAGE,
              "RECIPIENT_NOT_FOUND": Exit.NOT_FOUND}
STATUS_EXITS = {400: Exit.USAGE, 401: Exit.DENIED, 403: Exit.DENIED, 404: Exit.NOT_FOUND,
                408: Exit.UNAVAILABLE, 409: Exit.CONFLICT, 410: Exit.NOT_FOUND, 413: Exit.USAGE,
                429: Exit.UNAVAILABLE, 502: Exit.UNAVAILABLE, 503: Exit.UNAVAILABLE,
                504: Exit.UNAVAILABLE}


def exit_code(e: CourierAPIError) -> Exit:
    """The exit code for an error answer of the API."""
    return CODE_EXITS.get(e.code) or STATUS_EXITS.get(e.status, Exit.ERROR)

# Everything is printed as plain text: no Rich markup, highlighting or emoji
# codes are read from what agents wrote. Lines are never broken by Rich: a
# token or id split over two lines cannot be copied.
out = Console(soft_wrap=True, markup=False, highlight=False, emoji=False)
err = Console(stderr=True, soft_wrap=True, markup=False, highlight=False, emoji=False)

Url = Annotated[str | None, typer.Option("--url", envvar="COURIER_URL",
                                         help="API URL [default: from COURIER_HOST/PORT]")]
Token = Annotated[str | None, typer.Option("--token", envvar="COURIER_TOKEN",
                                           help="bearer token (project or agent)")]
AsJson = Annotated[bool, typer.Option(
    "--json", help="print the API's answer object as it is (errors too, on stdout)")]
OperatorToken = Annotated[str | None, typer.Option(
    "--token", envvar="COURIER_OPERATOR_TOKEN",
    help="operator token [default: the operator-token file in COURIER_DATA_DIR]")]
# Ids on the command line: Courier's ids (and thread ids) are 1-128 of these.
# Anything else is a usage error, answered before any request is made.
ID_RE = re.compile(r"[A-Za-z0-9._-]{1,128}")


def _an_id(value: str) -> str:
    if not ID_RE.fullmatch(value):
        raise typer.BadParameter(f"{visible(value)} is not an id "
                                 "(1-128 of A-Z a-z 0-9 . _ -)")
    return value


ProjectId = Annotated[str, typer.Argument(help="the project id (prj_...)", callback=_an_id)]
MessageId = Annotated[str, typer.Argument(help="the message id (msg_...)", callback=_an_id)]
DeliveryId = Annotated[str, typer.Argument(help="the delivery id (dlv_...)", callback=_an_id)]
ThreadId = Annotated[str, typer.Argument(help="the thread id", callback=_an_id)]
# A paged listing's options: how many per page, and where the last page ended.
PageLimit = Annotated[int, typer.Option(min=1, max=500)]
Cursor = Annotated[str | None, typer.Option(help="a next_cursor from before")]

# Characters shown as escapes: controls (C0, DEL, C1), format characters such
# as bidirectional overrides and zero-width spaces (the zero-width joiner of
# emoji sequences aside), line and paragraph separators, lone surrogates.
_HIDDEN_CATEGORIES = {"Cc", "Cf", "Zl", "Zp", "Cs"}
_KEPT = {"\u200d"}
_MULTILINE_KEPT = {"\n", "\t"}


def _escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _hidden(ch: str) -> bool:
    return ch not in _KEPT and unicodedata.category(ch) in _HIDDEN_CATEGORIES


def visible(text: object, multiline: bool = False) -> str:
    """``text`` safe for a terminal: every control or format character shown as its
    escape (ESC as ``\\x1b``); a multi-line text keeps its newlines and tabs."""
    value = "" if text is None else str(text)
    kept = _MULTILINE_KEPT if multiline else set()
    return "".join(_escape(ch) if ch not in kept and _hidden(ch) else ch for ch in value)


def _json_escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xd800 + (code >> 10):04x}\\u{0xdc00 + (code & 0x3ff):04x}"


def json_text(data: Any, one_line: bool = False) -> str:
    """``data`` as JSON that holds no raw control or format character: JSON is
    ASCII outside its strings, and inside one a ``\\u`` escape is the same
    character."""
    text = json.dumps(data, ensure_ascii=False, indent=None if one_line else 2)
    if text.isascii():
        return text  # json.dumps escaped the ASCII controls already
    return "".join(_json_escape(ch) if ch != "\n" and _hidden(ch) else ch for ch in text)


def print_json(data: Any) -> None:
    """Print an answer object as JSON."""
    sys.stdout.write(json_text(data) + "\n")
    sys.stdout.flush()


def say(*parts: object) -> None:
    """Print one line of our own words (ids, times, counts): nothing is escaped."""
    out.print(" ".join(str(p) for p in parts))


def fail(message: str, code: Exit = Exit.ERROR) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code``."""
    err.print(Text("error: ", style="red") + Text(message))
    raise typer.Exit(int(code))


def api_url(url: str | None) -> str:
    """The API's URL: given, or where this machine's settings put the server."""
    if url:
        return url
    s = get_settings()
    return f"http://{s.host}:{s.port}"


def refused(e: CourierAPIError, as_json: bool, hint: str = "") -> NoReturn:
    """Report an error answer of the API (its object on stdout with ``--json``)."""
    if as_json:
        print_json(e.body)
    details = f"\n{json_text(e.details)}" if e.details else ""
    fail(visible(f"{e}{details}", multiline=True) + hint, exit_code(e))


def unreachable(url: str | None, e: Exception) -> NoReturn:
    """Report a server that did not answer."""
    fail(f"cannot reach {api_url(url)}: {e}", Exit.UNAVAILABLE)


def call(url: str | None, token: str | None, fn: Callable[..., Any], *args: Any,
         as_json: bool = False, **kwargs: Any) -> Any:
    """``fn(client, *args, **kwargs)`` with a client of ``token``; an error exits
    with its code."""
    if not token:
        fail("no token: pass --token or set COURIER_TOKEN", Exit.DENIED)
    with CourierClient(api_url(url), token) as client:
        try:
            return fn(client, *args, **kwargs)
        except CourierAPIError as e:
            refused(e, as_json)
        except (CourierUnreachable, OSError) as e:
            unreachable(url, e)


def answer(url: str | None, token: str | None, as_json: bool, fn: Callable[..., Any],
           *args: Any, show: Callable[[Any], None], **kwargs: Any) -> None:
    """Call the API (as ``call``) and print its answer: as JSON with ``--json``, else
    by ``show``."""
    value = call(url, token, fn, *args, as_json=as_json, **kwargs)
    if as_json:
        print_json(value)
    else:
        show(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]],
          whole: Sequence[int] = ()) -> Table:
    """A table of untrusted cells, shown safely; the columns in ``whole`` (ids,
    times) are never cut or wrapped, however narrow the terminal."""
    cells = [[visible(cell) for cell in row] for row in rows]
    t = Table(*headers)
    for i in whole:
        t.columns[i].no_wrap = True
        t.columns[i].min_width = max([len(headers[i]), *(len(row[i]) for row in cells)])
    for i, column in enumerate(t.columns):
        if i not in whole:
            column.overflow = "fold"
    for row in cells:
        t.add_row(*(Text(cell) for cell in row))
    return t
