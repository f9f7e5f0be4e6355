"""Traces, metrics and logs of real processes (docs/observability.md).

The cluster exports its spans over OTLP/HTTP to a receiver in the test, which decodes them with
`opentelemetry-proto`; every process serves `/metrics` on a port of its own
(`DURACHAT_METRICS_PORT`), which the tests scrape before and after what each metric counts.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from durachat_infra.local.cluster import LocalCluster, Process
from support.cluster import running_cluster
from support.faults import stop_between_writes
from support.otlp import OtlpReceiver, ReceivedSpan, otlp_receiver
from support.waiting import eventually
from support.wsclient import WsClient, chat_request, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

AGENT = "chat-agent"
MODEL = "durachat/scripted"
T = TypeVar("T")
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with otlp_receiver() as running:
        yield running


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, receiver: OtlpReceiver
) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path_factory.mktemp("observability"),
        redis_url,
        gateways=1,
        shards=2,
        env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "DURACHAT_METRICS_PORT": "0",
            "DURACHAT_LOG_FORMAT": "json",
            "DURACHAT_LOG_RETENTION": "3",
            "DURACHAT_RETENTION_INTERVAL": "1",
        },
    ) as running:
        yield running


async def _scrape(cluster: LocalCluster, name: str) -> Samples:
    port = cluster.metrics_ports[name]
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"http://127.0.0.1:{port}/metrics", timeout=5)).text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def _shards(cluster: LocalCluster) -> dict[str, Samples]:
    return {
        p.name: await _scrape(cluster, p.name)
        for p in cluster.processes
        if p.role == "shard" and p.popen.poll() is None
    }


def _total(by_shard: dict[str, Samples], name: str, **labels: str) -> float:
    return sum(_value(samples, name, **labels) for samples in by_shard.values())


async def _owner(cluster: LocalCluster, name: str) -> Process:
    async with httpx.AsyncClient(base_url=cluster.urls[0]) as http:
        owner = (await http.get("/v1/cluster/owner", params={"agent": AGENT, "name": name})).json()
    return next(p for p in cluster.processes if p.popen.pid == owner["pid"])


async def _chat(client: WsClient, text: str) -> str:
    request = chat_request([user_message(text)])
    await client.send(request)
    await client.wait_done(str(request["id"]), timeout=30)
    return str(request["id"])


def _named(spans: list[ReceivedSpan], name: str, request_id: str) -> ReceivedSpan | None:
    return next(
        (
            s
            for s in spans
            if s.name == name and s.attributes.get("durachat.request_id") == request_id
        ),
        None,
    )


async def test_one_trace_per_turn_across_gateway_and_shard(
    cluster: LocalCluster, receiver: OtlpReceiver
) -> None:
    client = await WsClient.connect(cluster.urls[0], AGENT, f"traced-{time.time_ns()}")
    rid = await _chat(client, "tool:Paris")
    await client.close()

    async def whole_trace() -> dict[str, ReceivedSpan] | None:
        spans = receiver.snapshot()
        found = {
            name: _named(spans, name, rid)
            for name in ("chat.receive", "chat.accept", "chat.turn", "chat.deliver")
        }
        if any(span is None for span in found.values()):
            return None
        turn = found["chat.turn"]
        assert turn is not None
        children = [s for s in spans if s.parent_span_id == turn.span_id]
        model = [s for s in children if s.name == f"chat {MODEL}"]
        tools = [s for s in children if s.name == "execute_tool getWeather"]
        if len(model) < 2 or not tools:
            return None
        result = {k: v for k, v in found.items() if v is not None}
        result["model"], result["tool"] = model[0], tools[0]
        return result

    spans = await eventually(whole_trace, timeout=15)
    receive, accept, turn = spans["chat.receive"], spans["chat.accept"], spans["chat.turn"]
    assert len({s.trace_id for s in spans.values()}) == 1
    assert (receive.service, receive.instance) == ("durachat-gateway", "gw-1")
    assert accept.service == "durachat-shard" and accept.instance.startswith("shard-")
    assert accept.parent_span_id == receive.span_id
    assert turn.parent_span_id == accept.span_id
    assert spans["chat.deliver"].parent_span_id == turn.span_id
    assert spans["chat.deliver"].service == "durachat-gateway"
    model = spans["model"]
    assert model.attributes["gen_ai.system"] == "durachat"
    assert model.attributes["gen_ai.request.model"] == MODEL
    assert model.attributes["gen_ai.operation.name"] == "chat"
    assert model.attributes["gen_ai.usage.input_tokens"] > 0
    assert model.attributes["gen_ai.usage.output_tokens"] > 0
    assert model.attributes["durachat.time_to_first_token_s"] >= 0
    assert "gen_ai.first_token" in [name for name, _ in model.events]
    assert spans["tool"].attributes["gen_ai.tool.name"] == "getWeather"
    # The write chain's transactions (the accept's, the turn's) are in the same trace.
    writes = [
        s
        for s in receiver.snapshot()
        if s.name == "chat.write" and s.parent_span_id in (accept.span_id, turn.span_id)
    ]
    assert {w.parent_span_id for w in writes} == {accept.span_id, turn.span_id}
    assert {w.trace_id for w in writes} == {receive.trace_id}


async def test_log_lines_are_json_with_the_trace_of_their_turn(
    cluster: LocalCluster, receiver: OtlpReceiver
) -> None:
    client = await WsClient.connect(cluster.urls[0], AGENT, f"logged-{time.time_ns()}")
    rid = await _chat(client, "an error please")
    await client.close()
    turn = await eventually(lambda: _async(_named(receiver.snapshot(), "chat.turn", rid)))

    def logged() -> dict[str, str] | None:
        assert cluster.log_dir is not None
        for path in Path(cluster.log_dir).glob("shard-*.log"):
            for line in path.read_text(errors="replace").splitlines():
                if f"model error in {rid}" in line:
                    parsed: dict[str, str] = json.loads(line)
                    return parsed
        return None

    line = await eventually(lambda: _async(logged()))
    assert line["level"] == "INFO" and line["logger"] == "durachat_shard.actor.runner"
    assert line["process"].startswith("shard-")
    assert line["trace_id"] == turn.trace_id and line["span_id"] == turn.span_id


async def _async(value: T) -> T:
    return value


async def test_every_metric_moves_when_its_event_happens(cluster: LocalCluster) -> None:
    gateway_before = await _scrape(cluster, "gw-1")
    shards_before = await _shards(cluster)
    name = f"metered-{time.time_ns()}"
    # With cursors on its frames, so it can come back with one.
    client = await WsClient.connect(cluster.urls[0], AGENT, name, cursor="")
    await _chat(client, "one two three")
    await _chat(client, "an error please")
    await client.send("{not json")  # refused by the gateway: invalid_json
    owner = (await _owner(cluster, name)).name

    async def gateway_moved() -> Samples | None:
        now = await _scrape(cluster, "gw-1")
        moved = [
            _value(now, "durachat_gateway_tenant_connections", tenant="default") >= 1,
            _value(now, "durachat_gateway_connections") >= 1,
            _value(now, "durachat_gateway_channels") >= 1,
            _value(now, "durachat_gateway_frames_in_total", type="cf_agent_use_chat_request")
            >= _value(
                gateway_before, "durachat_gateway_frames_in_total", type="cf_agent_use_chat_request"
            )
            + 2,
            _value(now, "durachat_gateway_frames_out_total")
            > _value(gateway_before, "durachat_gateway_frames_out_total") + 10,
            _value(now, "durachat_gateway_frame_errors_total", code="invalid_json")
            > _value(gateway_before, "durachat_gateway_frame_errors_total", code="invalid_json"),
            _value(now, "durachat_gateway_delivery_latency_seconds_count")
            >= _value(gateway_before, "durachat_gateway_delivery_latency_seconds_count") + 2,
        ]
        return now if all(moved) else None

    await eventually(gateway_moved, timeout=10)

    async def shard_moved() -> Samples | None:
        now = await _scrape(cluster, owner)
        before = shards_before.get(owner, {})

        def grew(metric: str, by: float = 1, **labels: str) -> bool:
            return _value(now, metric, **labels) >= _value(before, metric, **labels) + by

        moved = [
            grew("durachat_shard_turns_total", outcome="completed"),
            grew("durachat_shard_turns_total", outcome="error"),
            grew("durachat_shard_chunks_total", 5),
            grew("durachat_shard_time_to_first_chunk_seconds_count", 2),
            grew("durachat_shard_turn_duration_seconds_count", outcome="completed"),
            grew("durachat_shard_leases_total", event="taken"),
            grew("durachat_shard_write_chain_lag_seconds_count", 4),
            grew("durachat_shard_model_errors_total", agent=AGENT),
            grew("durachat_shard_model_tokens_total", tenant="default", model=MODEL),
            _value(now, "durachat_shard_active_conversations") >= 1,
        ]
        return now if all(moved) else None

    await eventually(shard_moved, timeout=10)

    # A client that comes back with its cursor is replayed what it missed.
    cursor = next(str(f["cursor"]) for f in client.frames if f.get("cursor"))
    await client.close()
    back = await WsClient.connect(cluster.urls[0], AGENT, name, cursor=cursor)
    await eventually(
        lambda: _moved(
            cluster, "gw-1", gateway_before, "durachat_gateway_replays_total", kind="cursor"
        )
    )
    await back.close()

    jobs_before = await _scrape(cluster, "jobs-1")
    # Every second when the machine is idle; a busy one can hold the worker's loop for a while.
    await eventually(
        lambda: _moved(
            cluster, "jobs-1", jobs_before, "durachat_jobs_runs_total", job="recover_orphans"
        ),
        timeout=30,
    )
    jobs = await _scrape(cluster, "jobs-1")
    assert _value(jobs, "durachat_jobs_duration_seconds_count", job="recover_orphans") >= 1
    # Entries older than the 3 s retention are trimmed by the sweep that runs every second.
    await eventually(
        lambda: _moved(
            cluster, "jobs-1", {}, "durachat_jobs_retention_removed_total", what="log_entries"
        ),
        timeout=15,
    )


async def _moved(
    cluster: LocalCluster, process: str, before: Samples, metric: str, **labels: str
) -> bool:
    now = await _scrape(cluster, process)
    return _value(now, metric, **labels) > _value(before, metric, **labels)


async def test_a_slow_consumer_is_counted(cluster: LocalCluster) -> None:
    # A send queue of one frame: the frames a connection gets at once overflow it.
    cluster.spawn_gateway("gw-slow", env={"DURACHAT_SEND_QUEUE_LIMIT": "1"})
    cluster.wait_ready(60)
    client = await WsClient.connect(cluster.urls[-1], AGENT, f"slow-{time.time_ns()}")
    await eventually(
        lambda: _moved(cluster, "gw-slow", {}, "durachat_gateway_slow_consumer_disconnects_total")
    )
    await client.close()


async def _gone(cluster: LocalCluster, pid: int) -> bool:
    async with httpx.AsyncClient(base_url=cluster.urls[0]) as http:
        shards = (await http.get("/v1/cluster")).json()["shards"]
    return pid not in {s["pid"] for s in shards}


async def test_a_lease_lost_while_paused_is_counted(cluster: LocalCluster) -> None:
    name = f"paused-{time.time_ns()}"
    client = await WsClient.connect(cluster.urls[0], AGENT, name)
    await _chat(client, "sure")
    owner = await _owner(cluster, name)
    before = await _scrape(cluster, owner.name)
    assert cluster.database_url is not None
    await stop_between_writes(owner, cluster.database_url)
    try:
        # Another shard takes the conversation while its owner sleeps.
        await eventually(lambda: _gone(cluster, owner.pid), timeout=10)
        await _chat(client, "sure")
    finally:
        os.kill(owner.pid, signal.SIGCONT)
    await client.close()
    await eventually(
        lambda: _moved(cluster, owner.name, before, "durachat_shard_leases_total", event="lost"),
        timeout=10,
    )


async def test_a_killed_shards_turn_is_recovered_in_a_span_linked_to_its_trace(
    cluster: LocalCluster, receiver: OtlpReceiver
) -> None:
    cluster.wait_ready(60)  # a shard paused by an earlier test is back
    name = f"killed-{time.time_ns()}"
    client = await WsClient.connect(cluster.urls[0], AGENT, name)
    request = chat_request([user_message("a slow story")])
    await client.send(request)
    rid = str(request["id"])
    await client.wait_for(lambda f: f.get("id") == rid and f.get("seq") == 12, timeout=20)
    # The shard running the turn: the one whose span accepted it.
    accepted = await eventually(lambda: _async(_named(receiver.snapshot(), "chat.accept", rid)))
    owner = next(p for p in cluster.processes if p.name == accepted.instance)
    jobs_before = await _scrape(cluster, "jobs-1")
    os.kill(owner.pid, signal.SIGKILL)
    owner.popen.wait(10)
    cluster.processes.remove(owner)
    cluster.spawn_shard(f"{owner.name}-r{time.time_ns() % 100_000}")
    done = await client.wait_done(rid, timeout=45)
    assert "outcome" not in done, done
    await client.close()

    async def recovery() -> tuple[ReceivedSpan, ReceivedSpan] | None:
        spans = receiver.snapshot()
        # The gateway's span of the request (the killed shard's own may not have left it).
        original = _named(spans, "chat.receive", rid)
        recovered = _named(spans, "chat.recovery", rid)
        if original is None or recovered is None:
            return None
        return original, recovered

    try:
        original, recovered = await eventually(recovery, timeout=20)
    except AssertionError:
        for s in receiver.snapshot():
            if s.attributes.get("durachat.request_id") == rid or s.name == "chat.recovery":
                print("received:", s.name, s.service, s.instance, s.attributes, s.events, s.links)
        raise
    assert recovered.service == "durachat-shard" and recovered.instance != owner.name
    # A trace of its own, linked to the interrupted turn (in the request's trace).
    assert recovered.trace_id != original.trace_id
    assert [trace_id for trace_id, _ in recovered.links] == [original.trace_id]
    events = [name for name, _ in recovered.events]
    assert events == [
        "chat:recovery:detected",
        "chat:recovery:attempt",
        "chat:recovery:scheduled",
        "chat:recovery:completed",
    ]
    for _, attributes in recovered.events:
        assert (
            attributes["durachat.payload.incidentId"]
            == recovered.attributes["durachat.recovery.incident_id"]
        )
        assert attributes["durachat.payload.attempt"] == 1
    assert recovered.attributes["durachat.recovery.outcome"] == "completed"
    # The recovered turn runs under the recovery span.
    continued = [
        s
        for s in receiver.snapshot()
        if s.name == "chat.turn" and s.parent_span_id == recovered.span_id
    ]
    assert len(continued) == 1 and continued[0].attributes["durachat.recovered"] is True
    await eventually(
        lambda: _moved(cluster, "jobs-1", jobs_before, "durachat_jobs_orphans_handed_total"),
        timeout=10,
    )
