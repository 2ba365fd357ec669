"""The Lua scripts beside this module, each read once and run by EVALSHA.

A script may open with ``-- uses: lib_a, lib_b``: the text of those shared
files (functions only) is put before its own, so shared logic lives once.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any

USES_RE = re.compile(r"^-- uses: (?P<libs>[\w, ]+)$", re.MULTILINE)


@cache
def _text(name: str) -> str:
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_text()


def _libs(name: str, seen: list[str]) -> None:
    """Every shared file ``name`` needs, dependencies first."""
    match = USES_RE.search(_text(name))
    for lib in match.group("libs").replace(",", " ").split() if match else []:
        if lib not in seen:
            _libs(lib, seen)
            seen.append(lib)


@cache
def source(name: str) -> str:
    """The text of ``lua/<name>.lua``, after the shared files it uses."""
    libs: list[str] = []
    _libs(name, libs)
    return "\n".join([*(_text(lib) for lib in libs), _text(name)])


class Scripts:
    """Every script, registered on one client (sync or asyncio alike)."""

    def __init__(self, client: Any) -> None:
        def load(name: str) -> Any:
            return client.register_script(source(name))

        self.admit_message = load("admit_message")
        self.register_agent = load("register_agent")
        self.update_agent = load("update_agent")
        self.change_token = load("change_token")
        self.lease_deliveries = load("lease_deliveries")
        self.put_inbox = load("put_inbox")
        self.make_ready = load("make_ready")
        self.take_ready = load("take_ready")
        self.ring_next = load("ring_next")
        self.mark_handed_off = load("mark_handed_off")
        self.observe_deliveries = load("observe_deliveries")
        self.sweep_due = load("sweep_due")
        self.mark_message = load("mark_message")
        self.record_outcomes = load("record_outcomes")
        self.expire_lease = load("expire_lease")
        self.redrive = load("redrive")
        self.search_page = load("search_page")
        self.index_message = load("index_message")
        self.trim_index_queue = load("trim_index_queue")
        self.release_held = load("release_held")
        self.replace_project_token = load("replace_project_token")
