"""A server that does not answer reaches callers of CourierClient as CourierUnreachable,
never as an httpx error, and the CLI reports it with its exit code."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pytest
from typer.testing import CliRunner

from messaging.cli import app
from messaging.cli.io import Exit
from messaging.client import CourierClient, CourierUnreachable

runner = CliRunner()


@pytest.fixture
def closed_url() -> str:
    """A loopback port that nothing listens on: a connection there is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def silent_url() -> Iterator[str]:
    """A loopback port that takes connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_a_refused_connection_is_courier_unreachable_with_httpx_s_error_as_cause(
        closed_url: str) -> None:
    with CourierClient(closed_url, token="agt_x") as client, \
            pytest.raises(CourierUnreachable) as caught:
        client.inbox()
    assert isinstance(caught.value.__cause__, httpx.ConnectError)
    assert isinstance(caught.value, OSError)
    assert not isinstance(caught.value, httpx.HTTPError)


def test_a_server_that_never_answers_is_courier_unreachable(silent_url: str) -> None:
    with CourierClient(silent_url, token="agt_x", timeout_s=0.3) as client, \
            pytest.raises(CourierUnreachable) as caught:
        client.request("GET", "/v1/agents/me")
    assert isinstance(caught.value.__cause__, httpx.ReadTimeout)


def test_the_live_stream_without_reconnect_ends_in_courier_unreachable(closed_url: str) -> None:
    with CourierClient(closed_url, token="agt_x") as client, \
            pytest.raises(CourierUnreachable):
        next(client.events())


@pytest.mark.parametrize("command", [
    ["inbox", "--token", "agt_x"],
    ["project", "create", "/srv/checkout", "--token", "opr_x"],
], ids=["agent", "operator"])
def test_the_cli_says_it_cannot_reach_the_server_and_exits_unavailable(
        closed_url: str, command: list[str]) -> None:
    done = runner.invoke(app, [*command, "--url", closed_url], env={"COLUMNS": "200"})
    assert done.exit_code == Exit.UNAVAILABLE, done.output
    assert f"cannot reach {closed_url}" in done.output
