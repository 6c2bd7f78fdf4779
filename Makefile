# The two commands of the quick start: `make demo` and `make test`. Both set up first (idempotent).
VENV := .venv
PY := $(VENV)/bin/python

SOURCES := gpcnn tests examples bench scripts reproduce docs

.PHONY: setup demo test test-fast lint docs docs-check db-start db-stop

setup:
	@bash scripts/setup.sh

demo: setup
	$(VENV)/bin/gpcnn demo

test: setup
	$(PY) -m pytest -q $(PYTEST_ARGS)

# The tests that need no database server: 82 s of pytest on 2 cores (7 December 2026).
test-fast: setup
	$(PY) -m pytest -q -m "not db" $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check $(SOURCES)
	$(VENV)/bin/ruff format --check $(SOURCES)
	$(VENV)/bin/mypy

db-start: setup
	$(VENV)/bin/gpcnn db start

db-stop: setup
	$(VENV)/bin/gpcnn db stop

# The documentation site (docs/_build/html): warnings are errors; the notebook runs against the database.
docs: setup
	$(VENV)/bin/sphinx-build -W --keep-going -q -b html docs docs/_build/html

# Headless Chromium renders the home page and one API page; a broken page fails.
docs-check: docs
	@command -v chromium >/dev/null || { [ "$$(id -u)" -eq 0 ] && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/dev/null; } || \
	  { echo "make docs-check needs Debian's chromium: sudo apt-get install chromium" >&2; exit 1; }
	$(PY) scripts/check_docs.py docs/_build/html
