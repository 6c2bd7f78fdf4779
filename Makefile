# The two commands of the quick start: `make demo` and `make test`. Both set up first (idempotent).
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test lint db-start db-stop clean-db

setup:
	@bash scripts/setup.sh

demo: setup
	$(VENV)/bin/gpcnn demo

test: setup
	$(PY) -m pytest -q $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check gpcnn tests examples bench

db-start: setup
	$(VENV)/bin/gpcnn db start

db-stop: setup
	$(VENV)/bin/gpcnn db stop
