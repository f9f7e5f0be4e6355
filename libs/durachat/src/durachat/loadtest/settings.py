"""The load test's settings: Locust command-line options (`--durachat-*`) and their defaults.

The options are added to Locust's parser when `durachat.loadtest.users` is imported (by our
locustfile or yours); the master sends them to its workers with every spawn message.
Nothing here imports Locust.
"""

from __future__ import annotations

import argparse
import os
import secrets
from dataclasses import dataclass, field
from typing import Any, Protocol


class ArgumentParser(Protocol):
    """What is used of Locust's (configargparse) parser."""

    def add_argument(self, *names: str, **options: Any) -> Any:
        """Add an option."""


def parse_range(text: str) -> tuple[float, float]:
    """`"1-3"` → (1.0, 3.0); `"2"` → (2.0, 2.0) (seconds)."""
    low, _, high = text.partition("-")
    first = float(low)
    second = float(high) if high else first
    if first < 0 or second < first:
        raise ValueError(f"not a range of seconds: {text!r}")
    return first, second


def parse_weights(text: str) -> dict[str, int]:
    """`"ChatUser=3,ResumeUser=1"` → {"ChatUser": 3, "ResumeUser": 1}."""
    weights: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, weight = item.partition("=")
        weights[name.strip()] = int(weight) if weight else 1
    return weights


@dataclass(frozen=True)
class Settings:
    """What the simulated users do (see docs/load-testing.md#options)."""

    agent: str = "chat-agent"
    api_key: str | None = None
    token_ttl_s: int = 3600
    messages: int = 3
    words: int = 8
    long_prompt: str = "slow"
    reply_timeout_s: float = 60.0
    connect_timeout_s: float = 10.0
    think_s: tuple[float, float] | None = None
    idle_hold_s: tuple[float, float] = (30.0, 60.0)
    reconnect_delay_s: tuple[float, float] = (0.05, 0.5)
    weights: dict[str, int] = field(default_factory=dict)
    timeline: str | None = None
    run_id: str = field(default_factory=lambda: secrets.token_hex(3))

    @classmethod
    def from_options(cls, options: argparse.Namespace | None) -> Settings:
        """The settings Locust parsed (the defaults when run without Locust's parser)."""
        if options is None or not hasattr(options, "durachat_agent"):
            return cls()
        think = options.durachat_think
        return cls(
            agent=options.durachat_agent,
            api_key=options.durachat_api_key or os.environ.get("DURACHAT_API_KEY") or None,
            token_ttl_s=int(options.durachat_token_ttl),
            messages=max(1, int(options.durachat_messages)),
            words=max(1, int(options.durachat_words)),
            long_prompt=options.durachat_long_prompt,
            reply_timeout_s=float(options.durachat_reply_timeout),
            connect_timeout_s=float(options.durachat_connect_timeout),
            think_s=parse_range(think) if think else None,
            idle_hold_s=parse_range(options.durachat_idle_hold),
            reconnect_delay_s=parse_range(options.durachat_reconnect_delay),
            weights=parse_weights(options.durachat_weights or ""),
            timeline=options.durachat_timeline or None,
            run_id=options.durachat_run_id or secrets.token_hex(3),
        )


def add_arguments(parser: ArgumentParser) -> None:
    """Add the `--durachat-*` options to Locust's parser (each also read from an environment
    variable, `DURACHAT_LOAD_<NAME>`)."""
    group: Any = parser.add_argument_group(  # type: ignore[attr-defined]
        "durachat", "Options of the durachat load-test users (durachat.loadtest)"
    )

    def option(name: str, help_text: str, **kwargs: Any) -> None:
        env = "DURACHAT_LOAD_" + name.upper().replace("-", "_")
        group.add_argument(f"--durachat-{name}", env_var=env, help=help_text, **kwargs)

    option("agent", "agent to load (default: %(default)s)", default="chat-agent")
    option(
        "api-key",
        "tenant API key: each conversation gets a client token from POST /v1/tokens "
        "(also $DURACHAT_API_KEY; none: an open cluster)",
        default=None,
    )
    option(
        "token-ttl", "lifetime asked for each token, seconds (default: %(default)s)", default=3600
    )
    option("messages", "messages per conversation (default: %(default)s)", default=3)
    option("words", "words per message (default: %(default)s)", default=8)
    option(
        "long-prompt",
        "message asking for a long reply, for the long and resume users (default: %(default)s)",
        default="slow",
    )
    option("reply-timeout", "seconds a reply may take (default: %(default)s)", default=60)
    option("connect-timeout", "seconds a connection may take (default: %(default)s)", default=10)
    option("think", "think time between messages, seconds: 'MIN-MAX' (default: each user's own)")
    option("idle-hold", "how long an idle tab stays connected, 'MIN-MAX' s", default="30-60")
    option("reconnect-delay", "pause before a resume reconnects, 'MIN-MAX' s", default="0.05-0.5")
    option("weights", "user class weights, e.g. 'ChatUser=3,ResumeUser=1'", default="")
    option("timeline", "write a JSON line of live metrics per second to this file", default="")
    option("run-id", "prefix of the conversation names (default: random)", default="")
