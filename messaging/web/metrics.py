"""``GET /metrics``: Prometheus text.

Sends are counted where every face's sends pass, the send service
(``courier_admissions``, ``messaging.service.sending``), and every error answer
of every face (the gate's 401 and 429 included), by code and face, where
answers leave (``courier_refusals``, ``messaging.web.refusals``);
added up over the API's processes. Delivery figures come from the store's per-project
counters (``keys.stats``), which every worker on every machine writes in the
same scripts that record outcomes, so any API process shows the whole
deployment. Queue depths are read from the broker.

Who asks decides how much is named. The operator token sees every series:
each lane's queues and the busiest projects by id. Everyone else (no token,
any project's) sees the same counts without a name of a lane or a project:
each lane's queue depth added into its transport's queue, and the backlog
family without rows. So a process on the machine learns how busy Courier is,
not who uses it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from messaging.runtime.celeryconf import queue_for
from messaging.service import archive
from messaging.store.deliveries import DISPATCH_BUCKETS_MS, INF
from messaging.store.store import Store

OUTCOMES = ("accepted", "rejected", "failed", "unknown")
# Set by the API's launcher when several processes serve one port (messaging.web.serve).
METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
# Used memory this close to maxmemory, beyond the largest body, counts as full.
FULL_MARGIN_BYTES = 64 * 1024


def store_full(used_bytes: int, max_bytes: int, largest_write_bytes: int = 0) -> bool:
    """True when the store has a memory limit and the largest write may not fit under it.

    The store refuses a write while it holds the request too, so a send with
    the largest body is refused that much before the limit.
    """
    return max_bytes > 0 and used_bytes >= max_bytes - FULL_MARGIN_BYTES - largest_write_bytes
# How many projects /metrics names in its backlog gauge.
BUSIEST = 10


def disk_bytes(archive_root: Path, data_dir: Path) -> tuple[int, int]:
    """(archive, data dir) sizes in bytes; walks both, so call it off the event loop."""
    return archive.size_bytes(archive_root), archive.size_bytes(data_dir)


async def busiest_backlogs(store: Store, kinds: list[str],
                           top: int = BUSIEST) -> list[tuple[str, str, int]]:
    """(project, transport, deliveries waiting for a turn) of the projects with the most."""
    counts = await store.ready_counts(kinds)
    rows = [(pid, kind, n) for pid, per_kind in counts.items() for kind, n in per_kind.items()]
    totals = {pid: sum(per_kind.values()) for pid, per_kind in counts.items()}
    busiest = {pid for pid in sorted(totals, key=lambda p: -totals[p])[:top] if totals[pid]}
    return [row for row in rows if row[0] in busiest and row[2]]


def without_lanes(depths: dict[str, int], kinds: list[str]) -> dict[str, int]:
    """Queue depths with each lane's queue added into its transport's shared queue."""
    shared = [queue_for(kind) for kind in kinds]
    folded: dict[str, int] = {}
    for queue, size in depths.items():
        name = next((base for base in shared if queue == base or queue.startswith(base + ".")),
                    queue)
        folded[name] = folded.get(name, 0) + size
    return folded


class Snapshot:
    """A collector over figures read once for one scrape."""

    def __init__(self, totals: dict[str, int], due: int, depths: dict[str, int],
                 memory: tuple[int, int],
                 backlogs: list[tuple[str, str, int]] | None = None,
                 unindexed: int = 0, disk: tuple[int, int] = (0, 0)) -> None:
        self.totals, self.due, self.depths, self.memory = totals, due, depths, memory
        self.backlogs = backlogs or []
        self.unindexed = unindexed
        self.disk = disk

    def collect(self) -> Iterator[Metric]:
        """The delivery families."""
        outcomes = CounterMetricFamily("courier_deliveries", "Delivery outcomes recorded",
                                       labels=["outcome"])
        for outcome in OUTCOMES:
            outcomes.add_metric([outcome], self.totals.get(f"outcome:{outcome}", 0))
        yield outcomes
        yield CounterMetricFamily("courier_deliveries_observed", "Deliveries the recipient's "
                                  "side showed", value=self.totals.get("observed", 0))
        yield CounterMetricFamily("courier_delivery_retries", "Attempts that failed before "
                                  "hand-off and were scheduled again",
                                  value=self.totals.get("retry", 0))
        yield GaugeMetricFamily("courier_deliveries_due", "Deliveries waiting for dispatch, "
                                "a retry or a lease to end", value=self.due)
        yield self._latency()
        depth = GaugeMetricFamily("courier_queue_depth", "Tasks waiting in the broker",
                                  labels=["queue"])
        for queue, size in sorted(self.depths.items()):
            depth.add_metric([queue], size)
        yield depth
        yield GaugeMetricFamily("courier_store_used_memory_bytes", "The store's used memory",
                                value=self.memory[0])
        yield GaugeMetricFamily("courier_store_max_memory_bytes", "The store's maxmemory "
                                "(0: no limit); writes answer STORE_FULL at it",
                                value=self.memory[1])
        backlog = GaugeMetricFamily(
            "courier_project_backlog", f"Deliveries waiting for a worker's turn, for the "
            f"{BUSIEST} projects with the most", labels=["project_id", "transport"])
        for project_id, transport, waiting in self.backlogs:
            backlog.add_metric([project_id, transport], waiting)
        yield backlog
        yield GaugeMetricFamily("courier_search_unindexed", "Dispatched deliveries whose "
                                "message waits for the search index", value=self.unindexed)
        yield GaugeMetricFamily("courier_archive_bytes", "Bytes of the archive "
                                "(COURIER_ARCHIVE_DIR), as this API process sees it",
                                value=self.disk[0])
        yield GaugeMetricFamily("courier_data_dir_bytes", "Bytes of the data dir "
                                "(COURIER_DATA_DIR, the archive included when it is inside), "
                                "as this API process sees it", value=self.disk[1])

    def _latency(self) -> HistogramMetricFamily:
        buckets: list[tuple[str, float]] = []
        running = 0
        for bound in [*map(str, DISPATCH_BUCKETS_MS), INF]:
            running += self.totals.get(f"dispatch_ms_le:{bound}", 0)
            le = "+Inf" if bound == INF else str(int(bound) / 1000)
            buckets.append((le, running))
        return HistogramMetricFamily(
            "courier_dispatch_latency_seconds", "Admission to recorded outcome",
            buckets=buckets, sum_value=self.totals.get("dispatch_ms_sum", 0) / 1000)


def render(totals: dict[str, int], due: int, depths: dict[str, int],
           memory: tuple[int, int],
           backlogs: list[tuple[str, str, int]] | None = None, unindexed: int = 0,
           disk: tuple[int, int] = (0, 0)) -> bytes:
    """The exposition text: the API's counters and the deployment's figures."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Snapshot(totals, due, depths, memory, backlogs, unindexed, disk))
    return generate_latest(api_counters()) + generate_latest(registry)


def api_counters() -> CollectorRegistry:
    """This API's counters: every process's, added up, when several serve the port."""
    if not os.environ.get(METRICS_DIR_ENV):
        return REGISTRY
    merged = CollectorRegistry()
    multiprocess.MultiProcessCollector(merged)  # type: ignore[no-untyped-call]
    return merged
