"""How big and how long each scenario runs: the full sizes, and a quick smoke set."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    """Every size and duration of a run."""

    concurrency: int = 32
    admission_s: float = 10.0
    warmup_s: float = 1.0
    backlog: int = 20_000
    e2e_rate_per_s: float = 200.0
    e2e_s: float = 30.0
    scale_small: int = 1_000
    # Of the small scale point, how many go through API and worker (the memory sample).
    memory_sample: int = 1_000
    scale_large: int = 1_000_000
    scale_load_s: float = 10.0
    # One connection: each figure is one operation's own cost, with no queueing in it.
    scale_concurrency: int = 1
    inbox_limit: int = 50
    inbox_cursors: int = 200
    # Search: stored messages at its large point, and how long each query runs.
    search_large: int = 1_000_000
    search_query_s: float = 5.0
    # Fairness: A's flood of inbox messages, B's steady rate, B alone for how long,
    # and B's load windows during the flood. Under a flood B's figure counts only
    # what B sent during A's drains, and A floods again (a new project each time,
    # up to fairness_floods) until that is as many sends as B alone made, so both
    # p99s come from as many samples (of 200, the third worst; of 60, the worst).
    fairness_flood: int = 20_000
    fairness_rate_per_s: float = 10.0
    fairness_quiet_s: float = 20.0
    fairness_window_s: float = 5.0
    fairness_floods: int = 5
    # (--quick: a drain of 2,000 takes about a second, and B's windows leave a gap
    # while the next load generator starts, a second or more on a loaded machine:
    # at 10/s B may send nothing in a drain. B sends at 40/s, in longer windows,
    # and A floods up to six times.)
    # Rendering: B's time under load on each side (alone, beside A's thread), split
    # into turns that alternate, and B's rate of sends and of reads.
    render_s: float = 60.0
    render_turns: int = 6
    render_rate_per_s: float = 10.0
    # MCP against HTTP: sequential sends over each face.
    mcp_sends: int = 600
    # How long delivery of what a scenario sent may take before the run is void.
    drain_timeout_s: float = 600.0


FULL = Sizes()
QUICK = Sizes(admission_s=1.0, warmup_s=0.2, backlog=500, e2e_s=1.5, scale_small=1_000,
              memory_sample=300, scale_large=10_000, scale_load_s=1.0, drain_timeout_s=60.0,
              search_large=3_000, search_query_s=0.3, fairness_flood=2_000,
              fairness_rate_per_s=40.0, fairness_quiet_s=2.0, fairness_window_s=2.0,
              fairness_floods=6,
              render_s=3.0, render_turns=1, mcp_sends=20)
