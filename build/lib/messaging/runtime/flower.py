"""Flower behind the operator token: ``python -m messaging.runtime.flower [flower options]``.

Its pages and its HTTP API both ask for HTTP basic auth, user ``operator``,
password the operator token. The credentials go to Flower in its environment
(``FLOWER_BASIC_AUTH``), never on a command line that ``ps`` would show.
"""

from __future__ import annotations

import os
import sys

from messaging.config import get_settings

USER = "operator"
CELERY_APP = "workers.app"


def flower_env(token: str) -> dict[str, str]:
    """Our environment, with Flower's basic auth set to the operator token."""
    return {**os.environ, "FLOWER_BASIC_AUTH": f"{USER}:{token}"}


def main() -> None:
    """Replace this process with Flower, the operator token guarding it."""
    token = get_settings().resolve_operator_token()
    command = [sys.executable, "-m", "celery", "-A", CELERY_APP, "flower", *sys.argv[1:]]
    os.execve(sys.executable, command, flower_env(token))


if __name__ == "__main__":
    main()
