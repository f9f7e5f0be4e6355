"""OpenTelemetry SDK set-up: once per process, from the standard `OTEL_*` variables.

Libraries (durachat, the services' code) use the OpenTelemetry API only; a process's entry
point calls `configure_telemetry(service_name, instance_id)` once at start-up and the returned
function at exit. Traces only:

* `OTEL_SERVICE_NAME` names the service (else the name the process passes); the process's id
  (its gateway or shard id) is its `service.instance.id` unless `OTEL_RESOURCE_ATTRIBUTES`
  sets one; that variable adds resource attributes (read by the SDK).
* `OTEL_TRACES_EXPORTER`: a comma-separated list of `console`, `otlp`, `none`. Unset, it is
  `otlp` when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set,
  else `none`. `otlp` speaks `http/protobuf`, or gRPC with `OTEL_EXPORTER_OTLP_PROTOCOL=grpc`
  (both exporters are dependencies of durachat-infra).
* With no exporter at all, no SDK provider is installed: the API stays a no-op and tracing
  costs nothing (docs/observability.md#traces).
* The SDK and the exporters read the rest themselves: sampler (`OTEL_TRACES_SAMPLER`, `_ARG`),
  batching (`OTEL_BSP_*`), limits (`OTEL_SPAN_*`, `OTEL_ATTRIBUTE_*`), `OTEL_SDK_DISABLED`,
  and the OTLP endpoint, headers, timeout, compression and certificate.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
)

logger = logging.getLogger("durachat.telemetry")

_OTLP_MODULES = {
    "http/protobuf": "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "grpc": "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
}
_OTLP_PACKAGES = {
    "http/protobuf": "opentelemetry-exporter-otlp-proto-http",
    "grpc": "opentelemetry-exporter-otlp-proto-grpc",
}

_lock = threading.Lock()
_shutdown: Callable[[], None] | None = None


def configure_telemetry(service_name: str, instance_id: str | None = None) -> Callable[[], None]:
    """Configure the OpenTelemetry SDK for this process from the `OTEL_*` variables and make
    its tracer provider the global one; `instance_id` (a gateway or shard id) becomes the
    resource's `service.instance.id`.

    Only the first call does anything; every call returns the same function, which flushes the
    spans not yet exported and shuts the provider down (calling it again does nothing). If a
    global tracer provider was already set by someone else (an auto-instrumentation agent),
    it is left alone and the returned function only flushes it. When no exporter is
    configured, nothing is installed: spans stay no-ops.
    """
    global _shutdown  # noqa: PLW0603 - configured once per process
    with _lock:
        if _shutdown is not None:
            return _shutdown
        current = trace.get_tracer_provider()
        if not isinstance(current, trace.ProxyTracerProvider):
            logger.info("a tracer provider is already configured; leaving it as it is")
            _shutdown = _flusher(current)
            return _shutdown
        exporters = span_exporters()
        if not exporters:
            _shutdown = _nothing
            return _shutdown
        provider = build_tracer_provider(service_name, instance_id=instance_id, exporters=exporters)
        trace.set_tracer_provider(provider)
        _shutdown = _closer(provider)
        return _shutdown


def build_tracer_provider(
    service_name: str,
    environ: Mapping[str, str] | None = None,
    *,
    instance_id: str | None = None,
    exporters: list[SpanExporter] | None = None,
) -> TracerProvider:
    """A tracer provider configured from `environ` (default: the process environment),
    without making it the global one; `exporters` defaults to `span_exporters(environ)`."""
    env = os.environ if environ is None else environ
    name = env.get("OTEL_SERVICE_NAME", "").strip() or service_name
    attributes: dict[str, str] = {SERVICE_NAME: name}
    # An instance id set in OTEL_RESOURCE_ATTRIBUTES wins over the process's own.
    if instance_id and f"{SERVICE_INSTANCE_ID}=" not in env.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        attributes[SERVICE_INSTANCE_ID] = instance_id
    provider = TracerProvider(resource=Resource.create(attributes))
    for exporter in span_exporters(env) if exporters is None else exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def span_exporters(environ: Mapping[str, str] | None = None) -> list[SpanExporter]:
    """The span exporters `OTEL_TRACES_EXPORTER` asks for (see the module's docstring);
    unknown or unavailable ones are logged as a warning and left out."""
    env = os.environ if environ is None else environ
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",")]
    names = [n for n in names if n]
    if not names and (
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    ):
        names = ["otlp"]
    exporters: list[SpanExporter] = []
    for name in dict.fromkeys(names):
        if name == "none":
            continue
        if name == "console":
            exporters.append(ConsoleSpanExporter(out=sys.stdout))
        elif name == "otlp":
            otlp = _otlp_exporter(env)
            if otlp is not None:
                exporters.append(otlp)
        else:
            logger.warning("OTEL_TRACES_EXPORTER=%s is not supported; ignoring it", name)
    return exporters


def _otlp_exporter(env: Mapping[str, str]) -> SpanExporter | None:
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    module_name = _OTLP_MODULES.get(protocol)
    if module_name is None:
        logger.warning("OTLP protocol %r is not supported; traces are not exported", protocol)
        return None
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        logger.warning(
            "OTLP trace export needs the %s package, which is not installed; "
            "traces are not exported",
            _OTLP_PACKAGES[protocol],
        )
        return None
    exporter: SpanExporter = module.OTLPSpanExporter()
    return exporter


def _nothing() -> None:
    """The shutdown of a process that exports no spans."""


def _closer(provider: TracerProvider) -> Callable[[], None]:
    done = False

    def shutdown() -> None:
        nonlocal done
        if done:
            return
        done = True
        provider.force_flush()
        provider.shutdown()

    return shutdown


def _flusher(provider: trace.TracerProvider) -> Callable[[], None]:
    def flush() -> None:
        force_flush = getattr(provider, "force_flush", None)
        if callable(force_flush):
            force_flush()

    return flush
