"""``courier hook codex|gemini|cursor``: presence from the hosts that say when a
turn ends, so that an agent in them goes ``idle`` (and its idle notices fire)
without the model calling ``set_presence``.

Each host runs the command at its own events, as its documentation describes
them, and the command reports the agent's presence with the agent's token
(``COURIER_TOKEN``):

- Codex: its ``notify`` program, run with one more argument, the JSON of the
  notification; ``agent-turn-complete`` (the only one it sends) is ``idle``.
  Codex closes the program's stdin and drops its output.
- Gemini CLI: its hooks (``settings.json``), the event's JSON on stdin and the
  answer's JSON on stdout: ``SessionStart`` is ``idle`` (the session is open,
  waiting for its user), ``BeforeAgent`` ``busy``, ``AfterAgent`` ``idle``,
  ``SessionEnd`` ``exited`` (but for ``clear``, where a new session follows).
- Cursor: its hooks (``hooks.json``), the same protocol: ``sessionStart``
  ``idle``, ``beforeSubmitPrompt`` ``busy``, ``stop`` ``idle`` (the agent loop
  ended, whatever its status), ``sessionEnd`` ``exited``.

The command carries no mail in: ``courier mcp`` or ``courier watch --exec``
does that. It never holds the host up: past ``HOOK_DEADLINE_S`` it gives up,
and whatever happens it answers what lets the host go on (Gemini CLI and
Cursor read JSON on stdout: ``{}``, or ``{"continue": true}`` where Cursor
asks whether to go on), says on stderr why it did nothing, and exits 0.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from enum import StrEnum

from messaging.client import CourierAPIError, CourierClient, CourierUnreachable
from messaging.hosts.bounds import HOOK_DEADLINE_S, HookError, bounded
from messaging.types import Json


class TurnHost(StrEnum):
    """Hosts whose documented events say when a turn starts and ends."""

    CODEX = "codex"
    GEMINI = "gemini"
    CURSOR = "cursor"


@dataclass(frozen=True)
class Protocol:
    """What one host sends and expects back."""

    event_field: str  # the payload's field naming its event
    presence: dict[str, str]  # event -> presence it reports
    answers: dict[str, Json]  # event -> the answer that lets the host go on (else ``{}``)
    prints: bool  # whether the host reads an answer on stdout at all


PROTOCOLS = {
    TurnHost.CODEX: Protocol("type", {"agent-turn-complete": "idle"}, {}, prints=False),
    TurnHost.GEMINI: Protocol("hook_event_name", {
        "SessionStart": "idle", "BeforeAgent": "busy", "AfterAgent": "idle",
        "SessionEnd": "exited"}, {}, prints=True),
    TurnHost.CURSOR: Protocol("hook_event_name", {
        "sessionStart": "idle", "beforeSubmitPrompt": "busy", "stop": "idle",
        "sessionEnd": "exited"}, {"beforeSubmitPrompt": {"continue": True}}, prints=True),
}


def event_of(host: TurnHost, payload: str) -> Json:
    """The host's event, decoded.

    Raises:
        HookError: the payload is not a JSON object.
    """
    try:
        event = json.loads(payload)
    except ValueError:
        raise HookError(f"the {host.value} event is not JSON") from None
    if not isinstance(event, dict):
        raise HookError(f"the {host.value} event is not a JSON object")
    return event


def presence_for(host: TurnHost, event: Json) -> str | None:
    """The presence ``event`` reports, or None when it says nothing of one."""
    name = str(event.get(PROTOCOLS[host].event_field) or "")
    if host is TurnHost.GEMINI and name == "SessionEnd" and event.get("reason") == "clear":
        return None  # /clear ends one session and starts the next at once
    return PROTOCOLS[host].presence.get(name)


def answer_for(host: TurnHost, event: Json | None) -> Json | None:
    """What the host reads on stdout for ``event`` (None: it reads nothing)."""
    protocol = PROTOCOLS[host]
    if not protocol.prints:
        return None
    name = str((event or {}).get(protocol.event_field) or "")
    return protocol.answers.get(name, {})


def report(host: TurnHost, url: str, token: str | None, payload: str) -> None:
    """Report the presence the event on ``payload`` gives, if any.

    Raises:
        HookError: why nothing was reported.
    """
    if not token:
        raise HookError("no token: set COURIER_TOKEN to the agent's token")
    state = presence_for(host, event_of(host, payload))
    if state is None:
        return
    try:
        with CourierClient(url, token, timeout_s=HOOK_DEADLINE_S) as api:
            api.set_presence(state)
    except CourierAPIError as e:
        raise HookError(f"Courier refused: {e}") from None
    except CourierUnreachable as e:
        raise HookError(f"Courier at {url} did not answer: {type(e.__cause__).__name__}") \
            from None


def main(host: TurnHost, url: str, token: str | None, payload: str | None) -> int:
    """Run the hook for one event of ``host``; print the host's answer. Always 0."""
    if payload is None:
        why: str | None = f"no {host.value} event was given"
    else:
        why = bounded(lambda: report(host, url, token, payload), HOOK_DEADLINE_S, url)
    try:
        event = event_of(host, payload) if payload is not None else None
    except HookError:
        event = None
    answer = answer_for(host, event)
    if answer is not None:
        sys.stdout.write(json.dumps(answer) + "\n")
    if why is not None:
        sys.stderr.write(f"courier hook {host.value}: {why}; the session goes on without "
                         "Courier\n")
    sys.stdout.flush()
    sys.stderr.flush()
    return 0
