"""``courier watch --exec``: a user's command run for each wake message, for hosts
that have no hooks of their own (a tmux pane, a desktop notification, Codex).

Each ``wake`` message of the agent's live stream runs the command once, in
order: the message's Markdown body on stdin, its fields in the environment.
``quiet`` mail and everything else on the stream run nothing. With a state
file, the last event handled is written there before its command runs, and a
new ``watch`` resumes after it: a message is run at most once, even across
restarts (the inbox still holds it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from messaging.client import CourierClient, Event
from messaging.types import Json

# The message's fields, as the command's environment has them.
FIELDS = {"COURIER_MESSAGE_ID": "id", "COURIER_MESSAGE_FROM": "from",
          "COURIER_MESSAGE_SUBJECT": "subject", "COURIER_MESSAGE_THREAD_ID": "thread_id",
          "COURIER_MESSAGE_IMPORTANCE": "importance", "COURIER_DELIVERY_ID": "delivery_id"}


def _save(path: Path, event_id: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(event_id + "\n")
    os.replace(tmp, path)


def _environment(message: Json) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("COURIER_TOKEN", None)  # the command gets the message, not the agent's token
    for var, key in FIELDS.items():
        env[var] = "" if message.get(key) is None else str(message[key])
    return env


def _wakes(event: Event) -> Json | None:
    if event.event != "message" or not isinstance(event.data, dict):
        return None
    return event.data if event.data.get("wake") else None


def follow_with(client: CourierClient, command: str, state_file: Path | None,
                last_event_id: str | None, count: int | None) -> None:
    """Run ``command`` for each wake message of the stream, ``count`` times at most."""
    if state_file is not None and last_event_id is None and state_file.exists():
        last_event_id = state_file.read_text().strip() or None
    ran: set[str] = set()
    for event in client.events(last_event_id, reconnect=True):
        message = _wakes(event)
        if state_file is not None and event.id is not None:
            _save(state_file, event.id)
        if message is None or message.get("id") in ran:
            continue
        ran.add(str(message.get("id")))
        done = subprocess.run(command, shell=True, input=(message.get("body_md") or "").encode(),
                              env=_environment(message), check=False)
        if done.returncode != 0:
            sys.stderr.write(f"courier watch: the command exited {done.returncode} for "
                             f"{message.get('id')}\n")
        if count is not None and len(ran) >= count:
            return
