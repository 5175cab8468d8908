# rooda.py - developer commands. Only `test` is needed by CI (.ci/run).
PYTHON ?= python3
VERSION := $(shell $(PYTHON) -c "import rooda; print(rooda.__version__)")

.PHONY: test test-compat test-browser fuzz lint bench size version

test:  ## the whole test suite, test_compat on the oldest interpreter only (about three minutes on 2 cores)
	$(PYTHON) -m pytest -q tests

test-compat:  ## the end-to-end smoke test on every CPython 3.8-3.13 found (`make test` runs the oldest)
	ROODA_COMPAT_ALL=1 $(PYTHON) -m pytest -v -rs tests/test_compat.py

test-browser:  ## the report's page drawn by a real headless Chromium (apt-get install chromium; .ci/run does)
	$(PYTHON) -m pytest -v -rs tests/test_report.py -k browser

fuzz:  ## the config loaders' property tests with 20000 examples each (a few minutes)
	ROODA_FUZZ_EXAMPLES=20000 $(PYTHON) -m pytest -q tests/test_yaml.py -k "mutated or random or round_trip"

lint:  ## compile on every interpreter found; mypy and pycodestyle when installed
	@for v in 3.8 3.9 3.10 3.11 3.12 3.13; do \
	  py=$$($(PYTHON) -c "import sys; sys.path.insert(0, 'tests'); from interpreters import find_interpreter; print(find_interpreter('$$v') or '')"); \
	  if [ -n "$$py" ]; then $$py -c "import ast, sys; ast.parse(open('rooda.py').read())" && echo "ok: parses on python$$v"; \
	  else echo "skipped: python$$v not found"; fi; done
	@if $(PYTHON) -m mypy --version >/dev/null 2>&1; then $(PYTHON) -m mypy --ignore-missing-imports rooda.py; \
	  else echo "skipped: mypy (pip install mypy)"; fi
	@if $(PYTHON) -m pycodestyle --version >/dev/null 2>&1; then $(PYTHON) -m pycodestyle --max-line-length=110 rooda.py; \
	  else echo "skipped: pycodestyle (pip install pycodestyle)"; fi

bench:  ## rooda's own overhead against the plain shell loop (prints figures; never fails on them)
	$(PYTHON) tests/bench.py

size:  ## rooda.py per part and in all: lines, tokens, compile ms; long lines; the token budget (SPEC 17)
	$(PYTHON) tests/size.py

version:
	@echo $(VERSION)
