"""The slots of capped requests a worker process has under way, renewed while they run.

A transport's caps on requests under way at once (per project, per endpoint)
count slots in the store's in-flight set (``lease_deliveries``). A slot is
short and its worker renews it while the request runs, so the caps count the
requests of live workers only: a worker that died (SIGKILL, OOM, a lost
machine) renews nothing, and its share of the caps is free again within
``SLOT_MS`` of its death. Its deliveries' leases are another matter: each
runs on to its end, and a request that may have left is then ``unknown``,
never sent again by itself.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from messaging.store.deliveries import DeliveryStore, Leased

log = logging.getLogger(__name__)

# A request leased under a cap holds a slot of it (the store's in-flight set) for
# this long, and its process renews the slot every SLOT_RENEW_S while the request
# runs: a worker that dies renews nothing, and its share of the caps is free again
# within SLOT_MS of its death, while its lease (what makes its request `unknown`,
# never sent again) runs on to its end. Ten renewals a slot's length: a process
# slowed by a busy machine still renews in time.
SLOT_MS = 5000
SLOT_RENEW_S = 0.5


class Slots:
    """The capped requests this process has under way, each holding a slot of its
    caps, and the thread that renews their slots while they run. Made after fork,
    never shared across it."""

    def __init__(self, slot_ms: int, every_s: float) -> None:
        self.slot_ms, self.every_s = slot_ms, every_s
        # (the store, the project) -> delivery id -> its lease
        self._held: dict[tuple[int, str], tuple[DeliveryStore, dict[str, Leased]]] = {}
        self._lock = threading.Lock()
        threading.Thread(target=self._renewing, name="slots", daemon=True).start()

    def hold(self, store: DeliveryStore, project_id: str, leased: list[Leased]) -> None:
        """Renew these requests' slots from now on, until they are given back."""
        if leased:
            with self._lock:
                _, held = self._held.setdefault((id(store), project_id), (store, {}))
                held.update((lease.delivery_id, lease) for lease in leased)

    def give_back(self, store: DeliveryStore, project_id: str, leased: list[Leased]) -> None:
        """Stop renewing these requests' slots: their outcomes are recorded (which
        frees the slots), or their leases are lost."""
        with self._lock:
            entry = self._held.get((id(store), project_id))
            if entry is None:
                return
            for lease in leased:
                entry[1].pop(lease.delivery_id, None)
            if not entry[1]:
                del self._held[(id(store), project_id)]

    def held(self) -> int:
        """How many requests' slots this process renews."""
        with self._lock:
            return sum(len(held) for _, held in self._held.values())

    def _renewing(self) -> None:
        while True:
            time.sleep(self.every_s)
            with self._lock:
                rounds = [(store, project_id, list(held.values()))
                          for (_, project_id), (store, held) in self._held.items()]
            for store, project_id, leased in rounds:
                try:
                    store.renew_slots(project_id, leased, self.slot_ms)
                except Exception as e:  # the slots run out: the caps loosen, nothing else
                    log.warning("slots of %d requests of %s not renewed: %s: %s",
                                len(leased), project_id, type(e).__name__, e)


_slots: tuple[int, Slots] | None = None
_making = threading.Lock()


def here() -> Slots:
    """This process's slots (made after fork, never shared across it)."""
    global _slots
    with _making:
        if _slots is None or _slots[0] != os.getpid():
            _slots = (os.getpid(), Slots(SLOT_MS, SLOT_RENEW_S))
        return _slots[1]


def give_back(store: DeliveryStore, project_id: str, leased: list[Leased]) -> None:
    """``Slots.give_back`` on this process's slots, if it holds any."""
    current = _slots
    if current is not None and current[0] == os.getpid():
        current[1].give_back(store, project_id, leased)
