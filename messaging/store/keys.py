"""Every Redis key Courier uses, built here and nowhere else.

Project keys carry the hash tag ``{p:<project_id>}`` so that each Lua script
touches one cluster slot. ``:`` is the only separator.

Global (no project): single keys spread over a cluster by their own hash.
Only ring_next touches one (its ring, alone), so no script crosses cluster slots.
    courier:token:<sha256>                 hash   kind, project_id, agent_id        no TTL
    courier:project_key:<sha256(key)>      string project_id                         no TTL
    courier:projects                       set    every project id (sweeper's list) no TTL
    courier:ring:<queue>                   zset   projects with ready deliveries for one
                                                  delivery queue, by turn number      no TTL
    courier:lanes                          set    lane names given to projects        no TTL
    courier:sx:pending                     set    projects with dispatched messages waiting
                                                  to be indexed for search            no TTL
    courier:data_version                   string the layout version of the data in the
                                                  store (store/version.py); absent:
                                                  version 1, or a new store           no TTL
    courier:migration_lock                 string the process migrating the data forward
                                                                                 lock time
    courier:rate:operator                  string when the operator token's, or a client
    courier:rate:address:<sha256(address)>        address's (no valid token), request rate
                                                  bucket is full again (µs), shared by every
                                                  API process (rate_lib.lua)   until then

Per project, prefix ``courier:{p:<project_id>}``:
    :project                               hash   id, project_key, name, created_ts,
                                                  lane (absent: the shared queues),
                                                  token_hash (the live project token's
                                                  sha256; absent in projects made before
                                                  it was kept: any of their tokens)  no TTL
    :ready:<transport>                     zset   delivery ids waiting for a worker's
                                                  turn at this project, by sequence    no TTL
    :seq                                   string monotonic sequence (inbox scores)  no TTL
    :agents                                hash   agent_id -> agent JSON              no TTL
    :names                                 hash   name -> JSON list of agent ids      no TTL
    :refs                                  hash   ref -> agent_id                     no TTL
    :agent_token:<agent_id>                string the sha256 of the agent's live token
                                                  (gone once retired or closed); an
                                                  agent's courier:token record admits
                                                  only while this points at it         no TTL
    :msg:<message_id>                      string message JSON (immutable)            no TTL
    :thread:<thread_id>                    zset   message_id by sequence              no TTL
    :dlv:<delivery_id>                     hash   one delivery (schema.py)            no TTL
    :inbox:<agent_id>                      zset   delivery_id by sequence at arrival  no TTL
    :due                                   zset   delivery_id by due time (ms): the
                                                  outbox and the retry schedule       no TTL
    :in_flight                             zset   "<agent_id> <delivery_id>" of the requests
                                                  a capped transport (webhooks) has under
                                                  way, by slot end (ms; renewed while the
                                                  request runs): what its caps per
                                                  project and per endpoint count    slot
    :idem:<agent_id>:<op>:<sha256(key)>    string idempotency record JSON             7 days
    :stats                                 hash   counters for /metrics: outcome:<kind>,
                                                  observed, dispatch_ms_le:<bound>,
                                                  dispatch_ms_sum                     no TTL
    :events:<agent_id>                     stream one agent's live events (new mail,
                                                  idle notices, its sends' deliveries);
                                                  capped near EVENTS_MAXLEN entries    no TTL
    :streams:<agent_id>                    zset   the agent's open event streams: stream id
                                                  by lease end (ms), renewed while open  lease
    :sub:<subscription_id>                 hash   one idle subscription: subscriber,
                                                  target, state, outcome, the notice's
                                                  ids and prepared texts (subscriptions.py)
                                                  no TTL while waiting; SUBSCRIPTION_KEEP_S
                                                  after its notice
    :idle_subs                             hash   target agent_id -> JSON {subscription_id:
                                                  {s: subscriber, m: notice message id,
                                                  d: notice delivery id, t: notice thread}},
                                                  the subscriptions still waiting     no TTL
    :sub_due                               zset   waiting subscription ids by expiry (ms) no TTL
    :sx:project:<term>                     zset   search postings: the project's message ids
                                                  carrying the term, scored by search_score
                                                  (searchindex.py)                   no TTL
    :sx:<agent_id>:*                       zset   the message ids an agent sent or received,
                                                  same scores (a query of the agent is
                                                  intersected with it)               no TTL
    :sxt:project                           zset   the project's indexed words, all scored 0,
                                                  for prefix look-ups by lex range   no TTL
    :sxq                                   list   messages waiting to be indexed, oldest
                                                  first: "<ms> <message_id> <agent_id>..."
                                                  (the agents that see it: searchindex.py)
                                                                                     no TTL
    :sxq_claim                             string the indexer working through :sxq (it
                                                  saves duplicate work only)      claim time
    :retention                             zset   every stored message id by the time (ms)
                                                  the sweeper next looks at it: admission,
                                                  then the newest activity it saw       no TTL
    :archived:<bucket>                     hash   message or delivery id -> UTC day of its
                                                  archive file, for the ids removed in one
                                                  retention period (at most a day:
                                                  YYYY-MM-DD, or YYYY-MM-DDTHHMMSS from
                                                  its start) (410 ARCHIVED)    the retention
                                                  period after its last removal
    :retention_lock                        string the sweeper holding the project's
                                                  retention round                       lock time
    :allowed                               hash   authorized name -> JSON {name, expires_ms,
                                                  set_us}: names mail may wait for      no TTL
    :allowed_due                           zset   authorized names by expiry (ms)      no TTL
    :waiting:<sha256(name)>                zset   delivery ids waiting for the name's first
                                                  agent, by admission sequence         no TTL
    :held                                  zset   held delivery ids by admission sequence no TTL
    :rate:<sha256(token)>                  string when the request rate bucket of a project
                                                  or agent token is full again (µs): in the
                                                  project's slot, so a send's admission
                                                  spends from it in the same script
                                                  (rate_lib.lua)                  until then

Record fields (agent JSON, message and delivery hashes): ``schema.py``.
"""

from __future__ import annotations

import hashlib

PREFIX = "courier"
# The newest events an agent's stream keeps for resuming (approximate cap).
EVENTS_MAXLEN = 10_000
IDEMPOTENCY_TTL_S = 7 * 24 * 3600
# How long a subscription is kept after its notice: as long as the idempotency
# record of the message that may have made it, so a retried request finds it.
SUBSCRIPTION_KEEP_S = IDEMPOTENCY_TTL_S
PROJECTS = f"{PREFIX}:projects"
LANES = f"{PREFIX}:lanes"
SEARCH_PENDING = f"{PREFIX}:sx:pending"
DATA_VERSION = f"{PREFIX}:data_version"
MIGRATION_LOCK = f"{PREFIX}:migration_lock"
OPERATOR_RATE = f"{PREFIX}:rate:operator"


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


# Global keys (no project), each spread over a cluster by its own hash.
def token(token_hash: str) -> str:
    """Where a token's scope lives, by the token's hash."""
    return f"{PREFIX}:token:{token_hash}"


def token_rate(project_id: str, token_hash: str) -> str:
    """The request rate bucket of a project or agent token, by the token's hash."""
    return f"{_p(project_id)}:rate:{token_hash}"


def address_rate(address: str) -> str:
    """The request rate bucket of a client address without a valid token."""
    return f"{PREFIX}:rate:address:{_digest(address)}"


def project_by_key(project_key: str) -> str:
    """The project id of a checkout path."""
    return f"{PREFIX}:project_key:{_digest(project_key)}"


def ring(queue: str) -> str:
    """The projects with ready deliveries for one delivery queue, by turn."""
    return f"{PREFIX}:ring:{queue}"


# Every key of a project starts with ``courier:{p:<project_id>}``: the hash tag keeps
# them all on one cluster slot.
def _p(project_id: str) -> str:
    return f"{PREFIX}:{{p:{project_id}}}"


# One of each per project.
def project(project_id: str) -> str:
    """The project's own hash."""
    return f"{_p(project_id)}:project"


def seq(project_id: str) -> str:
    """The project's monotonic sequence."""
    return f"{_p(project_id)}:seq"


def agents(project_id: str) -> str:
    """All agents of the project, as JSON by id."""
    return f"{_p(project_id)}:agents"


def names(project_id: str) -> str:
    """Agent ids by name."""
    return f"{_p(project_id)}:names"


def refs(project_id: str) -> str:
    """Agent id by short ref."""
    return f"{_p(project_id)}:refs"


def due(project_id: str) -> str:
    """Deliveries by the time they are due for (re)publishing."""
    return f"{_p(project_id)}:due"


def in_flight(project_id: str) -> str:
    """The project's requests under way on transports with concurrency caps."""
    return f"{_p(project_id)}:in_flight"


def stats(project_id: str) -> str:
    """The project's delivery counters."""
    return f"{_p(project_id)}:stats"


def held(project_id: str) -> str:
    """Held deliveries of the project, oldest admission first."""
    return f"{_p(project_id)}:held"


def idle_subscriptions(project_id: str) -> str:
    """The waiting idle subscriptions of the project, by target agent."""
    return f"{_p(project_id)}:idle_subs"


def subscriptions_due(project_id: str) -> str:
    """Waiting idle subscriptions by the time they expire."""
    return f"{_p(project_id)}:sub_due"


def allowed_names(project_id: str) -> str:
    """Names authorized before any agent has them, with their expiry."""
    return f"{_p(project_id)}:allowed"


def allowed_due(project_id: str) -> str:
    """Authorized names by the time they run out."""
    return f"{_p(project_id)}:allowed_due"


def search_words(project_id: str) -> str:
    """Every word the project's messages hold, for prefix look-ups."""
    return f"{_p(project_id)}:sxt:project"


def search_queue(project_id: str) -> str:
    """Dispatched messages waiting to be indexed, oldest first."""
    return f"{_p(project_id)}:sxq"


def search_claim(project_id: str) -> str:
    """Which indexer is working through the project's search queue."""
    return f"{_p(project_id)}:sxq_claim"


def retention(project_id: str) -> str:
    """Every stored message of the project, by when the sweeper next looks at it."""
    return f"{_p(project_id)}:retention"


def retention_lock(project_id: str) -> str:
    """The lock of the project's retention round."""
    return f"{_p(project_id)}:retention_lock"


# One per agent, message, delivery, name or other part of the project.
def inbox(project_id: str, agent_id: str) -> str:
    """One agent's inbox."""
    return f"{_p(project_id)}:inbox:{agent_id}"


def events(project_id: str, agent_id: str) -> str:
    """One agent's event stream."""
    return f"{_p(project_id)}:events:{agent_id}"


def agent_token(project_id: str, agent_id: str) -> str:
    """The hash of an agent's live token (what revoking and rotating remove)."""
    return f"{_p(project_id)}:agent_token:{agent_id}"


def open_streams(project_id: str, agent_id: str) -> str:
    """The leases of one agent's open event streams."""
    return f"{_p(project_id)}:streams:{agent_id}"


def search_seen(project_id: str, agent_id: str) -> str:
    """The messages an agent may find: those it sent or received."""
    return f"{_p(project_id)}:sx:{agent_id}:*"


def message(project_id: str, message_id: str) -> str:
    """One message's JSON."""
    return f"{_p(project_id)}:msg:{message_id}"


def thread(project_id: str, thread_id: str) -> str:
    """The messages of one thread."""
    return f"{_p(project_id)}:thread:{thread_id}"


def delivery(project_id: str, delivery_id: str) -> str:
    """One delivery's hash."""
    return f"{_p(project_id)}:dlv:{delivery_id}"


def subscription(project_id: str, subscription_id: str) -> str:
    """One idle subscription's hash."""
    return f"{_p(project_id)}:sub:{subscription_id}"


def waiting(project_id: str, name: str) -> str:
    """Deliveries waiting for the first agent of a name; the name is hashed."""
    return f"{_p(project_id)}:waiting:{_digest(name)}"


def ready(project_id: str, transport: str) -> str:
    """The project's deliveries of one transport waiting for their turn."""
    return f"{_p(project_id)}:ready:{transport}"


def open_turn(project_id: str, transport: str) -> str:
    """Present while a worker's turn at the project holds its emptied ready set open
    for new mail (milliseconds, ``take_ready.lua``): what joins rides on that turn."""
    return f"{_p(project_id)}:turn:{transport}"


def search_postings(project_id: str, term: str) -> str:
    """The project's messages that carry one search term."""
    return f"{_p(project_id)}:sx:project:{term}"


def archived(project_id: str, bucket: str) -> str:
    """The ids removed in one stretch of time (``retention.archived_buckets``), each
    with its archive day."""
    return f"{_p(project_id)}:archived:{bucket}"


def idempotency(project_id: str, agent_id: str, operation: str, key: str) -> str:
    """One idempotency record; the client's key is hashed, never used raw."""
    return f"{_p(project_id)}:idem:{agent_id}:{operation}:{_digest(key)}"



# The keys a Lua script may derive itself, from the project's prefix and the
# parts named here, instead of being given them in KEYS: each is in the same
# slot as every other key of its project (the hash tag), so a script given one
# key of the project may touch it on a cluster as well. ``lua_library`` spells
# them for Lua from the functions above: the two cannot drift.
DERIVED = ("delivery", "message", "inbox", "events", "thread")
_PROJECT_MARK = "\x00project\x00"


def lua_library() -> str:
    """``keyspace_lib``: the Lua functions naming the keys of ``DERIVED``.

    ``project_prefix(key)`` is the project's prefix in one of its keys;
    ``keyspace.<name>(prefix, ...)`` the key ``<name>(project_id, ...)`` of this
    module names, its parts after the project's id given in the same order.
    """
    lines = [
        "-- keyspace_lib: built from messaging/store/keys.py when the scripts are",
        "-- registered (scripts.py). A key of a project, from that project's prefix.",
        "local keyspace = {}",
        "local function project_prefix(key)",
        f"  return string.match(key, \"^({_lua_pattern(_p('')[:-1])}[^}}]*}})\")",
        "end",
    ]
    for name in DERIVED:
        lines += _lua_function(name)
    return "\n".join(lines) + "\n"


def _lua_function(name: str) -> list[str]:
    """One key function of this module as a Lua function of the project's prefix."""
    build = globals()[name]
    params = list(build.__code__.co_varnames[1:build.__code__.co_argcount])
    marks = [f"\x00{param}\x00" for param in params]
    text = build(_PROJECT_MARK, *marks)
    prefix = _p(_PROJECT_MARK)
    if not text.startswith(prefix):
        raise ValueError(f"keys.{name} is not a key of a project")
    parts = ["prefix"]
    rest = text[len(prefix):]
    for param, mark in zip(params, marks, strict=True):
        before, found, rest = rest.partition(mark)
        if not found:  # a part that is digested, or not in the key at all
            raise ValueError(f"keys.{name} does not spell {param} in its key")
        parts += [_lua_string(before), param] if before else [param]
    if rest:
        parts.append(_lua_string(rest))
    return [f"function keyspace.{name}({', '.join(['prefix', *params])})",
            f"  return {' .. '.join(parts)}",
            "end"]


def _lua_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _lua_pattern(text: str) -> str:
    """``text`` matched literally by a Lua pattern."""
    return "".join(f"%{c}" if not c.isalnum() else c for c in text)
