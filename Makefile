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
.PHONY: all setup system-packages generate bindings check test test-fast wheelhouse site serve breaking engine conformance conformance-reports bench clean llama upstream-pin

all: setup generate check site

# Idempotent: reinstalls only when requirements.txt or pyproject.toml changed.
setup: $(STAMP) system-packages
$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

# Debian packages the site build needs (Graphviz `dot` draws the dependency picture), installed
# only when missing and only where apt-get may run; otherwise it says what to install.
system-packages:
	@.ci/system-packages --if-possible graphviz

# The optional llama.cpp backend (openengine.llama), pinned in requirements-llama.txt. `make test`,
# `make test-fast` and `make bench` need it; plain `make` does not. llama-cpp-python compiles llama.cpp from source
# (about 5 minutes on 2 cores the first time; pip keeps the built wheel, so a later install takes
# seconds) with portable flags: no -march=native (AVX2 and FMA, as any x86-64 CPU of the last
# decade has), no multimodal library, ggml's own thread pool instead of OpenMP.
LLAMA_STAMP := $(VENV)/.llama-installed
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF -DGGML_OPENMP=OFF
llama: $(LLAMA_STAMP)
$(LLAMA_STAMP): requirements-llama.txt $(STAMP)
	@.ci/system-packages --if-possible cmake ninja-build g++
	@echo "installing requirements-llama.txt (compiling llama.cpp the first time: minutes)" >&2
	$(BIN)/python -m pip install --quiet --disable-pip-version-check $$(grep '^scikit-build-core==' requirements-llama.txt)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip install --quiet --disable-pip-version-check \
	  --no-build-isolation -r requirements-llama.txt
	touch $@

# Every file derived from profiles.yaml (committed sources and the Python bindings). The bindings
# come first: the reference pages list the runtime's validator rules and conformance cases.
generate: setup bindings
	$(OESPEC) generate

# Only the build outputs the tests import (Python bindings); leaves committed files alone.
bindings: setup
	$(OESPEC) generate --only bindings

# Each step a maintainer can leave out of "Add a profile" (README) is a located finding here: the
# registry, stale generated files, the spec (an area no profile claims: SPEC008), the protos' layout,
# upstream v1 unchanged, and an RPC the reference engine does not implement (read from its sources
# by a test of the checkout: the toolkit never imports the engine).
check: setup bindings
	$(OESPEC) check
	$(OESPEC) generate --check
	$(OESPEC) spec
	$(BIN)/buf lint
	$(BIN)/buf format -d --exit-code proto
	$(OESPEC) upstream check
	$(BIN)/python -m pytest -q -p no:cacheprovider --no-header --tb=line tests/test_engine_serves_every_rpc.py

# Builds upstream/openengine-v1.binpb and upstream/PIN.md from a checkout of upstream OpenEngine;
# moving the pin to a newer commit is the same step, and `make check` then lists what changed:
# `make upstream-pin UPSTREAM=../openengine COMMIT=4def7c5 DATE=2026-07-23 REVISION=1`.
UPSTREAM ?=
COMMIT ?=
DATE ?=
REVISION ?=
upstream-pin: setup
	@[ -n "$(UPSTREAM)" ] && [ -n "$(COMMIT)" ] || \
	  { echo "make upstream-pin needs UPSTREAM=<upstream checkout> and COMMIT=<sha>" >&2; exit 2; }
	$(OESPEC) upstream pin --from "$(UPSTREAM)" --commit "$(COMMIT)" $(if $(DATE),--date "$(DATE)") \
	  $(if $(REVISION),--schema-revision "$(REVISION)")

# Every test, over pytest-xdist workers: the end-to-end tests that run the project's own commands
# (add a profile, the pull-request workflow, the install outside the checkout, the browser) run in
# three groups of about equal length, each on a worker of its own, sharing one copy of the checkout
# (tests/conftest.py, tests/checkout.py); one worker per core computes the rest, and the workers
# beyond those take the slow tests that mostly wait on stream windows and timers (about 400 s of
# wall for 60 CPU-s; each matrix of faults or bug variants runs its engines side by side in one
# test), which would otherwise leave the cores idle one after the other. Four workers per core give
# those tests five lanes on 2 cores. PYTEST_WORKERS sets the count (0: one process). PYTEST_ARGS
# adds arguments, e.g. `make test PYTEST_ARGS=tests/site`.
# OE_TEST_CPU=<folder> records each test's CPU and wall time there, its subprocesses' included
# (tests/conftest.py), e.g. `make test OE_TEST_CPU=/tmp/cpu`.
# Bytecode caches stay on even where the environment turns them off (PYTHONDONTWRITEBYTECODE): a
# run starts hundreds of Python processes (workers, oespec, engines, mkdocs), and without the
# caches each one compiles the project's modules again and pytest rewrites every test module's
# asserts again. The caches (__pycache__/) are ignored by git.
CORES := $(shell getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
PYTEST_WORKERS ?= $(shell echo $$((4 * $(CORES))))
PYTEST_ARGS ?=
# PYTHONNODEBUGRANGES: Python 3.11 tracebacks re-parse each source line to place their carets, and
# before 3.11.8 two threads parsing at once can fail with "AST constructor recursion depth
# mismatch". An engine thread logging a traceback while pytest formats a failure then ends the run
# as an internal error that hides the failure; without column ranges no traceback parses.
PYTEST := PYTHONDONTWRITEBYTECODE= PYTHONNODEBUGRANGES=1 $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup
# Collecting once first writes the rewritten test modules' caches, so the workers, which collect
# at the same moment, read them instead of each rewriting every module (two CPU-seconds a worker
# on a fresh checkout).
PYTEST_COLLECT := PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest --collect-only -q -p no:cacheprovider

# The wheels the install test (tests/engine/test_outside_the_checkout.py) installs the built
# distribution's dependencies from, as pip fetches them for a user: the runtime's and the toolkit
# extra's requirements (pyproject.toml) at the versions requirements.txt pins. Filled once per
# checkout, with the other installs, rather than by the test.
WHEELHOUSE := build/wheelhouse
wheelhouse: $(WHEELHOUSE)/.filled
$(WHEELHOUSE)/.filled: requirements.txt pyproject.toml $(STAMP)
	mkdir -p $(WHEELHOUSE)
	$(BIN)/python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
	  print(*p['dependencies'], *p['optional-dependencies']['toolkit'], sep='\n')" > $(WHEELHOUSE)/requirements.in
	$(BIN)/python -m pip download --quiet --disable-pip-version-check -c requirements.txt -d $(WHEELHOUSE) \
	  -r $(WHEELHOUSE)/requirements.in
	touch $@
test: setup bindings llama wheelhouse
	@$(PYTEST_COLLECT) $(PYTEST_ARGS) >/dev/null
	$(PYTEST) $(PYTEST_ARGS)

# The fast lane: every test not marked slow or browser (see pyproject.toml), in under a minute.
test-fast: setup bindings llama
	$(PYTEST) -m "not slow and not browser" $(PYTEST_ARGS)

# What the working tree breaks compared with BASE (a git ref): `make breaking BASE=origin/main`.
# FORMAT=github turns the findings into pull-request annotations.
FORMAT ?= text
breaking: setup
	$(OESPEC) breaking --against $(BASE) --format $(FORMAT)

# The protocol site (spec/ plus the generated reference) into site/build/: strict, offline, seconds.
# Not --quiet: mkdocs counts strict-mode warnings only when they are logged, so --quiet would let a
# broken link or anchor pass.
site: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The same site on http://127.0.0.1:8000/, rebuilt and reloaded on every change.
serve: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:8000

# The reference engine on 127.0.0.1:50051 with every profile its role allows; Ctrl-C stops it.
# ARGS passes more flags, e.g. `make engine ARGS="--role prefill --admin-token secret"`.
ARGS ?=
engine: setup bindings
	$(OESPEC) engine --port 50051 --profiles all $(ARGS)

# The conformance demo: the reference engine on a free port with every profile, the whole suite
# against it (drain and its graceful shutdown are the last cases), and the engine gone afterwards.
# ADMIN chooses the documented Admin set-up: `main` (on the engine's address, the default), `port`
# (an address of its own) or `mtls` (its own address behind mutual TLS; openssl makes the keys).
# CONFORMANCE_ARGS passes more runner flags, e.g. `--junit report.xml` or `--format json` (stdout
# then holds the JSON report and nothing else).
CONFORMANCE_ARGS ?=
ADMIN ?= main
conformance: setup
	@$(OESPEC) generate --only bindings >&2
	@set -e; dir=$$(mktemp -d); log=$$dir/engine.log; token=conformance-demo; pid=; \
	trap 'if [ -n "$$pid" ]; then kill $$pid 2>/dev/null || true; fi; rm -rf $$dir' EXIT; \
	case "$(ADMIN)" in \
	  main) engine_args="--admin-token $$token"; runner_args="--admin-token $$token";; \
	  port) engine_args="--admin-token $$token --admin-port 0"; runner_args="--admin-token $$token";; \
	  mtls) ( cd $$dir && printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > san.cnf && \
	          openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=conformance-ca \
	            -keyout ca.key -out ca.pem && \
	          for n in server client; do \
	            openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=$$n -keyout $$n.key -out $$n.csr && \
	            openssl x509 -req -in $$n.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
	              -out $$n.pem -extfile san.cnf; done ) >/dev/null 2>&1 \
	          || { echo "ADMIN=mtls needs openssl to make the certificates" >&2; exit 2; }; \
	        engine_args="--admin-port 0 --admin-tls-cert $$dir/server.pem --admin-tls-key $$dir/server.key --admin-client-ca $$dir/ca.pem"; \
	        runner_args="--admin-cert $$dir/client.pem --admin-key $$dir/client.key --admin-ca $$dir/ca.pem";; \
	  *) echo "ADMIN must be main, port or mtls (got '$(ADMIN)')" >&2; exit 2;; \
	esac; \
	$(OESPEC) engine --port 0 --profiles all $$engine_args >$$log 2>&1 & pid=$$!; \
	addr=; admin=; for i in $$(seq 200); do \
	  addr=$$(sed -n 's/.*serving on \([^ ]*\).*/\1/p' $$log | head -n1); \
	  admin=$$(sed -n 's/.*admin on \([^ ]*\).*/\1/p' $$log | head -n1); \
	  [ -n "$$addr" ] && { [ "$(ADMIN)" = main ] || [ -n "$$admin" ]; } && break; \
	  kill -0 $$pid 2>/dev/null || break; sleep 0.1; done; \
	[ -n "$$addr" ] || { echo "the reference engine did not start:" >&2; cat $$log >&2; exit 1; }; \
	$(OESPEC) conformance --target $$addr $$runner_args $${admin:+--admin-target $$admin} \
	  --shutdown-command "kill -TERM $$pid" $(CONFORMANCE_ARGS)

# The published conformance reports (conformance/reports/*.json) and the site's Conformance page
# built from them: the reference engine, the counting example, the llama backend with its tiny
# model and the upstream-only test engine, each started on a free port, judged by the whole suite
# and shut down by its last case (a few minutes; `make test` never runs it).
conformance-reports: setup bindings llama
	$(BIN)/python -m tests.conformance.run_reports
	$(OESPEC) generate

# Speed figures (ratios against reference tools), each measured in interleaved rounds and judged
# met, missed or inconclusive; exits 1 when a goal is missed. A whole run writes bench/results.md
# and bench/results.json (about 20 minutes on 2 cores). BENCH_ARGS picks sections or
# a smoke run, which must write elsewhere: `make bench BENCH_ARGS="--only fleet --quick --out build/bench"`.
BENCH_ARGS ?=
bench: setup bindings llama
	$(BIN)/python -m bench.run $(BENCH_ARGS)

clean:
	rm -rf build site/build openengine/v1 .pytest_cache
