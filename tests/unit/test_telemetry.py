"""durachat_infra.telemetry: exporter selection from the OTEL_* variables, the provider's
resource, and configure_telemetry's once-per-process behaviour (no network)."""

from __future__ import annotations

import json
import logging
import os
import sys
import types
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SpanExporter

from durachat import observability
from durachat_infra import telemetry
from durachat_infra.telemetry import build_tracer_provider, configure_telemetry, span_exporters
from support.telemetry import in_memory_provider, isolated_global_tracer_provider

HTTP_MODULE = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
GRPC_MODULE = "opentelemetry.exporter.otlp.proto.grpc.trace_exporter"


class FakeOTLPExporter(SpanExporter):
    """Stands in for an OTLP exporter package; exports nothing."""


@pytest.fixture(autouse=True)
def clean_otel_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)


@pytest.fixture
def fresh_process() -> Iterator[None]:
    with isolated_global_tracer_provider():
        yield


def _fake_module(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    module = types.ModuleType(name)
    module.OTLPSpanExporter = FakeOTLPExporter  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, name, module)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "durachat.telemetry" and r.levelno == logging.WARNING
    ]


@pytest.mark.parametrize(
    "environ", [{}, {"OTEL_TRACES_EXPORTER": "none"}, {"OTEL_TRACES_EXPORTER": " "}]
)
def test_no_exporter(environ: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    assert span_exporters(environ) == []
    assert _warnings(caplog) == []


def test_console_exporter() -> None:
    [exporter] = span_exporters({"OTEL_TRACES_EXPORTER": "Console"})
    assert isinstance(exporter, ConsoleSpanExporter)
    [again] = span_exporters({"OTEL_TRACES_EXPORTER": "console,none,console"})
    assert isinstance(again, ConsoleSpanExporter)


def test_an_unknown_exporter_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    exporters = span_exporters({"OTEL_TRACES_EXPORTER": "zipkin,console"})
    assert [type(e) for e in exporters] == [ConsoleSpanExporter]
    assert _warnings(caplog) == ["OTEL_TRACES_EXPORTER=zipkin is not supported; ignoring it"]


@pytest.mark.parametrize(
    "environ",
    [
        {"OTEL_TRACES_EXPORTER": "otlp"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"},
    ],
)
def test_otlp_without_its_package_warns_once_and_exports_nothing(
    environ: dict[str, str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, HTTP_MODULE, None)  # makes the import fail
    assert span_exporters(environ) == []
    [warning] = _warnings(caplog)
    assert "opentelemetry-exporter-otlp-proto-http" in warning


def test_otlp_with_its_package(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_module(monkeypatch, HTTP_MODULE)
    [exporter] = span_exporters({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert isinstance(exporter, FakeOTLPExporter)
    assert (
        span_exporters(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}
        )
        == []
    )


def test_otlp_over_grpc(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, GRPC_MODULE, None)
    grpc = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    assert span_exporters(grpc) == []
    assert "opentelemetry-exporter-otlp-proto-grpc" in _warnings(caplog)[0]
    _fake_module(monkeypatch, GRPC_MODULE)
    [exporter] = span_exporters(grpc)
    assert isinstance(exporter, FakeOTLPExporter)
    assert span_exporters({**grpc, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}) == []


def test_the_service_name() -> None:
    provider = build_tracer_provider("durachat-shard", {})
    assert provider.resource.attributes["service.name"] == "durachat-shard"
    renamed = build_tracer_provider("durachat-shard", {"OTEL_SERVICE_NAME": "shard-eu"})
    assert renamed.resource.attributes["service.name"] == "shard-eu"
    provider.shutdown()
    renamed.shutdown()


def test_a_console_provider_prints_spans(capsys: pytest.CaptureFixture[str]) -> None:
    provider = build_tracer_provider("svc", {"OTEL_TRACES_EXPORTER": "console"})
    provider.get_tracer("test").start_span("printed").end()
    provider.force_flush()
    provider.shutdown()
    printed = json.loads(capsys.readouterr().out)
    assert printed["name"] == "printed"
    assert printed["resource"]["attributes"]["service.name"] == "svc"


def test_a_provider_without_exporters_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    provider = build_tracer_provider("svc", {"OTEL_TRACES_EXPORTER": "none"})
    provider.get_tracer("test").start_span("silent").end()
    provider.force_flush()
    provider.shutdown()
    assert capsys.readouterr().out == ""


@pytest.mark.usefixtures("fresh_process")
def test_configure_telemetry_once(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "gw-eu")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")

    shutdown = configure_telemetry("durachat-gateway", "gw-1")
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    assert provider.resource.attributes["service.name"] == "gw-eu"
    assert provider.resource.attributes["service.instance.id"] == "gw-1"

    assert configure_telemetry("something-else") is shutdown
    assert trace.get_tracer_provider() is provider

    shutdown()
    shutdown()


@pytest.mark.usefixtures("fresh_process")
def test_no_exporter_installs_nothing() -> None:
    shutdown = configure_telemetry("durachat-shard", "shard-1")
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert not trace.get_tracer("t").start_span("free").is_recording()
    shutdown()


def test_the_instance_id(monkeypatch: pytest.MonkeyPatch) -> None:
    provider = build_tracer_provider("durachat-shard", {}, instance_id="shard-1")
    assert provider.resource.attributes["service.instance.id"] == "shard-1"
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.instance.id=pod-7")
    env = {"OTEL_RESOURCE_ATTRIBUTES": "service.instance.id=pod-7"}
    theirs = build_tracer_provider("durachat-shard", env, instance_id="shard-1")
    assert theirs.resource.attributes["service.instance.id"] == "pod-7"
    provider.shutdown()
    theirs.shutdown()


def test_both_otlp_exporters_are_installed() -> None:
    import importlib

    for module in (HTTP_MODULE, GRPC_MODULE):
        assert importlib.import_module(module).OTLPSpanExporter is not None


@pytest.mark.usefixtures("fresh_process")
def test_configured_events_reach_the_exporter_on_shutdown(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")  # only the shutdown flush exports
    shutdown = configure_telemetry("durachat-shard")

    observability.emit("chat:recovery:completed", agent="chat-agent", name="c1", payload={})
    assert capsys.readouterr().out == ""
    shutdown()

    printed = json.loads(capsys.readouterr().out)
    assert printed["name"] == "durachat.event"
    assert printed["attributes"]["durachat.event.type"] == "chat:recovery:completed"
    assert printed["resource"]["attributes"]["service.name"] == "durachat-shard"


@pytest.mark.usefixtures("fresh_process")
def test_a_provider_set_by_someone_else_is_left_alone(caplog: pytest.LogCaptureFixture) -> None:
    theirs, exporter = in_memory_provider()
    trace.set_tracer_provider(theirs)
    with caplog.at_level(logging.INFO, logger="durachat.telemetry"):
        flush = configure_telemetry("durachat-jobs")
    assert trace.get_tracer_provider() is theirs
    assert configure_telemetry("durachat-jobs") is flush
    assert any("already configured" in r.getMessage() for r in caplog.records)
    theirs.get_tracer("test").start_span("kept").end()
    flush()
    assert [s.name for s in exporter.get_finished_spans()] == ["kept"]
    assert telemetry._shutdown is flush
