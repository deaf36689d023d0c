# The OpenEngine profiles toolkit. `make` sets up, regenerates, checks and builds the site;
# `make test` runs every test. Dependencies are pinned in requirements.txt and installed into .venv.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
OESPEC := $(BIN)/oespec
STAMP := $(VENV)/.installed
BASE ?= origin/main

.DEFAULT_GOAL := all
.PHONY: all setup generate bindings check test site serve breaking engine conformance bench clean

all: setup generate check site

# Idempotent: reinstalls only when requirements.txt or pyproject.toml changed.
setup: $(STAMP)
$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

# Every file derived from profiles.yaml (committed sources and the Python bindings).
generate: setup
	$(OESPEC) generate

# Only the build outputs the tests import (Python bindings); leaves committed files alone.
bindings: setup
	$(OESPEC) generate --only bindings

check: setup
	$(OESPEC) check
	$(OESPEC) generate --check
	$(OESPEC) spec
	$(BIN)/buf lint

test: setup bindings
	$(BIN)/python -m pytest

# What the working tree breaks compared with BASE (a git ref): `make breaking BASE=origin/main`.
# FORMAT=github turns the findings into pull-request annotations.
FORMAT ?= text
breaking: setup
	$(OESPEC) breaking --against $(BASE) --format $(FORMAT)

# The protocol site (spec/ plus the generated reference) into site/build/: strict, offline, seconds.
site: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The same site on http://127.0.0.1:8000/, rebuilt and reloaded on every change.
serve: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:8000

# The reference engine on 127.0.0.1:50051 with every profile its role allows; Ctrl-C stops it.
# ARGS passes more flags, e.g. `make engine ARGS="--role prefill --admin-token secret"`.
ARGS ?=
engine: setup bindings
	$(OESPEC) engine --port 50051 --profiles all $(ARGS)

# The conformance demo: the reference engine on a free port with every profile, the whole suite
# against it (its graceful shutdown is the last case), and the engine gone afterwards.
# CONFORMANCE_ARGS passes more runner flags, e.g. `--junit report.xml` or `--format json`.
CONFORMANCE_ARGS ?=
conformance: setup bindings
	@set -e; log=$$(mktemp); token=conformance-demo; \
	$(OESPEC) engine --port 0 --profiles all --admin-token $$token >$$log 2>&1 & pid=$$!; \
	trap 'kill $$pid 2>/dev/null || true; rm -f $$log' EXIT; \
	addr=; for i in $$(seq 200); do \
	  addr=$$(sed -n 's/.*serving on \([^ ]*\).*/\1/p' $$log | head -n1); \
	  [ -n "$$addr" ] && break; kill -0 $$pid 2>/dev/null || break; sleep 0.1; done; \
	[ -n "$$addr" ] || { echo "the reference engine did not start:"; cat $$log; exit 1; }; \
	$(OESPEC) conformance --target $$addr --admin-token $$token \
	  --shutdown-command "kill -TERM $$pid" $(CONFORMANCE_ARGS)

# Speed figures (ratios against reference tools); each benchmark bounds its own run time.
# Writes bench/results.md, bench/results.json and bench/plots/ (a few minutes on 2 cores).
# BENCH_ARGS picks sections or a smoke run, e.g. `make bench BENCH_ARGS="--only fleet --quick"`.
BENCH_ARGS ?=
bench: setup bindings
	$(BIN)/python -m bench.run $(BENCH_ARGS)

clean:
	rm -rf build site/build openengine/v1 .pytest_cache
