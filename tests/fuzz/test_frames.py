"""Hypothesis-generated client frames over a real WebSocket of a cluster in auth mode: every
frame is answered without a crash (a chat request with its terminal frame), the socket stays
usable after each, and the conversation stored before is unchanged after all of them
(docs/security.md#bad-input)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings

from durachat.protocol import MessageType
from durachat_infra.local.cluster import LocalCluster
from support.fuzz import LoopThread, cases, frames, loop_thread
from support.tenancy import ADMIN, bearer
from support.wsclient import WsClient, chat_request, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]

AGENT = "chat-agent"
CASES = cases(150)


class Target:
    """The socket under fuzzing, on its own loop thread, and what was stored before. It sends
    no keepalive pings: their payload comes from `random`, which Hypothesis forbids while it
    draws a case (the loop thread runs meanwhile)."""

    def __init__(self, loop: LoopThread, url: str, headers: dict[str, str], name: str) -> None:
        self.loop, self.url, self.headers, self.name = loop, url, headers, name
        self.socket = loop.run(
            WsClient.connect(url, AGENT, name, headers=headers, ping_interval=None)
        )
        self.sent = 0

    def stored(self) -> tuple[Any, Any]:
        """The conversation's transcript and branches, as a reader gets them."""
        with httpx.Client(base_url=self.url, headers=self.headers, timeout=20) as http:
            messages = http.get(f"/agents/{AGENT}/{self.name}/get-messages")
            branches = http.get(f"/agents/{AGENT}/{self.name}/branches")
        assert messages.status_code == 200, messages.text
        assert branches.status_code == 200, branches.text
        return messages.json(), branches.json()

    async def exchange(self, frame: Any) -> None:
        """Send `frame`, wait for what it must be answered with, then check the socket still
        answers a resume probe."""
        if self.socket.closed.is_set():
            # An earlier case broke it (and failed): each case gets a working socket.
            self.socket = await WsClient.connect(
                self.url, AGENT, self.name, headers=self.headers, ping_interval=None
            )
        socket = self.socket
        mark = len(socket.frames)
        await socket.send(frame if isinstance(frame, str) else json.dumps(frame))
        if (
            isinstance(frame, dict)
            and frame.get("type") == MessageType.USE_CHAT_REQUEST.value
            and isinstance(frame.get("id"), str)
        ):
            done = await socket.wait_done(frame["id"], after=mark, timeout=20)
            assert done.get("outcome") == "error" or done.get("error"), (frame, done)
        probe = uuid.uuid4().hex
        await socket.send({"type": MessageType.STREAM_RESUME_REQUEST.value, "probeId": probe})
        await socket.wait_for(
            lambda f: (
                f.get("type") == MessageType.STREAM_RESUME_NONE.value and f.get("probeId") == probe
            ),
            after=mark,
            timeout=20,
        )
        # Keep the kept frames few across many cases.
        del socket.frames[:-50]


@pytest.fixture(scope="module")
def target(auth_cluster: LocalCluster) -> Iterator[Target]:
    url = auth_cluster.urls[0]
    tenant = f"fuzz-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=url, timeout=20) as http:
        made = http.post("/v1/admin/tenants", json={"id": tenant}, headers=ADMIN)
        assert made.status_code == 201, made.text
    headers = bearer(made.json()["api_key"])
    with loop_thread() as loop:
        target = Target(loop, url, headers, f"fz-{uuid.uuid4().hex[:8]}")
        request = chat_request([user_message("before the fuzzing")])
        loop.run(target.socket.send(request))
        loop.run(target.socket.wait_done(request["id"]))
        yield target
        loop.run(target.socket.close())


@settings(
    max_examples=CASES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
@given(frame=frames())
def check_frame(target: Target, frame: Any) -> None:
    try:
        target.loop.run(target.exchange(frame))
    except AssertionError as failed:
        raise AssertionError(f"{failed} after sending {json.dumps(frame)[:300]}") from None


def test_no_frame_breaks_the_socket_or_changes_what_is_stored(target: Target) -> None:
    before = target.stored()
    assert len(before[0]) == 2

    check_frame(target)

    assert target.stored() == before
