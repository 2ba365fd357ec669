"""A project's fair share of an API process: a few sends at once, the rest in order."""

from __future__ import annotations

import asyncio

from messaging.service.fairshare import FairShare


async def _flood_and_one(share: FairShare, flood: int) -> tuple[int, list[int], float]:
    """Project A starts ``flood`` sends that hold their turn until released; then B sends.

    Returns A's most sends in progress at once, the order A's sends got their turn,
    and how many of A's sends had finished when B's got its turn.
    """
    release = asyncio.Event()
    in_progress, most, order, finished = 0, 0, [], 0

    async def a_send(i: int) -> None:
        nonlocal in_progress, most, finished
        async with share.turn("prj_a"):
            order.append(i)
            in_progress += 1
            most = max(most, in_progress)
            await release.wait()
            in_progress -= 1
        finished += 1

    flood_tasks = [asyncio.create_task(a_send(i)) for i in range(flood)]
    await asyncio.sleep(0)
    async with share.turn("prj_b"):
        b_saw_finished = finished
    release.set()
    await asyncio.gather(*flood_tasks)
    return most, order, b_saw_finished


def test_a_flood_holds_a_few_turns_and_another_project_does_not_wait_for_it():
    share = FairShare(at_once=4)
    most, order, b_saw_finished = asyncio.run(_flood_and_one(share, 50))
    assert most == 4
    assert order == list(range(50)), "A's sends take their turns in arrival order"
    assert b_saw_finished == 0, "B's send went in while all of A's flood was still there"


def test_a_quiet_project_leaves_nothing_behind():
    share = FairShare(at_once=2)
    asyncio.run(_flood_and_one(share, 10))
    assert share._slots == {}


def test_a_failing_send_gives_its_turn_back():
    share = FairShare(at_once=1)

    async def run() -> None:
        for _ in range(3):
            try:
                async with share.turn("prj_a"):
                    raise ValueError("refused")
            except ValueError:
                pass
        async with asyncio.timeout(1):
            async with share.turn("prj_a"):
                pass

    asyncio.run(run())
    assert share._slots == {}
