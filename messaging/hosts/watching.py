"""``courier watch --exec``: a user's command run for each wake message, for hosts
that have no hooks of their own (a tmux pane, a desktop notification, Codex).

Each ``wake`` message of the agent's live stream runs the command once, in
order: the message's Markdown body on stdin, its fields in the environment.
``quiet`` mail and everything else on the stream run nothing. With a state
file, the last event handled is written there before its command runs, and a
new ``watch`` resumes after it: a message is run at most once, even across
restarts (the inbox still holds it).

A field goes into the environment as ``courier`` prints it (``visible``): a
control, format or separator character (a NUL, ESC, Ctrl-U, C1, DEL, a bidi
override) becomes its escape (``\\x00``), so the value is one line of printable
text that an environment can hold and a terminal cannot act on, and it is cut
at ``FIELD_MAX_CHARS``. A message whose command still cannot be started is
said on stderr and skipped, after the state file has recorded it: the watcher
never stops on a message.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from messaging.cli.io import visible
from messaging.client import CourierClient, Event
from messaging.types import Json

# The message's fields, as the command's environment has them.
FIELDS = {"COURIER_MESSAGE_ID": "id", "COURIER_MESSAGE_FROM": "from",
          "COURIER_MESSAGE_SUBJECT": "subject", "COURIER_MESSAGE_THREAD_ID": "thread_id",
          "COURIER_MESSAGE_IMPORTANCE": "importance", "COURIER_DELIVERY_ID": "delivery_id"}
# A field's value in the environment is cut at this many characters (escapes
# counted): the server's fields are shorter (a subject is at most 200), so only
# a field escaped many times over, or an older server's, is ever cut.
FIELD_MAX_CHARS = 1024


def _save(path: Path, event_id: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(event_id + "\n")
    os.replace(tmp, path)


def field_value(value: object) -> str:
    """A message's field as the command's environment has it: escaped, one line, cut."""
    return "" if value is None else visible(value)[:FIELD_MAX_CHARS]


def environment(message: Json) -> tuple[dict[str, str], list[str]]:
    """The command's environment for ``message``, and the variables whose value
    differs from the field's (escaped or cut)."""
    env = dict(os.environ)
    env.pop("COURIER_TOKEN", None)  # the command gets the message, not the agent's token
    changed = []
    for var, key in FIELDS.items():
        env[var] = field_value(message.get(key))
        if message.get(key) is not None and env[var] != str(message[key]):
            changed.append(var)
    return env, changed


def _wakes(event: Event) -> Json | None:
    if event.event != "message" or not isinstance(event.data, dict):
        return None
    return event.data if event.data.get("wake") else None


def _run(command: str, message: Json) -> None:
    """Run ``command`` for ``message``; whatever goes wrong is said on stderr."""
    mid = field_value(message.get("id"))
    env, changed = environment(message)
    if changed:
        sys.stderr.write(f"courier watch: {mid}: {', '.join(changed)} escaped or cut "
                         "(control characters, or too long)\n")
    # A body is bytes on stdin: a NUL passes; a lone surrogate, which UTF-8 cannot
    # hold, becomes "?".
    body = str(message.get("body_md") or "").encode("utf-8", "replace")
    try:
        done = subprocess.run(command, shell=True, input=body, env=env, check=False)
    except (OSError, ValueError) as e:  # the command could not be started with it
        sys.stderr.write(f"courier watch: {mid} skipped: the command could not be run "
                         f"({visible(e)})\n")
        return
    if done.returncode != 0:
        sys.stderr.write(f"courier watch: the command exited {done.returncode} for {mid}\n")


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
        _run(command, message)
        if count is not None and len(ran) >= count:
            return
