# durachat — every developer and CI entry point.
SHELL := /bin/bash
PYTHON ?= python3.11
UV_VERSION := 0.13.9
TOOLS := .tools
UV := $(TOOLS)/bin/uv
VENV := .venv
BIN := $(VENV)/bin
export UV_PYTHON := $(PYTHON)
export UV_PROJECT_ENVIRONMENT := $(VENV)
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: help install run run-redis-cluster test test-py test-redis-cluster test-compat lint format bench bench-check bench-auth bench-tracing bench-scale bench-1000 soak chaos fuzz clean chromium playground

help:  # List the targets
	@grep -E '^[a-z0-9-]+:.*#' Makefile | sed -E 's/:.*#/\t/'

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet "uv==$(UV_VERSION)"

$(BIN)/.installed: $(UV) uv.lock pyproject.toml libs/*/pyproject.toml services/*/pyproject.toml
	$(UV) sync --frozen --all-packages --all-extras
	@touch $@

install: $(BIN)/.installed  # Create the environment and install everything (locked)

run: install  # Start a local cluster: 1 gateway, 2 shards, 1 jobs worker (PORT, REDIS_URL, REDIS_CLUSTER_NODES, DATABASE_URL)
	$(BIN)/durachat-local

run-redis-cluster: install  # Like run, on an embedded Redis Cluster of three masters
	$(BIN)/durachat-local --redis-cluster 3

tests/compat/node_modules/.installed: tests/compat/package.json tests/compat/package-lock.json
	cd tests/compat && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# The playground's browser test drives Debian's Chromium (tests/compat/test_playground.py).
chromium:  # Install Chromium for the browser test when it is missing (apt-get, needs root)
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium; }

# Rebuild the committed playground bundle after changing playground/src (needs Node.js).
playground:  # Build the web playground into services/gateway (served at /playground)
	cd playground && npm ci --no-audit --no-fund --loglevel=error && npm run build

# The core of the end-to-end suite (chat, broadcast, resume, recovery after kill -9, branches,
# jobs, the quota gate) again on a Redis Cluster of three masters; `test-redis-cluster` runs more.
REDIS_CLUSTER_CORE := tests/e2e/test_chat_flows.py::test_send_streams_and_persists \
	tests/e2e/test_chat_flows.py::test_two_tabs_on_two_gateways_see_the_same_frames \
	tests/e2e/test_chat_flows.py::test_dropped_socket_resumes_exactly_once \
	tests/e2e/test_chat_flows.py::test_reload_mid_stream_resumes \
	tests/e2e/test_branch_forks.py \
	tests/e2e/test_recovery.py::test_sigkill_mid_reply_continues_on_another_shard \
	tests/e2e/test_recovery.py::test_a_resume_cursor_stays_valid_across_the_failover \
	tests/e2e/test_recovery.py::test_a_reply_on_a_branch_is_recovered_on_that_branch \
	tests/integration/jobs tests/integration/gateway/test_quota_gate.py
REDIS_CLUSTER_MORE := tests/integration tests/e2e/test_chat_flows.py tests/e2e/test_recovery.py \
	tests/e2e/test_branch_reads.py tests/e2e/test_branch_writes.py \
	tests/e2e/test_failover.py tests/e2e/test_client.py tests/e2e/test_event_feed.py \
	tests/e2e/test_auth_quotas.py tests/e2e/test_webhooks.py tests/e2e/test_concurrency.py

test: install tests/compat/node_modules/.installed chromium  # Run the whole suite (starts Redis, a Redis Cluster and PostgreSQL itself)
	$(BIN)/pytest --durations=25
	DURACHAT_TEST_REDIS=cluster $(BIN)/pytest -p no:cacheprovider $(REDIS_CLUSTER_CORE)

test-redis-cluster: install  # The end-to-end suite's core and more on a Redis Cluster
	DURACHAT_TEST_REDIS=cluster $(BIN)/pytest -p no:cacheprovider tests/e2e/test_branch_forks.py $(REDIS_CLUSTER_MORE)

test-py: install  # Run the Python suite only
	$(BIN)/pytest --ignore=tests/compat

lint: install  # ruff, mypy strict (source, tests, bench), import contracts (pyproject.toml)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-logo

format: install  # Format the code
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: install  # Load benchmark: prints a table, writes bench/results/*.json
	$(BIN)/python -m bench

bench-check: install  # Re-run the load phase; fail if it regressed against bench/reference.json
	$(BIN)/python -m bench.check

SOAK_USERS ?= 300
SOAK_DURATION ?= 10m
SOAK_SCENARIO ?= chat:6,long:1,resume:1,idle:2
SOAK_PORT ?= 8090
SOAK_OUT ?= loadtest-results/soak-$(shell date -u +%Y%m%dT%H%M%SZ)

soak: install  # Soak test: a local cluster under constant load for SOAK_DURATION (SOAK_USERS, SOAK_SCENARIO); report in SOAK_OUT
	@rm -rf var/soak && mkdir -p var/soak; \
	for attempt in 1 2 3; do \
	  DURACHAT_AGENTS=durachat.demo,durachat.loadtest.agent PORT=$(SOAK_PORT) \
	    $(BIN)/durachat-local --var-dir var/soak > var/soak/cluster.log 2>&1 & cluster=$$!; \
	  until grep -qs "durachat is running" var/soak/cluster.log || ! kill -0 $$cluster 2>/dev/null; do sleep 1; done; \
	  kill -0 $$cluster 2>/dev/null && break; \
	  echo "the local cluster did not start (attempt $$attempt):"; tail -3 var/soak/cluster.log; \
	done; \
	kill -0 $$cluster 2>/dev/null || exit 1; \
	trap 'kill $$cluster 2>/dev/null; wait $$cluster' EXIT; \
	$(BIN)/durachat load soak --url http://127.0.0.1:$(SOAK_PORT) --agent loadtest-agent \
	  --users $(SOAK_USERS) --duration $(SOAK_DURATION) --scenario $(SOAK_SCENARIO) \
	  --think 5-15 --idle-hold 60-120 --workers 1 --out $(SOAK_OUT)
CHAOS_SECONDS ?= 600
chaos: install  # 10 minutes of random kills, pauses and Redis restarts under load, then the fault tests with 30 s outages; report in var/chaos/
	DURACHAT_CHAOS_SECONDS=$(CHAOS_SECONDS) DURACHAT_CHAOS_REPORT=var/chaos/report.json \
		$(BIN)/pytest -p no:cacheprovider -s tests/e2e/test_chaos.py
	DURACHAT_FAULT_OUTAGE=30 $(BIN)/pytest -p no:cacheprovider tests/e2e/test_faults.py

FUZZ_CASES ?= 50000
fuzz: install  # Fuzz the gateway: FUZZ_CASES Hypothesis frames over a WebSocket and as many Schemathesis requests (100,000 cases)
	DURACHAT_FUZZ_CASES=$(FUZZ_CASES) $(BIN)/pytest -p no:cacheprovider tests/fuzz

bench-auth: install  # What auth mode costs: durachat open and with credentials, in one run
	$(BIN)/python -m bench --targets durachat,durachat-auth

# At 200 conversations the cluster is saturated on two cores yet serves every request, so CPU per
# delivered chunk is measured on chunks, not on retries (docs/benchmarks.md#scale).
SCALE_CONVERSATIONS ?= 200
SCALE_CLIENT_PROCS ?= 2
bench-scale: install  # Scale-out curves (1/2/3 shards, 1/2 gateways) of the load phase and a per-core capacity model (SCALE_CONVERSATIONS); writes bench/results/scale-*.json
	$(BIN)/python -m bench.scale --conversations $(SCALE_CONVERSATIONS) --client-procs $(SCALE_CLIENT_PROCS)

# A thousand chats streaming at once, each at a pace two cores can carry for all of them
# (docs/benchmarks.md#1000-conversations-at-once).
THOUSAND_DELTA_INTERVAL ?= 500
bench-1000: install  # The load phase with 1,000 conversations streaming at once, 4 load generators, deltas THOUSAND_DELTA_INTERVAL ms apart (500), against the relay
	$(BIN)/python -m bench --targets durachat,baseline --conversations 1000 --client-procs 4 --phases load --delta-interval $(THOUSAND_DELTA_INTERVAL)

bench-tracing: install  # What tracing costs: durachat with tracing off and every turn traced (OTLP to a local receiver), in one run
	$(BIN)/python -m bench --targets durachat,durachat-traced

clean:  # Remove environments and local data
	rm -rf $(VENV) $(TOOLS) var tests/compat/node_modules playground/node_modules loadtest-results
