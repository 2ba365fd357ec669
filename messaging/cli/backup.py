"""``courier backup`` and ``courier restore``: the data dir and the store, kept and put back."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from messaging.config import Settings, get_settings
from messaging.launch import backup as backups
from messaging.store.connect import STORE_DOWN
from messaging.store.version import DataVersionError

# Exit codes of the CLI: 1 other error, 6 server unreachable or unavailable.
EXIT_ERROR = 1
EXIT_UNREACHABLE = 6

AsJson = Annotated[bool, typer.Option("--json", help="print the backup's manifest as JSON")]


def _fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(code)


def _run(step: Callable[[Settings, Path], dict[str, Any]], path: Path) -> dict[str, Any]:
    """Run a backup or restore step; its manifest, or a clear error and exit code."""
    try:
        return step(get_settings(), path)
    except (backups.BackupError, DataVersionError, OSError) as exc:
        _fail(str(exc))
    except STORE_DOWN as exc:
        _fail(f"the store did not answer: {exc}", EXIT_UNREACHABLE)


def _show(manifest: dict[str, Any], as_json: bool, what: str) -> None:
    if as_json:
        print(json.dumps(manifest, indent=2))
        return
    print(f"{what}: data version {manifest['data_version']}, taken"
          f" {manifest['taken_ts']} by Courier {manifest['courier_version']},"
          f" store snapshot {manifest['store_bytes']} bytes,"
          f" {manifest['archive_files']} archive files")


def backup(
    dest: Annotated[Path, typer.Argument(help="a new (or empty) directory, or a new DEST.tar.gz")],
    as_json: AsJson = False,
) -> None:
    """Back up the running deployment: one snapshot of the store, the archive, the
    operator token file and the data version (reads COURIER_DATA_DIR and the store's URL)."""
    manifest = _run(backups.backup, dest)
    _show(manifest, as_json, f"backup written to {dest}")


def restore(
    src: Annotated[Path, typer.Argument(help="a directory or .tar.gz written by `courier backup`")],
    as_json: AsJson = False,
) -> None:
    """Fill an empty data directory (COURIER_DATA_DIR) from a backup; with COURIER_REDIS_URL,
    the empty store it names too. Start Courier on it afterwards."""
    manifest = _run(backups.restore, src)
    _show(manifest, as_json, f"restored {get_settings().data_dir.resolve()} from {src}")
