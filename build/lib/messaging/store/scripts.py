"""The Lua scripts beside this module, each read once and run by EVALSHA."""

from __future__ import annotations

from importlib import resources
from typing import Any


def source(name: str) -> str:
    """The text of ``lua/<name>.lua``."""
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_text()


class Scripts:
    """Every script, registered on one client (sync or asyncio alike)."""

    def __init__(self, client: Any) -> None:
        def load(name: str) -> Any:
            return client.register_script(source(name))

        self.admit_message = load("admit_message")
        self.register_agent = load("register_agent")
        self.update_agent = load("update_agent")
        self.lease_deliveries = load("lease_deliveries")
        self.put_inbox = load("put_inbox")
        self.mark_handed_off = load("mark_handed_off")
        self.observe_deliveries = load("observe_deliveries")
        self.sweep_due = load("sweep_due")
        self.mark_message = load("mark_message")
        self.record_outcomes = load("record_outcomes")
        self.expire_lease = load("expire_lease")
        self.redrive = load("redrive")
        self.search_page = load("search_page")
