"""``python bench/deathsig.py COMMAND...``: run COMMAND so that it dies with the harness.

The harness starts its servers and workers in sessions of their own (a Ctrl-C
must reach only the harness, which then stops them in order), so if the
harness itself is killed nothing else would stop them. This asks Linux to
send them SIGTERM when the harness dies, then becomes COMMAND (same pid).
Elsewhere it only runs COMMAND.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

# prctl(2): the signal this process gets when the thread that started it exits.
PR_SET_PDEATHSIG = 1


def main(command: list[str]) -> None:
    """Arrange the death signal, then exec ``command``."""
    if sys.platform.startswith("linux"):
        parent = os.getppid()
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the harness died before the signal was armed
            sys.exit(1)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
