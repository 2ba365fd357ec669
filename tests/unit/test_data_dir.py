"""The data dir `courier up` and `courier init` create is their owner's alone."""

from __future__ import annotations

import os
from pathlib import Path

from messaging.config import Settings


def test_the_operator_token_s_data_dir_is_created_owner_only(tmp_path: Path) -> None:
    previous = os.umask(0o022)  # a usual shell's
    try:
        settings = Settings(data_dir=tmp_path / "fresh" / "data", operator_token=None)
        settings.resolve_operator_token()
    finally:
        os.umask(previous)
    assert (tmp_path / "fresh" / "data").stat().st_mode & 0o777 == 0o700
    assert settings.operator_token_path.stat().st_mode & 0o777 == 0o600
