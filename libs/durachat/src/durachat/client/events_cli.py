"""`durachat events`: the event feed as JSON lines (docs/observability.md#subscribing-to-events)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from durachat.client.errors import ClientError
from durachat.client.events import EventsClient

IDLE_AFTER = 1.0
"""Without `--follow`: seconds with no event after which the command ends."""


def add_events_command(
    commands: argparse._SubParsersAction,  # type: ignore[type-arg]
    common: argparse.ArgumentParser,
) -> None:
    """Add `events` to the `durachat` parser (`common` holds `--url`)."""
    events = commands.add_parser(
        "events",
        help="print the event feed as JSON lines",
        description=(
            "Print the events of the feed, one JSON object a line. Without --follow: the "
            "events the feed holds (after --since), then stop; with it: keep following."
        ),
    )
    for action in common._actions:
        if "--url" in action.option_strings:
            events.add_argument("--url", default=action.default, help=action.help)
    events.add_argument("--follow", "-f", action="store_true", help="keep following new events")
    events.add_argument(
        "--types", default=None, help="comma-separated types, `prefix:*` globs (default: all)"
    )
    events.add_argument("--agent", default=None, help="only this agent's conversations")
    events.add_argument("--name", default=None, help="only this conversation")
    events.add_argument("--tenant", default=None, help="admin key only: one tenant")
    events.add_argument(
        "--since",
        default=None,
        help="start after this event id (default: with --follow, now; without, the oldest)",
    )


def run_events(args: argparse.Namespace, headers: dict[str, str]) -> int:
    """Run `durachat events`; the admin key may come from `DURACHAT_ADMIN_KEY` when no
    `DURACHAT_API_KEY` is set."""
    if not headers and os.environ.get("DURACHAT_ADMIN_KEY"):
        headers = {"Authorization": f"Bearer {os.environ['DURACHAT_ADMIN_KEY']}"}
    try:
        asyncio.run(_print_events(args, headers))
    except ClientError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


async def _print_events(args: argparse.Namespace, headers: dict[str, str]) -> None:
    client = EventsClient(args.url, headers=headers)
    since = args.since if args.since is not None else (None if args.follow else "0")
    stream = client.events(
        types=args.types.split(",") if args.types else None,
        agent=args.agent,
        name=args.name,
        tenant=args.tenant,
        last_event_id=since,
    )
    try:
        while True:
            try:
                if args.follow:
                    event = await anext(stream)
                else:
                    event = await asyncio.wait_for(anext(stream), IDLE_AFTER)
            except (StopAsyncIteration, TimeoutError):
                return
            print(event.to_json(), flush=True)
    finally:
        await stream.aclose()
