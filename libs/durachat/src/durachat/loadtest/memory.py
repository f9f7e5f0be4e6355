"""Sampling the server's memory during a run, from its Prometheus `/metrics` endpoints
(`process_resident_memory_bytes`, docs/operations.md#health-and-metrics).

Targets are given (`--metrics-url [LABEL=]URL`) or found: the gateway at `<url>/metrics` and
each shard at the internal address `GET <url>/v1/cluster` lists (reachable from the machine
running the load test only when it is inside the cluster's network, as on `make run`).
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from durachat.loadtest.frames import http_url

RSS_METRIC: Final = "process_resident_memory_bytes"
HELD_METRICS: Final = ("durachat_gateway_connections", "durachat_shard_active_conversations")
"""What a process holds, sampled beside its memory when it exposes them (a durachat gateway's
open WebSockets, a shard's conversations in memory), to tell growth from a leak."""
MEMORY_FILE: Final = "memory.jsonl"
REDISCOVER_S: Final = 60.0


def parse_metric(text: str, name: str) -> float | None:
    """The value of the unlabelled sample `name` in a Prometheus text exposition, if there."""
    match = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})?\s+([0-9.eE+-]+)", text, re.MULTILINE)
    return float(match.group(1)) if match else None


def parse_rss(text: str) -> float | None:
    """The resident memory (bytes) in a Prometheus text exposition, if there."""
    return parse_metric(text, RSS_METRIC)


def parse_target(text: str) -> tuple[str, str]:
    """`LABEL=URL` or `URL` (labelled by its host and port)."""
    label, sep, url = text.partition("=")
    if sep and "://" not in label:
        return label, url
    return text.split("://", 1)[-1].split("/", 1)[0], text


def discover(url: str, timeout: float = 5.0) -> list[tuple[str, str]]:
    """The gateway behind `url` and the shards it lists, as (label, metrics URL)."""
    targets = [("gateway", http_url(url, "/metrics"))]
    try:
        with urllib.request.urlopen(http_url(url, "/healthz"), timeout=timeout) as answer:
            gateway = json.load(answer).get("gateway")
        if isinstance(gateway, str):
            targets = [(gateway, http_url(url, "/metrics"))]
    except (OSError, ValueError, AttributeError):
        pass
    try:
        with urllib.request.urlopen(http_url(url, "/v1/cluster"), timeout=timeout) as answer:
            shards = json.load(answer).get("shards", [])
    except (OSError, ValueError, AttributeError):
        return targets
    for shard in shards if isinstance(shards, list) else []:
        if isinstance(shard, dict) and shard.get("address"):
            targets.append((str(shard.get("id")), f"http://{shard['address']}/metrics"))
    return targets


class MemorySampler:
    """Samples every target's resident memory every `interval` seconds on a thread of its
    own, appending `{"t", "rss": {label: bytes}, "held": {label: count}}` lines to
    `out/memory.jsonl`."""

    def __init__(
        self, url: str, out: Path, *, targets: Sequence[str] = (), interval: float = 5.0
    ) -> None:
        """Sample the cluster at `url` (or the given `[LABEL=]URL` targets)."""
        self._url = url
        self._path = out / MEMORY_FILE
        self._given = [parse_target(t) for t in targets]
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory", daemon=True)
        self._targets: list[tuple[str, str]] = []
        self._found_at = 0.0

    def start(self) -> None:
        """Start sampling."""
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._thread.start()

    def stop(self) -> None:
        """Take a last sample and stop."""
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        with open(self._path, "a", encoding="utf-8") as out:
            while True:
                out.write(json.dumps(self.sample()) + "\n")
                out.flush()
                if self._stop.wait(self._interval):
                    out.write(json.dumps(self.sample()) + "\n")
                    return

    def sample(self) -> dict[str, object]:
        """One sample of every target (a target that does not answer is left out)."""
        if self._given:
            self._targets = self._given
        elif time.monotonic() - self._found_at > REDISCOVER_S or not self._targets:
            self._targets = discover(self._url)
            self._found_at = time.monotonic()
        rss: dict[str, float] = {}
        held: dict[str, float] = {}
        for label, url in self._targets:
            try:
                with urllib.request.urlopen(url, timeout=5) as answer:
                    text = answer.read().decode("utf-8", "replace")
            except (OSError, ValueError):
                continue
            value = parse_rss(text)
            if value is not None:
                rss[label] = value
            for name in HELD_METRICS:
                count = parse_metric(text, name)
                if count is not None:
                    held[label] = count
        return {"t": round(time.time(), 3), "rss": rss, "held": held}
