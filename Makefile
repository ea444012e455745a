# The two entry points of the README: `make run` (a local cluster) and `make test` (the suite).
# Both build .venv from scratch on a fresh machine; nothing needs to be typed before them.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test bench clean setup browser prometheus

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,spark]'
	touch $(STAMP)

setup: $(STAMP)

# Debian's Chromium for the nsqadmin UI test (Playwright drives it; no browser download).
# Installed when missing and we may (root); otherwise that one test skips with its reason.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	  || echo "chromium not installed: the nsqadmin UI test will skip"; }

# Debian's Prometheus server and promtool for the /metrics tests (tests/metrics); like chromium.
prometheus:
	@command -v prometheus >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null) \
	  || echo "prometheus not installed: the Prometheus server tests will skip"; }

tests/js/node_modules/.installed: tests/js/package.json
	cd tests/js && npm install --no-audit --no-fund --silent
	touch $@

# Etsy's statsd daemon, fed by nsqd's --statsd-address in tests/nsqd/test_statsd_daemon.py
tests/statsd_daemon/node_modules/.installed: tests/statsd_daemon/package.json
	cd tests/statsd_daemon && npm install --no-audit --no-fund --silent
	touch $@

run: $(STAMP)
	$(VENV)/bin/nsqpy-dev

test: $(STAMP) tests/js/node_modules/.installed tests/statsd_daemon/node_modules/.installed browser prometheus
	$(PY) -m pytest -q -p no:cacheprovider

bench: $(STAMP)
	$(PY) bench/nsqd_bench.py

clean:
	rm -rf $(VENV) tests/js/node_modules tests/statsd_daemon/node_modules
