"""What the model layer costs on its own, and what that leaves of the shards' budget.

`python -m bench.model_layer --words N --calls M` streams the benchmark's reply (the scripted
model echoing an N-word message, N + 1 text deltas) M times in one fresh process, with no
pacing, and prints the CPU it took (`time.process_time`, every thread) as JSON:

* `layer`: through `durachat.models.stream_ui_chunks`, as a shard's agent calls it (litellm's
  `acompletion`, its stream wrapper, the conversion to UI chunks);
* `setup`: `litellm.acompletion` alone, the stream opened and closed at once;
* `provider`: the scripted provider's own stream, without litellm;
* `first`: the wall time from calling `stream_ui_chunks` to its first text delta, median over
  the `layer` path's calls (recorded as they run): the least a turn's first chunk can take in
  a shard, before any hop between processes.

Every turn a shard runs takes the `layer` path, so the shards can never spend less per delta
than it does. `budget_rows` sets it against what the run's load phase leaves the shards for the
throughput target: on C cores, delivering `0.7 * relay` deltas a second allows
`C * 1e6 / (0.7 * relay)` µs of CPU per delta for every process of the run together
(docs/benchmarks.md, "The model layer's floor").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.procs import REPO_ROOT
from bench.report import CHUNKS_RATIO_FLOOR, _cpu, _get, model_side
from bench.stats import percentile

MODEL = "durachat/scripted"
ROUNDS = 3
"""Measured passes per path; the median is reported (the machine is shared)."""


def _message(words: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": " ".join(f"w{i}" for i in range(words))}]


class _Layer:
    """The `layer` path; also keeps each call's wall time to its first text delta."""

    def __init__(self) -> None:
        self.firsts: list[float] = []

    async def __call__(self, messages: list[dict[str, Any]]) -> int:
        from durachat.models import stream_ui_chunks

        began = time.perf_counter()
        deltas = 0
        async for chunk in stream_ui_chunks(MODEL, messages, delay_scale=0):
            if chunk["type"] == "text-delta":
                if not deltas:
                    self.firsts.append(time.perf_counter() - began)
                deltas += 1
        return deltas


async def _setup(messages: list[dict[str, Any]]) -> int:
    from durachat.models._litellm import open_stream

    stream = await open_stream(MODEL, messages, delay_scale=0)
    await stream.aclose()
    return 0


async def _provider(messages: list[dict[str, Any]]) -> int:
    from durachat.models.scripted import ScriptedLLM

    deltas = 0
    stream = ScriptedLLM().astreaming(
        model="scripted", messages=messages, optional_params={"delay_scale": 0}
    )
    async for chunk in stream:
        deltas += bool(chunk["text"])
    return deltas


async def _measure(
    call: Callable[[list[dict[str, Any]]], Awaitable[int]],
    messages: list[dict[str, Any]],
    calls: int,
) -> dict[str, float]:
    for _ in range(max(1, calls // 10)):
        await call(messages)
    passes: list[tuple[float, int]] = []
    for _ in range(ROUNDS):
        deltas = 0
        began = time.process_time()
        for _ in range(calls):
            deltas += await call(messages)
        passes.append((time.process_time() - began, deltas))
    spent, deltas = sorted(passes)[ROUNDS // 2]
    return {
        "ms_per_call": 1e3 * spent / calls,
        "us_per_delta": 1e6 * spent / deltas if deltas else 0.0,
        "deltas_per_call": deltas / calls,
    }


async def measure(words: int, calls: int) -> dict[str, Any]:
    """The three paths' CPU and the time to the first delta, in this process."""
    from durachat.models import warm_up

    await warm_up(MODEL)
    messages = _message(words)
    layer = _Layer()
    return {
        "words": words,
        "calls": calls,
        "layer": await _measure(layer, messages, calls),
        "setup": await _measure(_setup, messages, calls),
        "provider": await _measure(_provider, messages, calls),
        "first": {"ms_p50": 1e3 * (percentile(layer.firsts, 50) or 0.0)},
    }


def run_model_layer(words: int, calls: int = 100) -> dict[str, Any]:
    """Measure in a fresh process (nothing else on its event loop or in its caches)."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.model_layer", "--words", str(words), "--calls", str(calls)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the model layer's measurement failed:\n{out.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def shards_budget_us(results: dict[str, Any], cores: int) -> float | None:
    """CPU per delivered delta left to the shards (all together) when the run's cluster
    delivers the target fraction of the relay's chunks/s, its other processes (gateway, jobs,
    Redis, load generator) costing per delta what they did in the run's load phase."""
    relay = _get("load", "chunks_per_s")(results.get("baseline", {}))
    others = _cpu(lambda name: not model_side(name))(results.get("durachat", {}))
    if not relay or others is None:
        return None
    return cores * 1e6 / (CHUNKS_RATIO_FLOOR * float(relay)) - float(others)


def budget_rows(layer: dict[str, Any], results: dict[str, Any], cores: int) -> list[list[str]]:
    """The printed rows: the model layer's cost, and the shards' budget it eats into."""
    through = layer["layer"]
    rows = [
        ["model layer, CPU per text delta (us)", f"{through['us_per_delta']:.1f}"],
        ["model layer, CPU per call (ms)", f"{through['ms_per_call']:.2f}"],
        ["  of which opening the call (ms)", f"{layer['setup']['ms_per_call']:.2f}"],
        ["model layer, call to first text delta (ms, p50)", f"{layer['first']['ms_p50']:.2f}"],
        [
            "provider's own stream, CPU per text delta (us)",
            f"{layer['provider']['us_per_delta']:.1f}",
        ],
    ]
    budget = shards_budget_us(results, cores)
    if budget is not None:
        rows.append(
            [
                f"shards' budget per delta for {CHUNKS_RATIO_FLOOR:g}x the relay (us)",
                f"{budget:.1f}",
            ]
        )
        rows.append(
            [
                "model layer's share of that budget",
                f"{through['us_per_delta'] / budget:.2f}" if budget > 0 else "over",
            ]
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.model_layer", description=__doc__)
    parser.add_argument("--words", type=int, default=40)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args(argv)
    os.environ.setdefault("DURACHAT_LOG_LEVEL", "WARNING")
    import uvloop

    result = uvloop.run(measure(args.words, args.calls))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
