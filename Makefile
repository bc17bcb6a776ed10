# The two commands a newcomer needs: `make demo` and `make test`.
# Everything else here is what those two are made of.

VENV    ?= .venv
PYTHON  ?= python3
PY       = $(VENV)/bin/python
STAMP    = $(VENV)/.installed
SCRATCH ?= scratch
PORT    ?= 6006
CHROMIUM ?= /usr/bin/chromium

.PHONY: setup browser demo demo-train demo-logs lint test test-fast test-compat soak bench bench-quick frontend check-bundle clean

# pip (26) shows the build backend's warnings; setuptools adds an
# "Editable installation" notice to every editable install, which says nothing
# about this project: it is filtered out, and any other warning still shows.
$(STAMP): setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install -q -e '.[test]'
	touch $@

setup: $(STAMP)

# Browser tests drive Debian's chromium through Playwright (no browser download).
browser:
	@test -x $(CHROMIUM) || { \
	  echo "installing Debian's chromium for the browser tests"; \
	  apt-get update -q && apt-get install -y -q chromium; }

# Trains every demo (clean run and leaky twin) into a git-ignored folder and
# serves it on 127.0.0.1.
demo: setup demo-train
	@echo "Gradscope: http://127.0.0.1:$(PORT)/#gradscope"
	$(VENV)/bin/tensorboard --logdir $(SCRATCH)/demo --host 127.0.0.1 --port $(PORT)

demo-train: setup
	rm -rf $(SCRATCH)/demo
	$(VENV)/bin/tb-gradscope demo $(SCRATCH)/demo

# Regenerates the committed demo_logs/ (deliberate: event-file names carry host,
# time and pid).
demo-logs: setup
	rm -rf demo_logs
	$(VENV)/bin/tb-gradscope demo demo_logs --env builtin

# Two pytest-xdist workers; a test file, or the files sharing an expensive
# session fixture (tests/conftest.py SHARED_UNITS), runs whole on one of them.
# `make test XDIST=` runs the suite in one process.
XDIST ?= -n 2 --dist loadgroup --no-loadscope-reorder

# ruff's lint and format check (settings in pyproject.toml); CI runs it first.
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: setup browser
	$(PY) -m pytest tests $(XDIST) --durations=15

test-fast: setup
	$(PY) -m pytest tests -m "not slow and not browser"

# The oldest TensorFlow setup.py claims (tensorflow>=2.16; Keras 3 comes with
# it), on the core suites, in a venv of its own.
VENV_COMPAT ?= .venv-compat
COMPAT_TESTS = tests/unit/format/test_format_metadata.py tests/unit/format/test_format_roundtrip.py \
  tests/unit/record/test_record_*.py tests/unit/analysis/test_analysis_*.py \
  tests/unit/rules/test_rules_*.py tests/unit/test_scopes.py \
  tests/unit/plugin/test_plugin_routes.py tests/unit/read/test_read_flowstate.py \
  tests/unit/plugin/test_plugin_encoding.py tests/unit/plugin/test_plugin_cache.py \
  tests/unit/plugin/test_plugin_loader.py tests/unit/plugin/test_plugin_recorder.py

$(VENV_COMPAT)/.installed: setup.py
	$(PYTHON) -m venv $(VENV_COMPAT)
	$(VENV_COMPAT)/bin/python -m pip install -q --upgrade pip
	$(VENV_COMPAT)/bin/python -m pip install -q tensorflow==2.16.2 tensorboard==2.16.2 \
	  'tf-keras~=2.16.0' numpy pytest pytest-timeout hypothesis
	$(VENV_COMPAT)/bin/python -m pip install -q --no-deps -e .
	$(VENV_COMPAT)/bin/python -m pip check
	touch $@

test-compat: $(VENV_COMPAT)/.installed
	$(VENV_COMPAT)/bin/python -m pytest -m "not browser and not slow" $(COMPAT_TESTS)

# Ten minutes of live training while TensorBoard reloads and a client polls
# every route (CI runs one minute of it inside `make test`).
soak: setup
	GRADSCOPE_SOAK_SECONDS=600 $(PY) -m pytest tests/e2e/reliability/test_soak.py -m slow -s

# Full-mode benchmarks (figures for docs/PERFORMANCE.md); bench-quick: < 60 s each but
# bench_calls and bench_overhead (about 2 min each).
bench: setup
	$(PY) -m bench.run_all

bench-quick: setup
	$(PY) -m bench.run_all --quick

# Rebuilds the frontend bundle into tb_gradscope/plugin/static/.
frontend:
	cd frontend && npm ci && npm run build

# Fails when the committed bundle is not what the sources build to.
check-bundle: frontend
	git diff --exit-code -- tb_gradscope/plugin/static/

clean:
	rm -rf $(SCRATCH) build dist *.egg-info .pytest_cache
