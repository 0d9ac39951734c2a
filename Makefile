# `make release` and `make test` are all the set-up a fresh machine with a Docker Engine needs.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export TESTCONTAINERS_RYUK_DISABLED := true

.PHONY: release test test-all unit fuzz integration integration-extended lint docs host-deps clean help
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

help:
	@echo "make release      build every flavor and CPU level of examples/tinyllm, and examples/minilang, into artifacts/"
	@echo "make test         lint, type-check, unit and integration tests (needs Docker; what CI runs)"
	@echo "make test-all     make test, then the extended integration tests (GPU SDK images, ...)"
	@echo "make unit         fast tests without Docker"
	@echo "make fuzz         property-based fuzzing of lockfiles, archives, records (about a minute)"
	@echo "make lint         ruff, mypy, rendered Dockerfiles and JSON Schemas up to date"
	@echo "make docs         the documentation (docs/) as a static site in site/"
	@echo "make clean        remove leftover containers and the virtualenv"

# The distribution was called `orchestrator` before it took its PyPI name: an editable
# install under that name goes first, or both would claim bin/orchestrator.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip uninstall --quiet --yes orchestrator 2>/dev/null || true
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

# Host tools (Debian/Ubuntu hosts): mmdebstrap makes the root filesystems; minisign is
# what downstream users verify signatures with, so the tests check against the real one;
# shellcheck lints the generated install.sh; podman (Debian's 4.3) and catatonit, the init
# it starts containers with (not on PATH), are the second engine kind the tests build on.
# Docker 26 runs from a trixie root filesystem mmdebstrap makes (tests/integration/
# docker26_engine.py); it and the second dockerd get bridges of their own through `ip`.
HOST_TOOLS := mmdebstrap minisign shellcheck podman
HOST_FILES := /usr/libexec/podman/catatonit=catatonit /usr/bin/ip=iproute2
host-deps:
	@missing=""; for tool in $(HOST_TOOLS); do command -v $$tool >/dev/null || missing="$$missing $$tool"; done; \
	for entry in $(HOST_FILES); do [ -e "$${entry%%=*}" ] || missing="$$missing $${entry#*=}"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi

# Both examples: tinyllm (orchestrator.toml here) and minilang, whose branchy hot path
# is where PGO and BOLT show what they buy.
release: host-deps $(STAMP)
	$(BIN)/orchestrator release
	$(BIN)/orchestrator release --config examples/minilang/orchestrator.toml

lint: $(STAMP)
	$(BIN)/ruff check orchestrator tests bench
	$(BIN)/ruff format --check orchestrator tests bench
	$(BIN)/mypy
	$(BIN)/python -m orchestrator.tools.layers
	$(BIN)/orchestrator render --check
	$(BIN)/python -m orchestrator.tools.schemas --check
	shellcheck bench/gpu_train.sh

# One worker per core: the unit tests share nothing but read-only fixtures.
unit: $(STAMP)
	$(BIN)/pytest tests/unit -q -n auto

# docs/ as a static site in site/ (git-ignored); --strict fails on a broken link or anchor.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# Property-based fuzzing of lockfiles, archives and records; FUZZ_EXAMPLES bounds the time.
FUZZ_EXAMPLES ?= 400
fuzz: $(STAMP)
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/pytest tests/fuzz -q

# Two tiers. `integration` (in make test, which CI runs) proves every capability once
# within a 2-core runner's hour. `integration-extended` holds what would double that:
# the cuda and rocm SDK images (6.4 GB and more to fetch), the minilang showcase, the
# fresh-image reproduction, GitLab beside GitHub (docs/development.md lists each and what
# covers its path in the first tier). Each test prints its time as it ends.
INTEGRATION := $(BIN)/pytest tests/integration -v -o console_output_style=times --durations=25
integration: host-deps $(STAMP)
	$(INTEGRATION) -m "not extended"

integration-extended: host-deps $(STAMP)
	$(INTEGRATION) -m extended

test: lint unit fuzz integration

test-all: test integration-extended

clean:
	-$(BIN)/orchestrator clean
	rm -rf $(VENV)
