"""docker-compose.yml and deploy/: Docker Compose's own loader accepts the file (and refuses it
without the secrets), the services have what the file promises, and the proxy, Prometheus and
dashboard configurations agree with it and with the code."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.deploy_manifests import (
    BIN,
    COMPOSE_FILE,
    ENV_EXAMPLE,
    ROOT,
    compose_config,
    compose_project,
    load_json,
)

SECRETS = {"DURACHAT_ADMIN_KEY": "a", "DURACHAT_CLUSTER_SECRET": "c", "POSTGRES_PASSWORD": "p"}
DURACHAT = ("migrate", "shard-1", "shard-2", "shard-3", "gateway-1", "gateway-2", "jobs")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    project = compose_project(tmp_path_factory.mktemp("compose"), SECRETS)
    done = compose_config(project, profiles=("observability",))
    assert done.returncode == 0, done.stderr
    return load_json(done.stdout)


@pytest.mark.parametrize("missing", list(SECRETS))
def test_compose_refuses_to_start_without_a_secret(tmp_path: Path, missing: str) -> None:
    project = compose_project(tmp_path, {k: v for k, v in SECRETS.items() if k != missing})
    done = compose_config(project)
    assert done.returncode != 0
    assert f"set {missing} in .env" in done.stderr


def test_the_services_and_their_order(model: dict[str, Any]) -> None:
    services = model["services"]
    assert set(services) == {
        *DURACHAT,
        "redis",
        "postgres",
        "proxy",
        "otel-collector",
        "prometheus",
        "grafana",
    }
    for name in DURACHAT:
        service = services[name]
        assert service["read_only"] is True and service["cap_drop"] == ["ALL"]
        env = service["environment"]
        assert env["DURACHAT_ADMIN_KEY"] == "a" and env["DURACHAT_CLUSTER_SECRET"] == "c"
        assert env["DATABASE_URL"] == "postgresql://durachat:p@postgres:5432/durachat"
        conditions = {k: v["condition"] for k, v in service["depends_on"].items()}
        assert conditions["postgres"] == "service_healthy"
        if name != "migrate":
            assert conditions["migrate"] == "service_completed_successfully"
            assert conditions["redis"] == "service_healthy"
            assert service["healthcheck"]["test"][:4] == [
                "CMD",
                "python",
                "-m",
                "durachat_infra.probe",
            ]
            assert service["healthcheck"]["test"][4].endswith("/readyz")
    for name in ("gateway-1", "gateway-2"):
        assert services[name]["depends_on"]["shard-1"]["condition"] == "service_healthy"
    proxy = services["proxy"]
    assert {k: v["condition"] for k, v in proxy["depends_on"].items()} == {
        "gateway-1": "service_healthy",
        "gateway-2": "service_healthy",
    }
    for name in ("redis", "postgres", "proxy"):
        assert services[name]["healthcheck"]["test"]


def test_one_published_port_for_the_chat(model: dict[str, Any]) -> None:
    published = {
        name: [p["published"] for p in service.get("ports", [])]
        for name, service in model["services"].items()
        if not service.get("profiles") and service.get("ports")
    }
    assert published == {"proxy": ["8080"]}


def test_redis_keeps_its_data(model: dict[str, Any]) -> None:
    command = model["services"]["redis"]["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert model["services"]["redis"]["volumes"][0]["target"] == "/data"


def test_shards_get_time_to_drain(model: dict[str, Any]) -> None:
    for name in ("shard-1", "shard-2", "shard-3"):
        service = model["services"][name]
        drain = float(service["environment"]["DURACHAT_DRAIN_TIMEOUT"])
        assert service["stop_grace_period"] == "40s" and drain + 5 < 40
        assert service["environment"]["DURACHAT_SHARD_ADVERTISE_HOST"] == name


def test_env_example_documents_every_variable() -> None:
    used = set(re.findall(r"\$\{([A-Z0-9_]+)", COMPOSE_FILE.read_text()))
    documented = set(re.findall(r"(?m)^#? ?([A-Z0-9_]+)=", ENV_EXAMPLE.read_text()))
    assert used - documented == set()


def test_the_caddyfile_is_valid(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DURACHAT_UPSTREAMS": "gateway-1:8080 gateway-2:8080",
        "PROXY_LISTEN": ":8080",
        "HOME": str(tmp_path),
        "XDG_DATA_HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path),
    }
    caddyfile = ROOT / "deploy" / "caddy" / "Caddyfile"
    done = subprocess.run(
        [str(BIN / "caddy"), "validate", "--config", str(caddyfile), "--adapter", "caddyfile"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_prometheus_scrapes_every_process_where_it_serves_metrics(model: dict[str, Any]) -> None:
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    targets = {
        target
        for job in config["scrape_configs"]
        for static in job["static_configs"]
        for target in static["targets"]
    }
    expected = {"otel-collector:8889"}
    for name, service in model["services"].items():
        env = service.get("environment") or {}
        # Every process serves /metrics on its metrics port (docs/observability.md#metrics).
        if "DURACHAT_METRICS_PORT" in env and name in DURACHAT:
            expected.add(f"{name}:{env['DURACHAT_METRICS_PORT']}")
    assert targets == expected
    collector = yaml.safe_load((ROOT / "deploy" / "otel" / "collector.yaml").read_text())
    assert collector["exporters"]["prometheus"]["endpoint"].endswith(":8889")
    for pipeline in collector["service"]["pipelines"].values():
        for part in ("receivers", "processors", "exporters"):
            for component in pipeline.get(part, []):
                assert component in {
                    **collector["receivers"],
                    **collector["processors"],
                    **collector["exporters"],
                    **collector["connectors"],
                }


def _code_metrics() -> set[str]:
    names: set[str] = set()
    for path in [*ROOT.glob("services/*/src/**/*.py"), *ROOT.glob("libs/*/src/**/*.py")]:
        names |= set(
            re.findall(r'(?:Counter|Gauge|Histogram|Summary)\(\s*"(\w+)"', path.read_text())
        )
    return names


def test_the_dashboard_queries_what_the_processes_export() -> None:
    dashboard = json.loads(
        (ROOT / "deploy" / "grafana" / "dashboards" / "durachat.json").read_text()
    )
    exported = _code_metrics()
    suffixes = ("_total", "_bucket", "_sum", "_count")
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 12
    titles = " ".join(p["title"] for p in panels).lower()
    for topic in ("first chunk", "delivery", "chunks", "conversations", "connections", "outcome"):
        assert topic in titles
    assert "recoveries" in titles and "quota" in titles and "tenant" in titles
    for panel in panels:
        for target in panel["targets"]:
            # Metric names only: label matchers and `by (...)` name labels.
            expr = re.sub(r"\{[^}]*\}|by \([^)]*\)", "", target["expr"])
            for metric in re.findall(r"\b(durachat_\w+)", expr):
                if metric.startswith("durachat_spans_"):
                    continue  # the collector's span metrics (deploy/otel/collector.yaml)
                base = next((metric[: -len(s)] for s in suffixes if metric.endswith(s)), metric)
                if base not in exported and metric not in exported:
                    assert "Planned metric" in panel["description"], (panel["title"], metric)
    provisioning = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/dashboards/durachat.yaml").read_text()
    )
    assert provisioning["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
