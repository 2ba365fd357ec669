"""A project's fair share of an API process: a few requests at once, the rest in order;
fewer while other projects are there."""

from __future__ import annotations

import asyncio

from messaging.service.caller import bearer
from messaging.web.fairshare import FairShare, ProjectShare
from messaging.web.guard import AUTH_SCOPE_KEY, NO_TOKEN, Auth, authorization


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


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_flood_holds_a_few_turns_and_another_project_does_not_wait_for_it():
    share = FairShare(alone=4)
    most, order, b_saw_finished = asyncio.run(_flood_and_one(share, 50))
    assert most == 4
    assert order == list(range(50)), "A's sends take their turns in arrival order"
    assert b_saw_finished == 0, "B's send went in while all of A's flood was still there"


def test_while_another_project_is_there_a_flood_has_fewer_at_once_and_gets_them_back_after():
    clock = Clock()
    share = FairShare(alone=4, shared=2, present_s=0.3, clock=clock)

    async def run() -> list[int]:
        ends = [asyncio.Event() for _ in range(20)]
        in_progress, seen = 0, []

        async def a_send(i: int) -> None:
            nonlocal in_progress
            async with share.turn("prj_a"):
                in_progress += 1
                await ends[i].wait()
                in_progress -= 1

        async def settle() -> None:
            for _ in range(5):
                await asyncio.sleep(0)

        tasks = [asyncio.create_task(a_send(i)) for i in range(20)]
        await settle()
        seen.append(in_progress)  # A alone: 4
        async with share.turn("prj_b"):
            pass  # B's one request, which keeps B there for 0.3 s
        for i in range(4):
            ends[i].set()
            await settle()
        seen.append(in_progress)  # A's first four ended while B was there: 2 took over
        clock.now += 0.5  # B has been quiet since
        ends[4].set()
        await settle()
        seen.append(in_progress)  # A alone again: 4
        for end in ends:
            end.set()
        await asyncio.gather(*tasks)
        return seen

    assert asyncio.run(run()) == [4, 2, 4]


def test_a_quiet_project_leaves_nothing_behind():
    clock = Clock()
    share = FairShare(alone=2, present_s=0.3, clock=clock)
    asyncio.run(_flood_and_one(share, 10))
    assert set(share._keys) == {"prj_a", "prj_b"}, "both were there a moment ago"
    clock.now += 1

    async def one() -> None:
        async with share.turn("prj_c"):
            assert share.at_once() == 2, "A and B are gone: C is alone"

    asyncio.run(one())
    assert set(share._keys) == {"prj_c"}


def test_a_request_that_gives_up_waiting_leaves_the_line():
    share = FairShare(alone=1)

    async def run() -> list[str]:
        first_holds, got_in = asyncio.Event(), []

        async def request(name: str, hold: asyncio.Event | None = None) -> None:
            async with share.turn("prj_a"):
                got_in.append(name)
                if hold is not None:
                    await hold.wait()

        first = asyncio.create_task(request("first", first_holds))
        await asyncio.sleep(0)
        gives_up = asyncio.create_task(request("gives up"))
        last = asyncio.create_task(request("last"))
        await asyncio.sleep(0)
        gives_up.cancel()
        await asyncio.sleep(0)
        assert len(share._keys["prj_a"].waiting) == 1, "only the last one waits"
        first_holds.set()
        async with asyncio.timeout(5):
            await asyncio.gather(first, last)
        assert gives_up.cancelled()
        return got_in

    assert asyncio.run(run()) == ["first", "last"]
    assert share._keys["prj_a"].in_progress == 0 and not share._keys["prj_a"].waiting


def test_a_request_cancelled_as_its_turn_came_passes_the_turn_on():
    share = FairShare(alone=1)

    async def run() -> list[str]:
        first_holds, got_in = asyncio.Event(), []
        tasks: dict[str, asyncio.Task[None]] = {}

        async def first() -> None:
            async with share.turn("prj_a"):
                got_in.append("first")
                await first_holds.wait()
            # The same step as the turn's end: the second's turn came, it has not run.
            tasks["second"].cancel()

        async def request(name: str) -> None:
            async with share.turn("prj_a"):
                got_in.append(name)

        tasks["first"] = asyncio.create_task(first())
        await asyncio.sleep(0)
        tasks["second"] = asyncio.create_task(request("second"))
        tasks["third"] = asyncio.create_task(request("third"))
        await asyncio.sleep(0)
        first_holds.set()
        async with asyncio.timeout(5):
            await asyncio.gather(tasks["first"], tasks["third"])
        assert tasks["second"].cancelled()
        return got_in

    assert asyncio.run(run()) == ["first", "third"]
    assert share._keys["prj_a"].in_progress == 0


def test_a_failing_send_gives_its_turn_back():
    share = FairShare(alone=1)

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
    assert share._keys["prj_a"].in_progress == 0


# the middleware: which requests share a project's turns


def _scope(group: str | None = None, path: str = "/v1/messages", method: str = "POST",
           client: str = "127.0.0.9") -> dict:
    """A request the gate found to be of ``group`` (a project; None: no valid token)."""
    auth = Auth(None, None, client, group or NO_TOKEN + client)
    return {"type": "http", "method": method, "path": path, "headers": [],
            "client": (client, 50000), AUTH_SCOPE_KEY: auth}


def test_only_a_bearer_token_counts():
    basic = {**_scope(), "headers": [(b"authorization", b"Basic b3BlcmF0b3I6eA==")]}
    assert bearer(authorization(basic)) is None
    assert bearer(authorization({"headers": [(b"authorization", b"Bearer abc")]})) == "abc"


async def _in_progress(share: ProjectShare, scopes: list[dict]) -> tuple[int, list[int]]:
    """Run the requests at once, each held open until all have started or waited;
    returns the most in progress at once and the order they got in."""
    release = asyncio.Event()
    now, most, order = 0, 0, []

    async def app(scope: dict, receive: object, send: object) -> None:
        nonlocal now, most
        order.append(scope["n"])
        now += 1
        most = max(most, now)
        await release.wait()
        now -= 1

    share.app = app
    tasks = [asyncio.create_task(share({**s, "n": i}, None, None))  # type: ignore[arg-type]
             for i, s in enumerate(scopes)]
    for _ in range(5):
        await asyncio.sleep(0)
    release.set()
    await asyncio.gather(*tasks)
    return most, order


def test_a_projects_flood_has_a_few_requests_in_progress_and_the_rest_wait_in_order():
    share = ProjectShare(lambda *a: None, streams=["/v1/agents/me/events"],  # type: ignore[arg-type]
                         share=FairShare(alone=3))
    flood = [_scope("prj_a") for i in range(12)]
    most, order = asyncio.run(_in_progress(share, flood))
    assert most == 3
    assert order == list(range(12))


def test_another_project_and_event_streams_do_not_wait_for_a_flood():
    share = ProjectShare(lambda *a: None, streams=["/v1/agents/me/events"],  # type: ignore[arg-type]
                         share=FairShare(alone=2, shared=2))
    scopes = [_scope("prj_a") for _ in range(6)]
    scopes += [_scope("prj_b"), _scope("prj_a", path="/v1/agents/me/events", method="GET"),
               _scope("prj_a", path="/healthz", method="GET")]
    most, order = asyncio.run(_in_progress(share, scopes))
    # A's two, B's one, A's stream and a health check were in progress together,
    # before A's other four.
    assert most == 5
    assert order[:5] == [0, 1, 6, 7, 8]
