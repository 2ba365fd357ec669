"""Sizes in settings: bytes or a number with a unit; the store's limit defaults to a quarter."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from messaging.config import Settings, parse_bytes, physical_memory_bytes


@pytest.mark.parametrize(("text", "size"), [
    ("536870912", 536_870_912), ("512mb", 512 * 2**20), ("512MB", 512 * 2**20),
    ("8m", 8 * 2**20), ("2gb", 2 * 2**30), ("64kb", 64 * 1024), ("100b", 100), ("0", 0),
    (" 1 GB ", 2**30),
])
def test_sizes_parse_in_bytes_and_1024_based_units(text: str, size: int):
    assert parse_bytes(text) == size


@pytest.mark.parametrize("text", ["", "mb", "1.5gb", "-1", "12 parsecs", "1tb"])
def test_other_sizes_are_refused_naming_the_value(text: str):
    with pytest.raises(ValueError, match="is not a size"):
        parse_bytes(text)


def test_the_store_limit_defaults_to_a_quarter_of_the_machine(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("COURIER_STORE_MAX_MEMORY", raising=False)
    assert Settings().store_max_memory == physical_memory_bytes() // 4 > 0


def test_the_store_limit_reads_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("COURIER_STORE_MAX_MEMORY", "512mb")
    assert Settings().store_max_memory == 512 * 2**20
    monkeypatch.setenv("COURIER_STORE_MAX_MEMORY", "lots")
    with pytest.raises(ValidationError, match="COURIER_STORE_MAX_MEMORY|store_max_memory"):
        Settings()
