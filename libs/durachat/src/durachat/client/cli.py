"""`durachat`: chat with a durachat server from the terminal.

durachat chat "hello"            send one message, print the reply, exit
durachat chat                    interactive prompt (/help lists the commands)
durachat history                 print the transcript
durachat chat --branch 57        the same on a branch (its id or name; main by default)
durachat load run --url URL      load-test a server (docs/load-testing.md)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
from collections.abc import Coroutine, Sequence
from concurrent.futures import Future
from typing import Any, TextIO, TypeVar

from durachat.client.admin_cli import add_admin_commands, run_admin
from durachat.client.chat import ChatClient
from durachat.client.errors import ClientError
from durachat.client.events_cli import add_events_command, run_events
from durachat.client.reply import Outcome, Reply, message_text
from durachat.client.urls import branch_query, fetch_history, is_branch
from durachat.protocol import MAIN_BRANCH
from durachat.types import JSONDict, UIMessage

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:8080"
EXIT_INTERRUPTED = 130

EXAMPLES = """\
examples:
  durachat chat "hello"     send one message, print the reply, exit
  durachat chat             chat interactively (/help lists the commands)
  durachat history          print the conversation
  durachat history --branch 57   print a branch of it (by id or name)
  durachat events --follow --types 'chat:turn:*'   follow the event feed (JSON lines)"""

HELP = """\
commands:
  /history         show the conversation (the branch you view)
  /regenerate      answer the last message again (the old answer is kept on a branch)
  /edit TEXT       replace your last message with TEXT and answer it (the old one is kept)
  /branches        list the branches (* marks the one you view)
  /switch BRANCH   view another branch (its id or name; main for main)
  /siblings        where the last reply is among its alternatives (2 / 3)
  /branch NAME     create a branch NAME at the end of this one (you stay here)
  /rename BRANCH NAME  rename a branch (BRANCH: its id, or a name without spaces)
  /delete BRANCH   delete a branch and the messages only it has
  /clear           delete the conversation (for everyone; on a branch, empty that branch)
  /quit            leave (Ctrl-D works too)
Ctrl-C stops a reply that is still coming.
A tool call that needs your approval is asked about (y/n) when the reply ends."""


class _Loop:
    """An event loop on a thread of its own.

    The main thread keeps `input()` (line editing) and receives Ctrl-C as KeyboardInterrupt
    wherever it waits, so a reply can be cancelled while it streams.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="durachat", daemon=True)
        self._thread.start()

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.submit(coroutine).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `durachat` command.

    Args:
        argv: The arguments (without the program name); `sys.argv[1:]` by default.

    Returns:
        The exit status: 0 on success, 1 on an error, 130 when interrupted.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["load"]:
        from durachat.loadtest.cli import main as load

        return load(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "admin":
        return run_admin(args)
    try:
        if args.command == "history":
            return _history(args)
        if args.command == "events":
            return run_events(args, _auth())
        if args.message is not None:
            return _one_shot(args)
        return _interactive(args)
    except ClientError as exc:
        _err(f"error: {exc.message}{_hint(exc, args)}")
        return 1
    except KeyboardInterrupt:
        _err("")
        return EXIT_INTERRUPTED


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url",
        default=os.environ.get("DURACHAT_URL", DEFAULT_URL),
        help="the server's base URL (default: $DURACHAT_URL or %(default)s)",
    )
    common.add_argument("--agent", default="chat-agent", help="agent name (default: %(default)s)")
    common.add_argument(
        "--name", default="default", help="conversation name (default: %(default)s)"
    )
    common.add_argument(
        "--branch", default=None, help="branch to view, by id or name (default: main)"
    )
    parser = argparse.ArgumentParser(
        prog="durachat",
        description="Chat with a durachat server.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EXAMPLES,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chat = commands.add_parser(
        "chat",
        parents=[common],
        help="send a message, or chat interactively",
        description="Send MESSAGE and print the reply; without MESSAGE, chat interactively.",
    )
    chat.add_argument("message", nargs="?", metavar="MESSAGE", help="the message to send")
    commands.add_parser(
        "history",
        parents=[common],
        help="print the conversation",
        description="Print the conversation's transcript.",
    )
    add_events_command(commands, common)
    commands.add_parser("load", add_help=False, help="load-test a server (durachat load --help)")
    add_admin_commands(commands, common)
    return parser


def _auth() -> dict[str, str]:
    """An API key or client token from `DURACHAT_API_KEY`, for a gateway that needs one."""
    credential = os.environ.get("DURACHAT_API_KEY")
    return {"Authorization": f"Bearer {credential}"} if credential else {}


def _history(args: argparse.Namespace) -> int:
    messages = asyncio.run(
        fetch_history(args.url, args.agent, args.name, branch=args.branch, headers=_auth())
    )
    if not messages:
        on = "" if branch_query(args.branch) is None else f" on branch {args.branch}"
        _err(f"(no messages in {args.agent}/{args.name}{on})")
    _print_transcript(messages, sys.stdout)
    return 0


async def _connect(args: argparse.Namespace) -> ChatClient:
    return await ChatClient.connect(
        args.url, args.agent, args.name, branch=args.branch, headers=_auth()
    )


def _one_shot(args: argparse.Namespace) -> int:
    loop = _Loop()
    try:
        client = loop.run(_connect(args))
        try:
            reply = loop.run(client.send(args.message))
            outcome = _follow_turn(loop, client, reply)
        finally:
            loop.run(client.close())
    finally:
        loop.close()
    return {"completed": 0, "aborted": EXIT_INTERRUPTED}.get(outcome, 1)


def _interactive(args: argparse.Namespace) -> int:
    loop = _Loop()
    try:
        client = loop.run(_connect(args))
        try:
            if sys.stdin.isatty():
                earlier = len(client.messages)
                on = "" if client.branch == MAIN_BRANCH else f" (branch {client.branch})"
                _err(
                    f"{args.agent}/{args.name}{on} at {args.url}. /help for commands, Ctrl-D quits."
                )
                if earlier:
                    _err(f"({earlier} earlier messages; /history shows them)")
            return _prompt_loop(loop, client)
        finally:
            loop.run(client.close())
    finally:
        loop.close()


def _prompt_loop(loop: _Loop, client: ChatClient) -> int:
    while True:
        try:
            line = input("you> ").strip()
        except EOFError:
            _out("")
            return 0
        except KeyboardInterrupt:
            _out("")
            continue
        if line in ("/quit", "/exit"):
            return 0
        try:
            _run_line(loop, client, line)
        except ClientError as exc:
            _err(f"error: {exc.message}")
            if exc.code in ("closed", "disconnected"):
                return 1


def _run_line(loop: _Loop, client: ChatClient, line: str) -> None:
    viewed = client.branch
    try:
        _run_command(loop, client, line)
    finally:
        if client.branch != viewed:
            _note_branch(loop, client)


def _run_command(loop: _Loop, client: ChatClient, line: str) -> None:
    if not line:
        return
    if not line.startswith("/"):
        _follow_turn(loop, client, loop.run(client.send(line)))
        return
    command, _, argument = line.partition(" ")
    command, argument = command.lower(), argument.strip()
    if command == "/help":
        _err(HELP)
    elif command == "/history":
        _print_transcript(loop.run(client.history()), sys.stdout)
    elif command == "/clear":
        loop.run(client.clear())
        cleared = "conversation" if client.branch == MAIN_BRANCH else f"branch {client.branch}"
        _err(f"({cleared} cleared)")
    elif command == "/regenerate":
        _follow_turn(loop, client, loop.run(client.regenerate()))
    elif command == "/edit":
        last = next((m for m in reversed(client.messages) if m.get("role") == "user"), None)
        if not argument:
            _err("usage: /edit TEXT (replaces your last message)")
        elif last is None or not isinstance(last.get("id"), str):
            _err("(no message of yours to edit)")
        else:
            _follow_turn(loop, client, loop.run(client.edit(str(last["id"]), argument)))
    elif command == "/branches":
        listed = loop.run(client.branches())
        _print_branches(listed, client.branch, sys.stdout)
        if not listed:
            _err("(no branches yet: the conversation has no messages)")
    elif command == "/switch":
        if not argument:
            _err("usage: /switch BRANCH (its id or name)")
        else:
            before = client.branch
            loop.run(client.switch_branch(argument))
            if client.branch == before:
                _err(f"(already on branch {before})")
    elif command in _BRANCH_COMMANDS:
        _branch_command(loop, client, command, argument)
    else:
        _err(f"unknown command {command} (/help lists them)")


_BRANCH_COMMANDS = frozenset({"/siblings", "/branch", "/rename", "/delete"})


def _branch_command(loop: _Loop, client: ChatClient, command: str, argument: str) -> None:
    """`/siblings`, `/branch NAME`, `/rename BRANCH NAME`, `/delete BRANCH`."""
    if command == "/siblings":
        last = next((m for m in reversed(client.messages) if m.get("role") == "assistant"), None)
        if last is None or not isinstance(last.get("id"), str):
            _err("(no reply to look at)")
            return
        ids, index = loop.run(client.siblings(str(last["id"])))
        _out(f"{index + 1} / {len(ids)}")
    elif command == "/branch":
        if not argument:
            _err("usage: /branch NAME (a new branch at the end of this one)")
            return
        created = loop.run(client.create_branch(argument))
        _err(f"(created branch {created.get('id')}: {created.get('name')})")
    elif command == "/rename":
        branch, _, name = argument.partition(" ")
        if not branch or not name.strip():
            _err("usage: /rename BRANCH NAME (BRANCH: its id, or a name without spaces)")
            return
        renamed = loop.run(client.rename_branch(branch, name.strip()))
        _err(f"(renamed branch {renamed.get('id')}: {renamed.get('name')})")
    elif not argument:
        _err("usage: /delete BRANCH (its id or name)")
    else:
        deleted = loop.run(client.delete_branch(argument))
        _err(f"(deleted branch {argument}: {deleted} messages)")


def _note_branch(loop: _Loop, client: ChatClient) -> None:
    """Tell the user that they view another branch now (its id and name)."""
    branch = client.branch
    name = None
    if branch != MAIN_BRANCH:
        try:
            listed = loop.run(client.branches())
        except ClientError:
            listed = []
        name = next((b.get("name") for b in listed if str(b.get("id")) == branch), None)
    _err(f"(now on branch {branch}: {name})" if name else f"(now on branch {branch})")


def _print_branches(branches: list[JSONDict], viewing: str, out: TextIO) -> None:
    """One line per branch: `*` for the viewed one, its id, name and leaf message."""
    for branch in branches:
        mark = "*" if is_branch(branch, viewing) else " "
        leaf = branch.get("leaf_message_id") or "(empty)"
        out.write(f"{mark} {branch.get('id')}\t{branch.get('name')}\t{leaf}\n")
    out.flush()


def _follow_turn(loop: _Loop, client: ChatClient, reply: Reply) -> Outcome:
    """Print a reply, then ask about the approvals it requests and print the continuations."""
    outcome = _follow(loop, client, reply)
    while outcome == "completed":
        calls = [c for c in client.pending_tool_calls() if c.message_id == reply.message_id]
        continuation = None
        for call in calls:
            if not call.needs_approval:
                _err(f"(the tool {call.tool_name} waits for a result from the client)")
                continue
            approved = _ask_approval(call.tool_name, call.input)
            if approved is None:
                _err(f"(the tool {call.tool_name} still waits for an approval)")
                return outcome
            continuation = (
                loop.run(client.approve_tool(call.tool_call_id, approved)) or continuation
            )
        if continuation is None:
            return outcome
        reply = continuation
        outcome = _follow(loop, client, reply)
    return outcome


def _ask_approval(tool_name: str, tool_input: object) -> bool | None:
    """Ask y/n on the terminal; None if there is no answer (end of input, Ctrl-C)."""
    question = f"approve {tool_name} {json.dumps(tool_input)}? [y/n] "
    while True:
        try:
            answer = input(question).strip().lower()
        except (EOFError, KeyboardInterrupt):
            _out("")
            return None
        if answer in ("y", "yes"):
            return True
        if answer in ("n", "no"):
            return False


def _follow(loop: _Loop, client: ChatClient, reply: Reply) -> Outcome:
    """Print a reply as it streams; the first Ctrl-C cancels it, a second one gives up."""
    printing = loop.submit(_print_reply(reply, sys.stdout))
    cancelled = False
    while True:
        try:
            outcome = printing.result()
            break
        except KeyboardInterrupt:
            if cancelled:
                printing.cancel()
                raise
            cancelled = True
            loop.run(client.cancel(reply.request_id))
    if outcome == "aborted":
        _err("(cancelled)")
    elif outcome == "skipped":
        _err("(the server did not answer this message)")
    elif outcome == "error":
        message = reply.error.message if reply.error is not None else "the reply failed"
        _err(f"error: {message}")
    return outcome


async def _print_reply(reply: Reply, out: TextIO) -> Outcome:
    wrote = ""
    async for chunk in reply:
        delta = chunk.get("delta")
        if chunk.get("type") == "text-delta" and isinstance(delta, str) and delta:
            out.write(delta)
            out.flush()
            wrote = delta
    outcome = await reply.wait()
    if wrote and not wrote.endswith("\n"):
        out.write("\n")
        out.flush()
    return outcome


def _print_transcript(messages: list[UIMessage], out: TextIO) -> None:
    for message in messages:
        role = message.get("role")
        label = "you" if role == "user" else str(role)
        out.write(f"{label}: {_render(message)}\n")
    out.flush()


def _render(message: UIMessage) -> str:
    text = message_text(message)
    extras = []
    parts = message.get("parts")
    for part in parts if isinstance(parts, list) else []:
        kind = part.get("type") if isinstance(part, dict) else None
        if isinstance(kind, str) and (kind.startswith("tool-") or kind == "dynamic-tool"):
            name = part.get("toolName") if kind == "dynamic-tool" else kind[len("tool-") :]
            extras.append(f"[tool {name}: {part.get('state')}]")
        elif kind == "file":
            extras.append(f"[file {part.get('mediaType', '')}]".replace(" ]", "]"))
    return " ".join([*extras, text] if text else extras)


def _hint(error: ClientError, args: argparse.Namespace) -> str:
    if error.code not in ("connect_failed", "http_error"):
        return ""
    if error.status is None:
        return f"\n(is the server running at {args.url}? `make run` starts one)"
    if error.status == 400:
        return (
            f"\n(the server does not serve the agent {args.agent!r}; "
            "if it has just started, try again in a few seconds)"
        )
    return ""


def _out(text: str) -> None:
    print(text, flush=True)


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
