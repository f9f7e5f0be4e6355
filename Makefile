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

.PHONY: help install run test test-py test-compat lint format bench bench-auth clean

help:  # List the targets
	@grep -E '^[a-z-]+:.*#' Makefile | sed -E 's/:.*#/\t/'

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet "uv==$(UV_VERSION)"

$(BIN)/.installed: $(UV) uv.lock pyproject.toml libs/*/pyproject.toml services/*/pyproject.toml
	$(UV) sync --frozen --all-packages
	@touch $@

install: $(BIN)/.installed  # Create the environment and install everything (locked)

run: install  # Start a local cluster: 1 gateway, 2 shards, 1 jobs worker (PORT, REDIS_URL, DATABASE_URL)
	$(BIN)/durachat-local

tests/compat/node_modules/.installed: tests/compat/package.json tests/compat/package-lock.json
	cd tests/compat && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

test: install tests/compat/node_modules/.installed  # Run the whole suite (starts Redis and PostgreSQL itself)
	$(BIN)/pytest

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

bench-auth: install  # What auth mode costs: durachat open and with credentials, in one run
	$(BIN)/python -m bench --targets durachat,durachat-auth

clean:  # Remove environments and local data
	rm -rf $(VENV) $(TOOLS) var tests/compat/node_modules
