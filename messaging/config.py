"""Settings from the environment, prefix ``COURIER_`` (docs/http-api.md, Configuration)."""

from __future__ import annotations

import fcntl
import ipaddress
import os
import re
import secrets
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

OPERATOR_TOKEN_FILE = "operator-token"
EMBEDDED_URL_FILE = "store-url"
STORE_PASSWORD_FILE = "store-password"
# Held (flock) by the embedded server's process while it runs on the data dir.
STORE_LOCK_FILE = "store.lock"


def running_embedded_url(data_dir: Path) -> str | None:
    """The URL the embedded server running on ``data_dir`` wrote there (its port and
    password); None when no server holds the directory's lock (a file left by one
    killed is never believed) or it wrote none."""
    try:
        with open(data_dir / STORE_LOCK_FILE, "rb") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return (data_dir / EMBEDDED_URL_FILE).read_text().strip() or None
            fcntl.flock(lock, fcntl.LOCK_UN)
            return None
    except OSError:
        return None



# Store URLs: one server, a primary under Sentinel, or a Redis Cluster.
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
SENTINEL_SCHEME = "redis+sentinel"

class StoreUrlError(ValueError):
    """A store URL Courier cannot use (a cluster URL naming a database other than 0)."""


def is_cluster(url: str) -> bool:
    """True when ``url`` names a Redis Cluster."""
    return urlsplit(url).scheme.lower() in CLUSTER_SCHEMES


def node_url(url: str) -> str:
    """The plain ``redis://`` (or ``rediss://``) URL of a cluster URL's node; others as given.

    Raises:
        StoreUrlError: a cluster URL names a database other than 0.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in CLUSTER_SCHEMES:
        return url
    if parts.path.strip("/") not in ("", "0"):
        raise StoreUrlError(f"a Redis Cluster has database 0 only, not {parts.path.strip('/')!r}")
    return urlunsplit(parts._replace(scheme=CLUSTER_SCHEMES[scheme], path=""))


def is_sentinel(url: str) -> bool:
    """True when ``url`` names a primary by its Sentinels."""
    return urlsplit(url).scheme.lower() == SENTINEL_SCHEME


def sentinel_parts(url: str) -> tuple[list[tuple[str, int]], str, dict[str, Any]]:
    """The Sentinels' (host, port) pairs, the primary's name and the data nodes'
    connection options (password, database) of a ``redis+sentinel://`` URL.

    Raises:
        StoreUrlError: no Sentinel, or no primary's name.
    """
    parts = urlsplit(url)
    creds, _, hosts = parts.netloc.rpartition("@")
    user, _, password = creds.partition(":")
    sentinels = []
    for host in filter(None, hosts.split(",")):
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit():
            raise StoreUrlError(f"a Sentinel address is HOST:PORT, not {host!r}")
        sentinels.append((name.strip("[]"), int(port)))
    path = [p for p in parts.path.split("/") if p]
    if not sentinels or not path:
        raise StoreUrlError("a Sentinel URL names its Sentinels and the primary: "
                            "redis+sentinel://:PASSWORD@HOST:PORT,HOST:PORT/NAME")
    options: dict[str, Any] = {"db": int(path[1]) if len(path) > 1 else 0}
    if password:
        options["password"] = unquote(password)
    if user:
        options["username"] = unquote(user)
    return sentinels, path[0], options



def kombu_sentinel_url(url: str) -> str:
    """kombu's URL for the Sentinels of a ``redis+sentinel://`` URL: one
    ``sentinel://`` URL for each, ``;`` between them, each with the data nodes'
    credentials and database (kombu hands those to the primary, never to the
    Sentinels)."""
    sentinels, _, options = sentinel_parts(url)
    creds = ""
    if "password" in options or "username" in options:
        creds = (f"{quote(options.get('username', ''), safe='')}:"
                 f"{quote(options.get('password', ''), safe='')}@")
    hosts = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}" for host, port in sentinels]
    return ";".join(f"sentinel://{creds}{host}/{options['db']}" for host in hosts)


class Level(StrEnum):
    """The durability levels of ``COURIER_DURABILITY``, named by what they survive."""

    LOCAL = "local"
    FSYNC = "fsync"
    REPLICA = "replica"
    REPLICA_FSYNC = "replica-fsync"


class SettingsError(ValueError):
    """Settings that cannot work together (a cluster store with no broker of its own)."""


class OperatorTokenMissing(SettingsError):
    """A process that needs the operator token found none where it looked."""


CLUSTER_NEEDS_BROKER = (
    "the store is a Redis Cluster and Celery cannot use a cluster as its broker:"
    " set COURIER_BROKER_URL to a plain Redis or Valkey server (redis://host:6379/0)"
    " or to RabbitMQ (amqp://user:password@host:5672//)"
)


class KindPolicy(BaseModel):
    """An operator's deployment policy for one transport kind (unset: the kind's own)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int | None = Field(default=None, ge=1, le=64)
    prefetch: int | None = Field(default=None, ge=1, le=64)
    lease_s: float | None = Field(default=None, gt=0)
    retry_schedule_s: list[Annotated[float, Field(ge=0)]] | None = Field(default=None,
                                                                         max_length=100)
    in_flight_per_project: int | None = Field(default=None, ge=0)
    in_flight_per_endpoint: int | None = Field(default=None, ge=0)


class Settings(BaseSettings):
    """Everything Courier reads from its environment."""

    model_config = SettingsConfigDict(env_prefix="COURIER_", extra="ignore")

    redis_url: str | None = Field(default=None, description=(
        "The store: Redis 7+ or Valkey 8+ (`redis+cluster://` for a Redis Cluster). Unset:"
        " `courier up` runs the embedded Valkey server (the `agent-courier[embedded]` extra)."))
    broker_url: str | None = Field(default=None, description=(
        "The Celery broker: Redis, or `amqp://` for RabbitMQ. Unset: the store (a store"
        " named by its Sentinels, `redis+sentinel://`, is reached through kombu's sentinel"
        " transport, the primary followed across a failover)."))
    data_dir: Path = Field(default=Path(".courier"), description=(
        "The server's home: the embedded store's data, the generated operator token, beat's"
        " schedule, the archive. Owner only (0700, files 0600)."))
    host: str = Field(default="127.0.0.1", description="Where the API listens.")
    port: int = Field(default=8787, description="The API's port.")
    embedded_port: int = Field(default=6399, description=(
        "The embedded store's port (it listens on loopback only)."))
    flower_host: str = Field(default="127.0.0.1", description="Where Flower listens.")
    flower_port: int = Field(default=5555, description="Flower's port.")
    operator_token: str | None = Field(default=None, description=(
        "The operator token. Unset: the one `courier up` or `courier init` generated into"
        " `$COURIER_DATA_DIR/operator-token`. The CLI's operator commands read it too."))
    max_body_bytes: int = Field(default=1_048_576, ge=1, description=(
        "The largest `body_md`, in bytes."))
    webhook_allow: str = Field(default="127.0.0.0/8,::1", description=(
        "Hosts and networks webhooks may reach, comma separated."))
    webhook_timeout_s: float = Field(default=10.0, gt=0, description=(
        "One webhook request's deadline, for the whole exchange: connect, send the request,"
        " read the answer. Past it after sending, the outcome is `unknown`."))
    webhook_in_flight_per_project: int = Field(default=8, ge=0, description=(
        "Webhook requests of one project under way at once, across every worker (`0`: no"
        " cap); the rest wait their turn, so one slow receiver holds only its share of the"
        " webhook workers."))
    webhook_in_flight_per_endpoint: int = Field(default=4, ge=0, description=(
        "Webhook requests to one agent's endpoint under way at once, across every worker"
        " (`0`: no cap)."))
    webhook_retry_schedule_s: str = Field(default="1,5,30,300,1800", description=(
        "Waits between webhook attempts that failed before hand-off, comma separated."))
    rate_limit_per_s: float = Field(default=200.0, ge=0, description=(
        "Requests per second per token before 429 (`0`: no limit)."))
    durability: Level = Field(default=Level.LOCAL, description=(
        "How far an admission (and a recorded outcome) must reach before it is answered, "
        "named by what it survives: `local` the store's memory (its append-only file "
        "fsynced as the server is configured), `fsync` the primary's disk (WAITAOF 1 0), "
        "`replica` the primary's disk and the memory of `COURIER_DURABILITY_REPLICAS` "
        "replicas (WAIT N and WAITAOF 1 0: the death of either machine loses nothing "
        "answered), `replica-fsync` the primary's and the replicas' disks (WAITAOF 1 N); "
        "on a Redis Cluster, on the primary that holds the project and its replicas. "
        "Every level but `local` needs WAITAOF (Redis 7.2+, Valkey 8+)."))
    durability_replicas: int = Field(default=1, ge=1, description=(
        "Replicas a `replica` or `replica-fsync` write must reach."))
    durability_timeout_s: float = Field(default=5.0, gt=0, description=(
        "How long a write waits for its level before it is answered 503 "
        "`STORE_UNAVAILABLE` (it may have been stored: retry with its idempotency key)."))
    presence_ttl_s: float = Field(default=300.0, ge=0, description=(
        "How long a busy or idle report holds: past it, unless the host reports "
        "again, the agent's presence reads unknown (exited stays; 0: reports never "
        "run out)."))
    outbox_grace_s: float = Field(default=15.0, gt=0, description=(
        "How long a delivery may sit admitted before the sweeper publishes it again."))
    sweep_interval_s: float = Field(default=5.0, gt=0, description=(
        "How often beat runs the sweeper."))
    webhook_lease_margin_s: float = Field(default=15.0, gt=0, description=(
        "How long a webhook lease outlives its request's timeout, so a slow answer is still"
        " recorded by its own worker."))
    webhook_unhealthy_failures: int = Field(default=5, ge=1, description=(
        "Failures in a row after which a webhook endpoint is unhealthy (with"
        " `COURIER_WEBHOOK_UNHEALTHY_AFTER_S`): its deliveries wait, one probe at a time."))
    webhook_unhealthy_after_s: float = Field(default=60.0, ge=0, description=(
        "How long an endpoint must keep failing before it is unhealthy."))
    webhook_probe_interval_s: float = Field(default=30.0, gt=0, description=(
        "How often one attempt checks whether an unhealthy endpoint is back."))
    inbox_lease_s: float = Field(default=30.0, gt=0, description=(
        "How long a worker owns an inbox delivery before another may finish it."))
    search_lag_max_s: float = Field(default=60.0, gt=0, description=(
        "Search indexing waits while deliveries wait on the shared queues, but what was"
        " dispatched this long ago is indexed even then."))
    retention_days: float = Field(default=30.0, ge=0, description=(
        "Final messages idle this many days are archived and removed from the store"
        " (fractions allowed; `0` keeps everything)."))
    archive_dir: Path | None = Field(default=None, description=(
        "Where the archive goes. Unset: `$COURIER_DATA_DIR/archive`."))
    archive_keep_days: float = Field(default=0.0, ge=0, description=(
        "Archive days older than this many days are deleted by the retention round"
        " (`0`: the archive is kept for ever)."))
    retention_interval_s: float = Field(default=60.0, gt=0, description=(
        "How often beat runs the retention round."))
    log_tasks: bool = Field(default=False, description=(
        "One log line per Celery task and per HTTP request (off: warnings and errors, and"
        " what each process says at start and stop)."))
    log_format: Literal["text", "json"] = Field(default="text", description=(
        "`json`: every process writes one JSON object per line (`ts`, `level`, `process`,"
        " `event` and fields); `text`: each library's own format."))
    flower_max_tasks: int = Field(default=10_000, ge=100, description=(
        "Tasks Flower keeps in memory (about 6 KB each)."))
    worker_concurrency: int | None = Field(default=None, ge=1, le=64, description=(
        "Processes of each delivery worker (Celery's `-c`; `courier up --concurrency`)."
        " Unset: each transport kind's policy (`COURIER_TRANSPORT_POLICY`; 2 by default)."))
    transport_policy: dict[str, KindPolicy] = Field(default={}, description=(
        "Deployment policy per transport kind, as JSON: `{\"pager\": {\"concurrency\": 4,"
        " \"prefetch\": 1, \"lease_s\": 20, \"retry_schedule_s\": [1, 5]}}`; a field left"
        " out keeps the kind's default (docs/transports.md, Deployment policy)."
        " `COURIER_WORKER_CONCURRENCY` still wins over `concurrency`."))
    trusted_proxies: str = Field(default="", description=(
        "Addresses or networks of proxies whose `X-Forwarded-For` / `X-Forwarded-Proto` the"
        " API believes, comma separated. Unset: none; each connection's peer is the client."))
    api_processes: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=1, le=256,
                               description=(
        "API processes on the one port (`courier up`, the Procfile's `api`); default: the"
        " machine's cores."))
    max_connections_per_address: int = Field(default=256, ge=0, description=(
        "Connections open at once from one client address (every loopback address counts"
        " as one, an IPv6 address as its /64; a trusted proxy is not counted; `0`: no cap)."))
    max_pending_connections_per_address: int = Field(default=32, ge=0, description=(
        "Of those, connections waiting for the rest of a request's headers; past it the"
        " oldest is closed with 408 (`0`: no cap)."))
    store_max_memory: int = Field(
        default_factory=lambda: physical_memory_bytes() // 4, ge=0, description=(
            "The embedded store's memory limit: bytes, or a number with kb, mb, gb"
            " (1024-based); `0`: none. Unset: a quarter of the machine's memory. At the"
            " limit writes answer `STORE_FULL`."))
    render_budget_s: float = Field(default=1.0, gt=0, le=60, description=(
        "How long one message body may take to render as HTML before it is shown as"
        " escaped text."))
    render_processes: int = Field(default=1, ge=1, le=16, description=(
        "Processes of each API process that render message bodies."))

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies_parse(cls, value: str) -> str:
        for part in (p.strip() for p in value.split(",")):
            if part:
                ipaddress.ip_network(part, strict=False)  # ValueError: not an address or network
        return value

    @field_validator("store_max_memory", mode="before")
    @classmethod
    def _memory_parses(cls, value: object) -> object:
        return parse_bytes(value) if isinstance(value, str) else value

    @field_validator("webhook_retry_schedule_s")
    @classmethod
    def _schedule_parses(cls, value: str) -> str:
        parse_schedule(value)
        return value

    @property
    def store_url(self) -> str:
        """The store's URL: the configured one; else that of the embedded server running
        on the data directory; else the one it starts on."""
        if self.redis_url:
            return self.redis_url
        running = running_embedded_url(self.data_dir)
        if running:
            return running
        # The embedded server's password, generated into the data dir when it first started.
        password = self.data_dir / STORE_PASSWORD_FILE
        secret = password.read_text().strip() if password.exists() else ""
        return f"redis://:{secret}@127.0.0.1:{self.embedded_port}/0"

    @property
    def retention_s(self) -> float:
        """The retention period in seconds (0: keep everything)."""
        return self.retention_days * 86_400

    @property
    def archive_root(self) -> Path:
        """The archive's directory."""
        return self.archive_dir or self.data_dir / "archive"

    @property
    def celery_broker_url(self) -> str:
        """The broker's URL; the store's when unset. A ``redis+sentinel://`` URL (the
        store's, or one given for the broker) becomes kombu's sentinel transport's,
        ``sentinel://...;sentinel://...``, with ``broker_master_name``.

        Raises:
            SettingsError: the store is a Redis Cluster and no other broker is set,
                or the broker's URL names a cluster.
        """
        url = self.broker_url or self.store_url
        if is_cluster(url):
            raise SettingsError(CLUSTER_NEEDS_BROKER)
        if is_sentinel(url):
            return kombu_sentinel_url(url)
        return url

    @property
    def broker_master_name(self) -> str | None:
        """The primary's name when the broker is found by its Sentinels (kombu's
        ``master_name``); None for any other broker."""
        url = self.broker_url or self.store_url
        return sentinel_parts(url)[1] if is_sentinel(url) else None

    @property
    def embedded(self) -> bool:
        """True when Courier runs its own Valkey server."""
        return not self.redis_url

    @property
    def retry_schedule_s(self) -> list[float]:
        """Waits between attempts that failed before hand-off, in seconds."""
        return parse_schedule(self.webhook_retry_schedule_s)

    @property
    def webhook_networks(self) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network | str]:
        """The allow-list: networks, or host names matched exactly."""
        out: list[ipaddress.IPv4Network | ipaddress.IPv6Network | str] = []
        for item in filter(None, (part.strip() for part in self.webhook_allow.split(","))):
            try:
                out.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                out.append(item.lower())
        return out

    @property
    def trusted_proxy_list(self) -> list[str]:
        """``trusted_proxies`` as a list of addresses and networks."""
        return [part.strip() for part in self.trusted_proxies.split(",") if part.strip()]

    @property
    def operator_token_path(self) -> Path:
        """Where the server keeps a generated operator token."""
        return self.data_dir / OPERATOR_TOKEN_FILE

    def find_operator_token(self) -> str | None:
        """The operator token if configured or already in the data dir; never creates one."""
        if self.operator_token:
            return self.operator_token
        try:
            return self.operator_token_path.read_text().strip() or None
        except FileNotFoundError:
            return None

    def require_operator_token(self) -> str:
        """The operator token, configured or in the data dir; never creates one.

        Raises:
            OperatorTokenMissing: there is none, with where it was looked for.
        """
        found = self.find_operator_token()
        if found:
            return found
        raise OperatorTokenMissing(
            f"no operator token: COURIER_OPERATOR_TOKEN is unset and there is no "
            f"{self.operator_token_path.resolve()} (COURIER_DATA_DIR is {self.data_dir}). "
            "Point COURIER_DATA_DIR at the deployment's data directory, set "
            "COURIER_OPERATOR_TOKEN, or create the token with `courier init` (`courier up` "
            "creates it too)")

    def resolve_operator_token(self) -> str:
        """The deployment's operator token: configured, or generated once into the data dir.

        Only ``courier up`` and ``courier init`` call this: any other process
        that wrote a token would hold one the rest of the deployment does not.
        """
        found = self.find_operator_token()
        if found:
            return found
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        token = "cop_" + secrets.token_urlsafe(32)
        draft = self.data_dir / f".{OPERATOR_TOKEN_FILE}.{os.getpid()}"
        with os.fdopen(os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(token + "\n")
        try:
            # A hard link appears whole or not at all: of two processes starting
            # together, one writes the token and both read that one.
            os.link(draft, self.operator_token_path)
        except FileExistsError:
            return self.operator_token_path.read_text().strip()
        finally:
            draft.unlink()
        return token


BYTE_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "m": 1024**2, "mb": 1024**2,
              "g": 1024**3, "gb": 1024**3}


def parse_bytes(value: str) -> int:
    """Parse a size: ``536870912``, ``512mb``, ``2gb``, ``64k`` (1024-based, any case).

    Raises:
        ValueError: not a whole number with one of those units.
    """
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", value.lower())
    if match is None or match.group(2) not in BYTE_UNITS:
        raise ValueError(f"{value!r} is not a size: bytes, or a number with kb, mb or gb")
    return int(match.group(1)) * BYTE_UNITS[match.group(2)]


def physical_memory_bytes() -> int:
    """The machine's memory."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def parse_schedule(value: str) -> list[float]:
    """Parse a comma list of non-negative seconds.

    Raises:
        ValueError: an item is not a non-negative number.
    """
    out = [float(part) for part in value.split(",") if part.strip()]
    if any(wait < 0 for wait in out):
        raise ValueError("retry waits must be >= 0")
    return out


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read once."""
    return Settings()
