"""docs/configuration.md is generated from the settings class and the CLI, and up to date."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main

from messaging import settingsdoc
from messaging.cli import app
from messaging.config import Settings
from messaging.hosts import watching

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "configuration.md"
CLI = typer.main.get_command(app)
# COURIER_ words in the code that are not variables Courier reads: the package's
# version (imported under that name), and what `watch --exec` sets for its command.
NOT_SETTINGS = {"COURIER_VERSION", *watching.FIELDS}


def test_the_reference_is_what_the_generator_prints() -> None:
    assert DOC.read_text() == settingsdoc.markdown(CLI), (
        f"docs/configuration.md is stale: run `{settingsdoc.GENERATED}`")


def test_every_setting_has_a_description() -> None:
    missing = [name for name, field in Settings.model_fields.items()
               if len((field.description or "").strip()) < 10]
    assert not missing, f"settings without a description: {missing}"


def test_every_cli_variable_has_help_and_the_cli_s_own_are_listed() -> None:
    rows = settingsdoc.cli_rows(CLI)
    assert {"COURIER_URL", "COURIER_TOKEN", "COURIER_PROJECT"} <= {var for var, _, _ in rows}
    assert all(text.strip() for _, _, text in rows), rows


def test_every_courier_variable_the_code_names_is_in_the_reference() -> None:
    named = set()
    for path in [*ROOT.glob("messaging/**/*.py"), *ROOT.glob("workers/**/*.py"),
                 ROOT / "messaging" / "launch" / "Procfile"]:
        named |= set(re.findall(r"\bCOURIER_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    documented = set(re.findall(r"`(COURIER_[A-Z0-9_]+)`", DOC.read_text()))
    assert named - NOT_SETTINGS <= documented, sorted(named - NOT_SETTINGS - documented)


def test_the_check_does_catch_a_stale_reference() -> None:
    stale = DOC.read_text().replace("`COURIER_LOG_FORMAT`", "`COURIER_LOG_FMT`")
    assert stale != settingsdoc.markdown(CLI)
