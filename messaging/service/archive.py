"""The archive: gzip JSON lines, one file per project and UTC day of admission.

``<archive dir>/<project_id>/<YYYY-MM-DD>.jsonl.gz``; each line is one message
as its sender sees it, with ``deliveries`` (each with its stages and attempts)
and ``archived_ts``. A round appends one gzip member per file and flushes it
to disk before anything is removed from the store. A round that stopped
between the two writes the same message again next time: readers keep the
last line of each message id.

Files and directories are their owner's alone (0600, 0700). With
``COURIER_ARCHIVE_KEEP_DAYS`` set, the retention round deletes the files of
days that ended more than that long ago (``expire``); unset or ``0`` keeps
them all.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from messaging.types import Json

SUFFIX = ".jsonl.gz"
SECONDS_PER_DAY = 86_400
DAY_FORMAT = "%Y-%m-%d"
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_PROJECT = re.compile(r"^prj_[0-9a-f]+$")


def day_of(us: int) -> str:
    """The UTC day (``YYYY-MM-DD``) of a time in microseconds."""
    return datetime.fromtimestamp(us / 1_000_000, tz=UTC).strftime(DAY_FORMAT)


def path(root: Path, project_id: str, day: str) -> Path:
    """The archive file of one project and day.

    Raises:
        ValueError: the project id or the day is malformed.
    """
    if not _PROJECT.match(project_id):
        raise ValueError(f"not a project id: {project_id!r}")
    if not _DAY.match(day):
        raise ValueError(f"not a day (YYYY-MM-DD): {day!r}")
    return root / project_id / f"{day}{SUFFIX}"


def append(root: Path, project_id: str, day: str, lines: Iterable[Json]) -> Path:
    """Append lines to one day's file as a gzip member, and flush them to disk."""
    target = path(root, project_id, day)
    for folder in (root, target.parent):
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = b"".join(json.dumps(line, ensure_ascii=False).encode() + b"\n" for line in lines)
    with os.fdopen(os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb") as gz:
            gz.write(data)
        raw.flush()
        os.fsync(raw.fileno())
    return target


def read(root: Path, project_id: str, day: str) -> list[Json]:
    """The messages archived in one day's file, the last line of each id, oldest first.

    Raises:
        FileNotFoundError: nothing was archived for that project and day.
        ValueError: the project id or the day is malformed.
    """
    kept: dict[str, Json] = {}
    with gzip.open(path(root, project_id, day), "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                item = json.loads(line)
                kept.pop(item["id"], None)
                kept[item["id"]] = item
    return sorted(kept.values(), key=lambda m: str(m.get("created_ts")))


def days(root: Path, project_id: str) -> list[str]:
    """The days that have an archive file for the project, oldest first."""
    folder = root / project_id
    if not folder.is_dir():
        return []
    return sorted(p.name.removesuffix(SUFFIX) for p in folder.glob(f"*{SUFFIX}"))


def expire(root: Path, keep_days: float, now_s: float) -> list[Path]:
    """Delete every project's day files of days that ended more than ``keep_days`` ago;
    the files deleted. ``keep_days`` 0 keeps everything."""
    if keep_days <= 0 or not root.is_dir():
        return []
    oldest_kept = datetime.fromtimestamp(now_s - keep_days * SECONDS_PER_DAY,
                                         tz=UTC).strftime(DAY_FORMAT)
    gone = []
    for folder in sorted(p for p in root.iterdir() if _PROJECT.match(p.name) and p.is_dir()):
        for day in days(root, folder.name):
            if _DAY.match(day) and day < oldest_kept:
                target = folder / f"{day}{SUFFIX}"
                target.unlink(missing_ok=True)
                gone.append(target)
    return gone


def size_bytes(top: Path) -> int:
    """The bytes of every file under ``top`` (0 when it does not exist)."""
    total = 0
    for folder, _, names in os.walk(top):
        for name in names:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except FileNotFoundError:  # removed while we walked
                continue
    return total
