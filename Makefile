# The two entry points of the README: `make run` (a local cluster) and `make test` (the suite).
# Both build .venv from scratch on a fresh machine; nothing needs to be typed before them.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test bench clean setup

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,spark]'
	touch $(STAMP)

setup: $(STAMP)

tests/js/node_modules/.installed: tests/js/package.json
	cd tests/js && npm install --no-audit --no-fund --silent
	touch $@

run: $(STAMP)
	$(VENV)/bin/nsqpy-dev

test: $(STAMP) tests/js/node_modules/.installed
	$(PY) -m pytest -q -p no:cacheprovider

bench: $(STAMP)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) tests/js/node_modules
