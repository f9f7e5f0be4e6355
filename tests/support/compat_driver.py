"""Running the real JavaScript client (tests/compat/driver.mjs: `agents`,
`@cloudflare/ai-chat` and `ai` from npm) against a cluster, as a Node process."""

from __future__ import annotations

import asyncio
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

COMPAT = Path(__file__).resolve().parents[1] / "compat"
DRIVER = COMPAT / "driver.mjs"
NODE = shutil.which("node")
DRIVER_TIMEOUT = 45.0
"""Seconds one driver run may take; the driver gives itself 30 s per scenario."""


def driver_missing() -> str | None:
    """Why the driver cannot run here, or None."""
    if NODE is None:
        return "node is not installed"
    if not (COMPAT / "node_modules").is_dir():
        return "tests/compat/node_modules is missing: `npm ci` in tests/compat (make test runs it)"
    return None


@dataclass(frozen=True)
class DriverRun:
    """What one driver run printed, and how it ended (`returncode` None: it timed out)."""

    returncode: int | None
    stdout: str
    stderr: str


async def run_driver(
    urls: list[str], scenario: str, agent: str, name: str, *, token: str | None = None
) -> DriverRun:
    """Run `scenario` of the driver against the gateways at `urls` on conversation `name` (each
    tab holding `token` as its `query`, if given)."""
    assert NODE is not None
    env = {**os.environ, **({"COMPAT_TOKEN": token} if token else {})}
    process = await asyncio.create_subprocess_exec(
        NODE,
        str(DRIVER),
        ",".join(urls),
        scenario,
        agent,
        name,
        cwd=COMPAT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    code: int | None
    try:
        out, err = await asyncio.wait_for(process.communicate(), DRIVER_TIMEOUT)
        code = process.returncode
    except TimeoutError:
        process.kill()
        out, err = await process.communicate()
        code = None
    return DriverRun(code, out.decode(errors="replace"), err.decode(errors="replace"))
