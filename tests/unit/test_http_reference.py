"""docs/http-api.md, the repository's reference of the HTTP API, covers every served route."""

from __future__ import annotations

from pathlib import Path

from messaging.web.app import create_app
from messaging.web.reference import served_routes

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "http-api.md"


def test_every_route_the_app_serves_is_in_the_reference() -> None:
    text = REFERENCE.read_text()
    missing = [f"{method} {path}" for method, path, _ in served_routes(create_app())
               if f"`{method} {path}`" not in text]
    assert not missing, (
        f"docs/http-api.md does not document {len(missing)} served route(s): "
        + ", ".join(missing)
        + ". Describe them in its sections and run `python -m messaging.web.reference --write`."
    )


def test_the_readme_points_at_the_reference() -> None:
    assert "docs/http-api.md" in (ROOT / "README.md").read_text()
