# `make release` and `make test` are all the set-up a fresh machine with a Docker Engine needs.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export TESTCONTAINERS_RYUK_DISABLED := true

.PHONY: release test unit integration lint host-deps clean help
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

help:
	@echo "make release      build the cpu release of examples/tinyllm into artifacts/"
	@echo "make test         lint, type-check, unit and integration tests (needs Docker)"
	@echo "make unit         fast tests without Docker"
	@echo "make lint         ruff, mypy, rendered Dockerfiles up to date"
	@echo "make clean        remove leftover containers and the virtualenv"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

# The host tools image bootstrapping needs (Debian/Ubuntu hosts).
host-deps:
	@command -v mmdebstrap >/dev/null || { \
	  echo "installing mmdebstrap (makes the Debian root filesystems)"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq mmdebstrap >/dev/null; }

release: host-deps $(STAMP)
	$(BIN)/orchestrator build --flavor cpu

lint: $(STAMP)
	$(BIN)/ruff check orchestrator tests
	$(BIN)/ruff format --check orchestrator tests
	$(BIN)/mypy
	$(BIN)/orchestrator render --check

unit: $(STAMP)
	$(BIN)/pytest tests/unit -q

integration: host-deps $(STAMP)
	$(BIN)/pytest tests/integration -v

test: lint unit integration

clean:
	-$(BIN)/orchestrator clean
	rm -rf $(VENV)
