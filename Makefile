# Set-up and checks. `make demo` and `make test` are the two commands a new machine needs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip install -q -c constraints.txt

.PHONY: demo test test-slow soak lint bench venv clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Stamp files: reinstall only when the dependency list changes.
$(VENV)/.stamp-run: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) -e '.[semantic]'
	touch $@

$(VENV)/.stamp-dev: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) -e '.[semantic,dev]'
	touch $@ $(VENV)/.stamp-run

venv: $(VENV)/.stamp-run

demo: $(VENV)/.stamp-run
	$(BIN)/govrag demo

lint: $(VENV)/.stamp-dev
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

# pytest exits 5 when it collects no test; that is a failure of the suite, not a pass.
# Two workers (pytest-xdist), a test file per worker at a time: each worker starts its own
# PostgreSQL for the session, and module-scoped servers stay with their file.
test: lint
	$(BIN)/python -m pytest -m "not slow" -q -n 2 --dist loadfile; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

test-slow: $(VENV)/.stamp-dev
	$(BIN)/python -m pytest -m slow -q

# The crash test with many more SIGKILL points than `make test` runs.
soak: $(VENV)/.stamp-dev
	GOVRAG_CRASH_RUNS=300 $(BIN)/python -m pytest -q tests/harvest/test_crash.py

bench: $(VENV)/.stamp-dev
	$(BIN)/python -m bench.run

clean:
	rm -rf $(VENV) demo-deployment bench/out
