"""Running the `durachat` command line as a real process."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

DURACHAT = Path(sys.executable).parent / "durachat"
"""The `durachat` script of the environment running the tests."""


async def run_cli(
    *args: str,
    stdin: str | None = None,
    timeout: float = 30.0,
    env: dict[str, str] | None = None,
) -> tuple[int, str, str]:
    """Run `durachat *args` (feeding it `stdin`, with `env` added to the environment); returns
    its exit code, stdout and stderr."""
    process = await asyncio.create_subprocess_exec(
        str(DURACHAT),
        *args,
        env={**os.environ, **(env or {})},
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(timeout):
            out, err = await process.communicate(stdin.encode() if stdin is not None else None)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()
