"""The Helm chart, rendered by Helm's own engine (helm-python-sdk, offline): it lints clean,
every object of every value set is valid for Kubernetes, and the objects say what an SRE
expects (probes, security contexts, drain time, network policy, secrets, hooks)."""

from __future__ import annotations

import json
from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

from support.deploy_manifests import (
    CHART,
    ROOT,
    chart_objects,
    chart_processes,
    render_chart,
)

EXTERNAL = {
    "inClusterRedis": {"enabled": False},
    "inClusterPostgresql": {"enabled": False},
    "redis": {"url": "redis://redis.example.internal:6379/0"},
    "database": {"url": "postgresql://durachat:secret@db.example.internal:5432/durachat"},
}

VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "existing-secrets": {
        "inClusterRedis": {"enabled": False},
        "inClusterPostgresql": {"enabled": False},
        "auth": {"existingSecret": "durachat-credentials"},
        "database": {"existingSecret": "durachat-credentials"},
        "redis": {"existingSecret": "durachat-credentials", "existingSecretKey": "redis-url"},
        "extraEnvFrom": [{"secretRef": {"name": "llm-keys"}}],
    },
    "ingress-and-monitoring": {
        **EXTERNAL,
        "ingress": {
            "enabled": True,
            "className": "nginx",
            "tls": [{"hosts": ["chat.example.com"], "secretName": "chat-tls"}],
        },
        "metrics": {
            "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
            "grafanaDashboard": {"enabled": True},
        },
        "networkPolicy": {
            "metricsFrom": [
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mon"}}}
            ]
        },
        "otlpEndpoint": "http://otel-collector.monitoring:4318",
    },
    "redis-cluster": {
        **EXTERNAL,
        "redis": {
            "url": "redis://:secret@redis-0.redis:6379/0",
            "clusterNodes": "redis-0.redis:6379,redis-1.redis:6379,redis-2.redis:6379",
        },
    },
    "no-autoscaling": {
        **EXTERNAL,
        "gateway": {"autoscaling": {"enabled": False}, "replicaCount": 3},
        "shard": {"autoscaling": {"enabled": False}, "replicaCount": 4},
        "config": {"model": "openai/gpt-4o-mini", "extraEnv": {"DURACHAT_IDLE_EVICT_AFTER": 120}},
    },
}

KUBERNETES_VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]
"""The chart's oldest supported version (Chart.yaml's kubeVersion) and the newest schemas."""

CREDENTIALS = {
    "DURACHAT_ADMIN_KEY": "admin-key",
    "DURACHAT_CLUSTER_SECRET": "cluster-secret",
    "DATABASE_URL": "postgresql://u:p@db:5432/d",
    "redis-url": "redis://r:6379/0",
}


@pytest.fixture(scope="module", params=list(VALUE_SETS))
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    name: str = request.param
    return name, chart_objects(render_chart(VALUE_SETS[name]))


def _of(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def _named(objects: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    return next(o for o in _of(objects, kind) if o["metadata"]["name"].endswith(suffix))


def _workloads(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] in ("Deployment", "StatefulSet", "Job")]


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_helm_lint_is_clean(name: str) -> None:
    report = helm_python.lint(str(CHART), VALUE_SETS[name], strict=True)
    assert report["errors"] == []
    # Only the informational "icon is recommended" remains (severity 1).
    assert [m for m in report["messages"] if m["severity"] > 1] == []


def test_every_object_is_valid_kubernetes(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objects = rendered
    for obj in objects:
        if obj["kind"] == "ServiceMonitor":
            _check_service_monitor(obj)
            continue
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)


def _check_service_monitor(obj: dict[str, Any]) -> None:
    """No Kubernetes schema covers the prometheus-operator CRD: its required shape, by hand."""
    assert obj["apiVersion"] == "monitoring.coreos.com/v1"
    assert obj["spec"]["selector"]["matchLabels"]
    for endpoint in obj["spec"]["endpoints"]:
        assert set(endpoint) <= {"port", "path", "interval"}
        assert endpoint["path"] == "/metrics"


def test_pods_are_locked_down_probed_and_sized(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    _, objects = rendered
    for obj in _workloads(objects):
        pod = obj["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["automountServiceAccountToken"] is False
        for container in pod["containers"]:
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True
            assert security["allowPrivilegeEscalation"] is False
            assert security["capabilities"]["drop"] == ["ALL"]
            assert container["resources"]["requests"] and container["resources"]["limits"]
        if obj["kind"] == "Deployment":
            (container,) = pod["containers"]
            assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
            assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
            assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
            assert {c["topologyKey"] for c in pod.get("topologySpreadConstraints", [])} >= (
                set() if obj["metadata"]["name"].endswith("-jobs") else {"kubernetes.io/hostname"}
            )
            annotations = obj["spec"]["template"]["metadata"]["annotations"]
            assert annotations["prometheus.io/scrape"] == "true"
            ports = {p["containerPort"] for p in container["ports"]}
            assert int(annotations["prometheus.io/port"]) in ports


def test_shards_drain_within_their_grace_period(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    _, objects = rendered
    config = _of(objects, "ConfigMap")[0]["data"]
    shard = _named(objects, "Deployment", "-shard")
    pod = shard["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > float(config["DURACHAT_DRAIN_TIMEOUT"]) + 5
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["DURACHAT_SHARD_ADVERTISE_HOST"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "status.podIP"
    )
    port = pod["containers"][0]["ports"][0]
    assert port["name"] == "internal"
    assert str(port["containerPort"]) == env["DURACHAT_SHARD_PORT"]["value"]
    assert shard["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    gateway = _named(objects, "Deployment", "-gateway")["spec"]["template"]["spec"]
    assert gateway["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"] > 0


def test_only_gateways_and_jobs_reach_the_shards(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    _, objects = rendered
    policy = _named(objects, "NetworkPolicy", "-shard")
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "shard"
    rule, *scrapers = policy["spec"]["ingress"]
    components = [
        peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
        for peer in rule["from"]
        if "podSelector" in peer
    ]
    assert components == ["gateway", "jobs"]
    assert rule["ports"] == [{"port": _shard_port(objects), "protocol": "TCP"}]
    # The scrapers of networkPolicy.metricsFrom reach the metrics port too, and only them.
    for scraper in scrapers:
        assert all("podSelector" not in peer for peer in scraper["from"])
        assert scraper["ports"] == [{"port": _metrics_port(objects), "protocol": "TCP"}]


def _metrics_port(objects: list[dict[str, Any]]) -> int:
    pod = _named(objects, "Deployment", "-shard")["spec"]["template"]["spec"]
    (port,) = [p["containerPort"] for p in pod["containers"][0]["ports"] if p["name"] == "metrics"]
    return int(port)


def _shard_port(objects: list[dict[str, Any]]) -> int:
    pod = _named(objects, "Deployment", "-shard")["spec"]["template"]["spec"]
    port: int = pod["containers"][0]["ports"][0]["containerPort"]
    return port


def test_credentials_are_generated_unless_a_secret_is_given() -> None:
    generated = chart_objects(render_chart({}))
    (secret,) = _of(generated, "Secret")
    assert {"DURACHAT_ADMIN_KEY", "DURACHAT_CLUSTER_SECRET", "DATABASE_URL", "REDIS_URL"} <= set(
        secret["data"]
    )
    existing = chart_objects(render_chart(VALUE_SETS["existing-secrets"]))
    assert _of(existing, "Secret") == []
    secrets = {"durachat-credentials": CREDENTIALS, "llm-keys": {"OPENAI_API_KEY": "sk"}}
    for spec in chart_processes(existing, secrets):
        if spec.kind in ("gateway", "shard", "jobs"):
            assert spec.env["DURACHAT_ADMIN_KEY"] == "admin-key"
            assert spec.env["DURACHAT_CLUSTER_SECRET"] == "cluster-secret"
            assert spec.env["REDIS_URL"] == "redis://r:6379/0"
        assert spec.env["DATABASE_URL"] == "postgresql://u:p@db:5432/d"


def test_every_process_gets_the_redis_cluster_nodes() -> None:
    objects = chart_objects(render_chart(VALUE_SETS["redis-cluster"]))
    kinds = set()
    for spec in chart_processes(objects, {}):
        if spec.kind in ("gateway", "shard", "jobs"):
            assert (
                spec.env["REDIS_CLUSTER_NODES"]
                == VALUE_SETS["redis-cluster"]["redis"]["clusterNodes"]
            )
            assert spec.env["REDIS_URL"] == "redis://:secret@redis-0.redis:6379/0"
            kinds.add(spec.kind)
    assert kinds == {"gateway", "shard", "jobs"}
    assert "REDIS_CLUSTER_NODES" not in json.dumps(chart_objects(render_chart({})))


def test_migrations_run_as_a_hook_before_the_processes() -> None:
    external = chart_objects(render_chart(VALUE_SETS["no-autoscaling"]))
    job = _named(external, "Job", "-migrations")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["durachat-migrate"]
    # Before the install the chart's Secret does not exist: the Job has a hook Secret of its own.
    hook_secret = _named(external, "Secret", "-migrations")
    assert hook_secret["metadata"]["annotations"]["helm.sh/hook-weight"] == "-10"
    in_cluster = chart_objects(render_chart({}))
    job = _named(in_cluster, "Job", "-migrations")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,pre-upgrade"


def test_the_ingress_keeps_websockets_open() -> None:
    objects = chart_objects(render_chart(VALUE_SETS["ingress-and-monitoring"]))
    (ingress,) = _of(objects, "Ingress")
    annotations = ingress["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"] == "3600"
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend["name"].endswith("-gateway")
    assert len(_of(objects, "ServiceMonitor")) == 3
    dashboard = _named(objects, "ConfigMap", "-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shared = ROOT / "deploy" / "grafana" / "dashboards" / "durachat.json"
    assert json.loads(dashboard["data"]["durachat.json"]) == json.loads(shared.read_text())


def test_the_chart_ships_the_same_dashboard_as_deploy() -> None:
    shared = ROOT / "deploy" / "grafana" / "dashboards" / "durachat.json"
    assert (CHART / "dashboards" / "durachat.json").read_text() == shared.read_text()


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"inClusterPostgresql": {"enabled": False}},
            "set database.url, database.existingSecret or inClusterPostgresql.enabled",
        ),
        (
            {"shard": {"drainTimeoutSeconds": 60, "terminationGracePeriodSeconds": 40}},
            "must exceed shard.drainTimeoutSeconds",
        ),
        ({"gateway": {"replicas": 3}}, "additional properties 'replicas' not allowed"),
        ({"redis": {"clusterNodes": "redis-0:6379"}}, "redis.clusterNodes needs inClusterRedis"),
        ({**EXTERNAL, "redis": {"clusterNodes": "redis-0"}}, "clusterNodes"),
    ],
)
def test_mistakes_are_refused_with_a_reason(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm_python.HelmError, match=message):
        render_chart(values)


WHOLE = ("resources", "podSecurityContext", "securityContext", "labels")


def _leaves(values: dict[str, Any], prefix: str = "") -> list[str]:
    paths: list[str] = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        # Objects handed to Kubernetes as they are count as one value.
        if isinstance(value, dict) and value and key not in WHOLE:
            paths.extend(_leaves(value, f"{path}."))
        else:
            paths.append(path)
    return paths


def test_the_readme_documents_every_value() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    missing = [p for p in _leaves(values) if f"`{p}`" not in readme]
    assert missing == []
