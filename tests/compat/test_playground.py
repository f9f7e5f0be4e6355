"""The web playground (`/playground`) in a real headless Chromium, driven by Playwright
(`playwright-core`, tests/compat/playground.mjs): a reply streams, a slow reply stops, a reload
in the middle of a reply resumes it, an edit's `< n / m >` picker switches branches, a tool call
is approved and a client tool answered.

Needs Debian's `chromium` (`make test` installs it when missing) and the compat packages.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import uuid
from pathlib import Path

import pytest

from durachat_infra.local.cluster import LocalCluster

HERE = Path(__file__).resolve().parent
NODE = shutil.which("node")
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
DRIVER_TIMEOUT = 90.0

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(150),
    pytest.mark.skipif(NODE is None, reason="node is not installed"),
    pytest.mark.skipif(
        not (HERE / "node_modules" / "playwright-core").is_dir(),
        reason="tests/compat/node_modules is missing: `npm ci` in tests/compat (make test runs it)",
    ),
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(),
        reason=f"no Chromium at {CHROMIUM}: apt-get install chromium (make test installs it)",
    ),
]


async def test_the_playground_in_a_browser(cluster: LocalCluster, tmp_path: Path) -> None:
    assert NODE is not None
    screenshot = tmp_path / "playground.png"
    process = await asyncio.create_subprocess_exec(
        NODE,
        str(HERE / "playground.mjs"),
        cluster.urls[0],
        f"playground-{uuid.uuid4().hex[:8]}",
        str(screenshot),
        cwd=HERE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), DRIVER_TIMEOUT)
    except TimeoutError:
        process.kill()
        stdout, stderr = await process.communicate()
        pytest.fail(f"the browser driver did not finish: {stdout!r} {stderr[-3000:]!r}")
    lines = stdout.decode(errors="replace").strip().splitlines()
    result = json.loads(lines[-1]) if lines else {"ok": False, "reason": "no output"}
    assert result["ok"] is True, json.dumps(result, indent=2) + stderr.decode()[-3000:]
    assert screenshot.stat().st_size > 0
    print(json.dumps(result["steps"]))
