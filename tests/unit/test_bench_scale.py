"""The benchmark's cluster shapes and scale runs: option parsing, how conversations spread over
gateways, CPU summed per role, and the capacity model read from CPU per delivered chunk."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import bench.run
import pytest
from bench.baseline import play
from bench.loadgen import Conversation, Request, Samples, _ports
from bench.phases import PHASES, parse_phases, reply_timeout, spread, warmup_ramp
from bench.procs import Proc, by_role
from bench.report import _cpu, _front
from bench.run import make_params, parse_args
from bench.scale import capacity, int_list, shapes, summarise
from bench.targets import cluster_env

from durachat.models.scripted import ECHO_INTERVAL, _delay_scale


def test_shape_and_phases_options_default_to_todays_run() -> None:
    params = make_params(parse_args([]))
    assert (params.shards, params.gateways) == (2, 1)
    assert params.phases == list(PHASES)
    assert params.timeout == 30.0


def test_shape_and_phases_options_reach_the_params() -> None:
    params = make_params(parse_args(["--shards", "3", "--gateways", "2", "--phases", "load,idle"]))
    assert (params.shards, params.gateways) == (3, 2)
    assert params.phases == ["idle", "load"]  # in the order phases run


@pytest.mark.parametrize("argv", [["--shards", "0"], ["--gateways", "-1"], ["--phases", "nap"]])
def test_bad_shape_or_phase_is_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)


def test_parse_phases_rejects_an_empty_list() -> None:
    with pytest.raises(ValueError):
        parse_phases(" , ")


def test_reply_timeout_grows_with_conversations_past_200() -> None:
    assert reply_timeout(20, 20.0) == 20.0
    assert reply_timeout(200) == 30.0
    assert reply_timeout(1000) == 150.0
    params = make_params(parse_args(["--conversations", "1000"]))
    assert params.timeout == 150.0
    # The parent waits for the warm-up and every measured round to time out, and more.
    assert params.load_timeout() > (1 + params.rounds) * params.timeout


def test_first_messages_ramp_only_past_200_conversations() -> None:
    assert warmup_ramp(200) == 0.0 and make_params(parse_args([])).ramp_s == 0.0
    assert warmup_ramp(1000) == 10.0
    assert make_params(parse_args(["--conversations", "1000"])).ramp_s == 10.0
    assert make_params(parse_args(["--conversations", "1000", "--ramp", "0"])).ramp_s == 0.0


def test_delta_interval_paces_both_targets_and_lengthens_the_reply_timeout() -> None:
    params = make_params(parse_args([]))
    assert params.delta_interval_ms == 20.0
    assert cluster_env()["DURACHAT_SCRIPTED_DELAY_SCALE"] == "1.0"
    params = make_params(parse_args(["--conversations", "1000", "--delta-interval", "500"]))
    assert params.delta_interval_ms == 500.0
    # 41 deltas 480 ms further apart than the default: each reply takes 19.7 s longer.
    assert params.timeout == pytest.approx(150.0 + 41 * 0.48)
    env = cluster_env(params.delta_interval_ms / 1e3)
    scale = _delay_scale({"delay_scale": env["DURACHAT_SCRIPTED_DELAY_SCALE"]})
    assert ECHO_INTERVAL * scale == pytest.approx(0.5)
    with pytest.raises(SystemExit):
        make_params(parse_args(["--delta-interval", "0"]))


async def test_the_relay_producer_paces_its_deltas_by_the_interval() -> None:
    class Recorder:
        def __init__(self) -> None:
            self.times: list[float] = []

        def add(self, key: str, frame: str) -> None:
            if '\\"text-delta\\"' in frame:
                self.times.append(time.monotonic())

    recorder = Recorder()
    await play(recorder, "k", "r1", "one two three", [], interval=0.05)  # type: ignore[arg-type]
    assert len(recorder.times) == 4  # `echo: `, `one `, `two `, `three`
    assert recorder.times[-1] - recorder.times[0] >= 3 * 0.05 - 0.005


async def test_a_refused_request_ends_with_its_one_frame() -> None:
    conversation = Conversation("c", Samples())
    request = conversation.request = Request("r1", 0, expected=3)
    refused = {
        "type": "cf_agent_use_chat_response",
        "id": "r1",
        "body": "The conversation is unavailable right now. Please retry.",
        "done": True,
        "error": True,
        "outcome": "error",
    }
    conversation.on_text(json.dumps(refused).encode(), 42)
    assert request.done.done() and request.done_ns == 42
    assert request.record(timed_out=False, closed=False)["errors"] == [
        "error_frame",
        "missing_deltas",
        "outcome_error",
    ]


async def test_a_reply_error_frame_does_not_end_the_request() -> None:
    conversation = Conversation("c", Samples())
    request = conversation.request = Request("r1", 0, expected=3)
    error = {"type": "cf_agent_use_chat_response", "id": "r1", "body": "x", "done": False}
    conversation.on_text(json.dumps({**error, "error": True}).encode(), 1)
    assert not request.done.done() and request.error_frames == 1


def test_conversations_go_round_robin_over_gateways_whatever_the_generators() -> None:
    names = [f"c{i}" for i in range(8)]
    # The port follows the conversation's place in the whole list, not in a generator's part.
    parts = spread(names, [7001, 7002], 4)
    assert parts[0] == (["c0", "c4"], [7001, 7001])
    assert parts[1] == (["c1", "c5"], [7002, 7002])
    ports = [port for _, part_ports in parts for port in part_ports]
    assert ports.count(7001) == ports.count(7002) == 4
    three = spread(names, [1, 2, 3], 4)
    assert sorted(n for part, _ in three for n in part) == sorted(names)
    assert {n: p for part, ps in three for n, p in zip(part, ps, strict=True)} == {
        f"c{i}": [1, 2, 3][i % 3] for i in range(8)
    }


def test_one_gateway_keeps_every_conversation_on_it() -> None:
    [(names, ports)] = spread(["a", "b", "c"], [9000], 1)
    assert names == ["a", "b", "c"] and ports == [9000, 9000, 9000]


def test_load_generator_reads_one_port_per_conversation_or_the_single_port() -> None:
    assert _ports({"port": 5, "ports": None, "names": ["a", "b"]}) == [5, 5]
    assert _ports({"port": 5, "ports": [6, 7], "names": ["a", "b"]}) == [6, 7]
    with pytest.raises(ValueError):
        _ports({"port": 5, "ports": [6], "names": ["a", "b"]})


def test_cpu_sums_over_every_process_of_a_role() -> None:
    procs = [
        Proc("shard", "shard-1", 1),
        Proc("shard", "shard-2", 2),
        Proc("gateway", "gw-1", 3),
        Proc("gateway", "gw-2", 4),
        Proc("redis", "redis", 5),
        Proc("client", "client-0", 6),
    ]
    per_name = {"shard-1": 1.5, "shard-2": 2.25, "gw-1": 0.5, "gw-2": None, "redis": 0.25}
    assert by_role(per_name, procs) == {"shard": 3.75, "gateway": 0.5, "redis": 0.25, "client": 0.0}


def test_report_counts_every_gateway_as_the_front() -> None:
    assert _front("gw-1") and _front("gw-2") and _front("relay")
    assert not _front("shard-1")
    result = {"load": {"cpu_us_per_delta": {"gw-1": 100.0, "gw-2": 120.0, "shard-1": 500.0}}}
    assert _cpu(_front)(result) == 220.0


def test_scale_shapes_cover_both_curves_once() -> None:
    assert shapes([1, 2, 3], [1, 2], 2) == [(1, 1), (1, 2), (1, 3), (2, 2)]
    assert int_list("1, 2,2,3") == [1, 2, 3]


def _document(deltas: int, cpu_s: dict[str, float], other: float = 0.5) -> dict[str, Any]:
    return {
        "results": {
            "durachat": {
                "machine_busy_before_pct": 12.0,
                "load": {
                    "chunks_per_s": deltas / 10,
                    "deltas": deltas,
                    "expected_deltas": deltas,
                    "window_s": 10.0,
                    "latency_ms": {"p50": 5.0, "p99": 50.0},
                    "ttft_ms": {"p50": 20.0, "p99": 200.0},
                    "connect_ms": {"p50": 2.0, "p99": 9.0},
                    "errors": {"requests_with_errors": 0, "by_kind": {}, "connect_failures": 0},
                    "cpu": {"wall_s": 10.0, "other_cpu_s": other},
                    "cpu_s_by_role": cpu_s,
                    "cpu_us_per_delta_by_role": {k: 1e6 * v / deltas for k, v in cpu_s.items()},
                },
            }
        },
        "failures": {},
    }


def test_summary_reads_the_load_phase_and_the_machines_other_load() -> None:
    summary = summarise(_document(10_000, {"gateway": 2.0, "shard": 5.0}, other=2.5), "durachat")
    assert summary["chunks_per_s"] == 1000.0
    assert summary["other_cpu_pct"] == 25.0
    assert summary["cpu_us_per_delta_by_role"] == {"gateway": 200.0, "shard": 500.0}
    assert summarise({"results": {}}, "durachat")["deltas"] is None


def test_capacity_is_cpu_per_chunk_turned_into_chats_per_core() -> None:
    runs = [
        {
            "target": "durachat",
            "summary": summarise(
                _document(10_000, {"gateway": g, "shard": s, "redis": 1.0}), "durachat"
            ),
        }
        for g, s in ((2.0, 5.0), (2.5, 4.0), (3.0, 6.0))
    ]
    runs.append({"target": "baseline", "summary": summarise(_document(10_000, {}), "durachat")})
    model = capacity(runs, chunk_rate=25.0)
    gateway, shard = model["roles"]["gateway"], model["roles"]["shard"]
    assert gateway["cpu_us_per_chunk"]["median"] == 250.0  # 2.5 s / 10,000 chunks
    assert gateway["chunks_per_core_s"] == 4000.0
    assert gateway["chats_per_core"] == 160.0  # 4,000 chunks/s / 25 per chat
    assert shard["cpu_us_per_chunk"] == {"median": 500.0, "min": 400.0, "max": 600.0}
    assert shard["chats_per_core"] == 80.0
    # Gateway + shard + Redis per run: 800, 750 and 1,000 µs.
    assert model["roles"]["servers"]["cpu_us_per_chunk"]["median"] == 800.0
    assert "jobs" not in model["roles"] and gateway["runs"] == 3


def test_the_commit_is_read_in_a_linked_worktree(tmp_path: Path, monkeypatch: Any) -> None:
    common = tmp_path / "main.git"
    gitdir = common / "worktrees" / "wt"
    gitdir.mkdir(parents=True)
    (gitdir / "HEAD").write_text("ref: refs/heads/scale\n")
    (gitdir / "commondir").write_text("../..\n")
    (common / "packed-refs").write_text("# pack-refs\n" + "ab" * 20 + " refs/heads/scale\n")
    tree = tmp_path / "wt"
    tree.mkdir()
    (tree / ".git").write_text(f"gitdir: {gitdir}\n")
    monkeypatch.setattr(bench.run, "REPO_ROOT", tree)
    assert bench.run.git_commit() == "ab" * 20
    (common / "refs" / "heads").mkdir(parents=True)
    (common / "refs" / "heads" / "scale").write_text("cd" * 20 + "\n")
    assert bench.run.git_commit() == "cd" * 20


def test_capacity_leaves_out_runs_that_failed_their_requests() -> None:
    healthy = summarise(_document(10_000, {"gateway": 2.0, "shard": 5.0}), "durachat")
    failing = summarise(_document(300, {"gateway": 80.0, "shard": 1.0}), "durachat")
    failing["expected_deltas"] = 82_000
    runs = [
        {"target": "durachat", "run_id": "ok", "summary": healthy},
        {"target": "durachat", "run_id": "bad", "summary": failing},
    ]
    model = capacity(runs, chunk_rate=25.0)
    assert model["left_out"] == ["bad"]
    assert model["roles"]["gateway"]["cpu_us_per_chunk"]["median"] == 200.0
    assert capacity(runs[1:], chunk_rate=25.0)["roles"] == {}
