"""What every scenario gets: the sizes, a work directory, a way to say what it is doing."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.procs import Cluster
from bench.sizes import Sizes


@dataclass
class Context:
    """One run of the harness."""

    sizes: Sizes
    workdir: Path
    keep: bool = False
    profile_dir: Path | None = None  # where py-spy profiles go; None: no profiling
    # API processes of each server (Courier's and the trivial endpoint's); None: the default.
    api_processes: int | None = None
    started: float = field(default_factory=time.monotonic)

    def cluster(self, name: str) -> Cluster:
        """A fresh store (and room for processes) for one scenario."""
        root = self.workdir / name
        root.mkdir(parents=True, exist_ok=True)
        return Cluster(root, keep=self.keep, api_processes=self.api_processes)

    def say(self, text: str) -> None:
        """Progress, on stderr, so stdout holds only the table."""
        print(f"[{time.monotonic() - self.started:7.1f}s] {text}", file=sys.stderr, flush=True)
