"""Compatibility with the real JavaScript client stack: agents, @cloudflare/ai-chat, ai (npm).

Each scenario runs `node tests/compat/driver.mjs <urls> <scenario>` against a real local cluster
(2 gateways, 2 shards, 1 jobs worker). The driver drives `AgentClient`, `WebSocketChatTransport`
and the AI SDK's `AbstractChat` the way `useAgentChat` does, prints one JSON line and exits 0 on
success. `make test` installs the pinned packages (`npm ci` in tests/compat) first.
"""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from durachat_infra.local.cluster import LocalCluster
from support.compat_driver import DRIVER_TIMEOUT, driver_missing, run_driver
from support.tenancy import create_tenant, mint

AGENT = "chat-agent"

SCENARIOS = [
    "chat",
    "resume-drop",
    "resume-reload",
    "cancel",
    "clear",
    "regenerate",
    "two-tabs",
    # Tools (docs/agents.md#tools, docs/protocol.md#continuations): a server tool in one turn; a
    # client tool answered by onToolCall + addToolOutput, then the server's continuation; a
    # needsApproval tool approved / rejected through addToolApprovalResponse; a second tab
    # watching a client-tool round trip.
    "server-tool",
    "client-tool",
    "approve",
    "reject",
    "tool-two-tabs",
    # Preliminary results of a streaming (async generator) server tool, live in the sender, an
    # observer tab and a tab loaded mid-stream, then final everywhere and after reload
    # (docs/agents.md#server-tools, docs/protocol.md#how-chunks-become-parts). Custom data parts:
    # replaced by type + id, appended, transient ones onData-only.
    "preliminary",
    "data-parts",
    # messageConcurrency through the real client (docs/agents.md#message_concurrency): sends made
    # while a reply streams are superseded (latest, debounce), merged (merge) or refused and
    # rolled back (drop).
    "concurrency-latest",
    "concurrency-merge",
    "concurrency-debounce",
    "concurrency-drop",
    # Branch views: a tab naming a branch in its URL loads, chats on and reloads only that branch;
    # a tab on main never sees it.
    "branch-view",
    # Edit and regenerate with the real client: an edit (sendMessage({text, messageId})), a
    # regenerate, a stop then regenerate each answer where the tab is, as the reference does;
    # a reload without a branch and another tab on main show the same; each replaced version
    # (the stopped partial too) is kept on a branch that the siblings point at.
    "branch-edit",
    # The AI SDK's own useChat transport (DefaultChatTransport over HTTP + SSE, aisdk.mjs): a
    # chat a WebSocket tab sees live, regenerate, edit and a branch; a dropped response resumed
    # from the start after a reload, an explicit stop; client tools and approvals.
    "aisdk-chat",
    "aisdk-resume",
    "aisdk-tools",
]
TWO_GATEWAYS = {
    "resume-reload",
    "clear",
    "two-tabs",
    "tool-two-tabs",
    "preliminary",
    "data-parts",
    "branch-view",
    "branch-edit",
    "aisdk-chat",
    "aisdk-resume",
}
"""Scenarios whose second client connects through the second gateway."""
AGENTS = {
    "preliminary": "compat-live-tool-agent",
    "data-parts": "compat-data-agent",
    "concurrency-latest": "latest-agent",
    "concurrency-merge": "merge-agent",
    "concurrency-debounce": "debounce-agent",
    "concurrency-drop": "drop-agent",
}
"""The agent of each scenario that does not talk to the demo agent (support.agents,
support.compat_agents; the test cluster serves both)."""
AUTH_SCENARIOS = ["auth-refused", "chat", "resume-drop", "resume-reload"]
"""Scenarios run against a cluster that requires credentials, every tab holding a client token
(`query: {token}`), as a browser app does (docs/security.md#client-tokens): the real client
must chat, resume and reload exactly as without auth."""
KNOWN_SERVER_BUGS: dict[str, tuple[str, str]] = {}
"""Scenarios that fail because of a known server bug: (start of the driver's reason, the bug).
They are reported as xfail while they fail that way, and fail once they pass."""

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(120),
    pytest.mark.skipif(driver_missing() is not None, reason=driver_missing() or ""),
]


def _dump_logs(cluster: LocalCluster) -> str:
    log_dir = cluster.log_dir
    if log_dir is None or not log_dir.exists():
        return ""
    parts = []
    for path in sorted(log_dir.glob("*.log")):
        parts.append(f"----- {path.name} (tail) -----\n{path.read_text(errors='replace')[-3000:]}")
    return "\n".join(parts)


def _reason(stdout: str) -> str:
    """The driver's failure reason, or ""."""
    for line in reversed(stdout.splitlines()):
        try:
            result = json.loads(line)
        except ValueError:
            continue
        return str(result.get("reason", "")) if isinstance(result, dict) else ""
    return ""


def _explain(stdout: str) -> str:
    """The driver's JSON line, pretty-printed with its frame log one frame a line."""
    for line in reversed(stdout.splitlines()):
        try:
            result = json.loads(line)
        except ValueError:
            continue
        frames = result.pop("frames", [])
        return json.dumps(result, indent=2, ensure_ascii=False) + "\nframes:\n" + "\n".join(frames)
    return stdout


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_real_client(cluster: LocalCluster, scenario: str) -> None:
    await run_scenario(cluster, scenario)


@pytest.mark.parametrize("scenario", AUTH_SCENARIOS)
async def test_real_client_with_a_token(auth_cluster: LocalCluster, scenario: str) -> None:
    name = f"compat-{scenario}-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(base_url=auth_cluster.urls[0], timeout=20) as http:
        tenant = await create_tenant(http, known_at=auth_cluster.urls)
        token = await mint(http, tenant, AGENTS.get(scenario, AGENT), name, ttl_s=600)
    await run_scenario(auth_cluster, scenario, name=name, token=token)


async def run_scenario(
    cluster: LocalCluster, scenario: str, *, name: str | None = None, token: str | None = None
) -> None:
    """Run one driver scenario against `cluster` (with a client token, if given)."""
    urls = cluster.urls if scenario in TWO_GATEWAYS else cluster.urls[:1]
    name = name or f"compat-{scenario}-{uuid.uuid4().hex[:8]}"
    run = await run_driver(urls, scenario, AGENTS.get(scenario, AGENT), name, token=token)
    stdout, stderr = run.stdout, run.stderr
    if run.returncode is None:
        pytest.fail(
            f"driver did not exit within {DRIVER_TIMEOUT}s\n{_explain(stdout)}\n"
            f"stderr:\n{stderr[-4000:]}\n{_dump_logs(cluster)}"
        )
    known = KNOWN_SERVER_BUGS.get(scenario)
    if known is not None:
        if run.returncode == 0:
            pytest.fail(f"scenario {scenario} passes now: remove it from KNOWN_SERVER_BUGS")
        if _reason(stdout).startswith(known[0]):
            pytest.xfail(f"known server bug: {known[1]}")
        pytest.fail(
            f"scenario {scenario} failed (exit {run.returncode})\n{_explain(stdout)}\n"
            f"stderr:\n{stderr[-4000:]}\n{_dump_logs(cluster)}",
            pytrace=False,
        )
    result = json.loads(stdout.strip().splitlines()[-1])
    assert result["ok"] is True, _explain(stdout)
    print(json.dumps(result.get("observed", {}))[:2000])
