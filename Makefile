# The two entry points of the README: `make run` (a local cluster) and `make test` (the suite).
# Both build .venv from scratch on a fresh machine; nothing needs to be typed before them.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# tests/spark run a second time on the oldest PySpark the spark extra allows (pyspark>=4.0)
SPARK_MIN := 4.0.*
VENV_MIN := .venv-spark-min
STAMP_MIN := $(VENV_MIN)/.installed

.PHONY: run test test-pythons test-quick record-upstream bench clean setup browser graphite prometheus fuse golang wrk

# Python writes each module's bytecode once and reuses it: a shell that sets
# PYTHONDONTWRITEBYTECODE (as some images do) would make each of the thousands of daemons and
# tools the tests start compile nsqpy from source again (nsqd start-up 0.17 s of CPU -> 0.08 s)
unexport PYTHONDONTWRITEBYTECODE

# --no-compile: pip would compile every module of every package (pyspark's thousands) at
# install, ~10 CPU-s a venv and four venvs a `make test`; Python compiles what is imported,
# once, on first use
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile -e '.[test,spark,connect]'
	touch $(STAMP)

$(STAMP_MIN): pyproject.toml
	$(PYTHON) -m venv $(VENV_MIN)
	$(VENV_MIN)/bin/python -m pip install -q --upgrade pip
	$(VENV_MIN)/bin/python -m pip install -q --no-compile 'pyspark==$(SPARK_MIN)' -e '.[test,spark]'
	touch $(STAMP_MIN)

setup: $(STAMP)

# Debian's Chromium for the nsqadmin UI test (Playwright drives it; no browser download).
# Installed when missing and we may (root); otherwise that one test skips with its reason.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	  || echo "chromium not installed: the nsqadmin UI test will skip"; }

# Graphite (Debian's carbon + graphite-web) and the npm statsd daemon for the nsqadmin graphite
# test; installed when missing and we may (root); otherwise that test skips with its reason.
graphite: tests/statsd_daemon/node_modules/.installed
	@[ -x /usr/bin/carbon-cache ] && /usr/bin/python3 -c 'import graphite.settings' 2>/dev/null || \
	  { [ "$$(id -u)" = 0 ] && (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install \
	    -y -qq graphite-carbon graphite-web >/dev/null) || echo "graphite not installed: the nsqadmin graphite test will skip"; }

# Debian's Prometheus server and promtool for the /metrics tests (tests/metrics); like chromium.
prometheus:
	@command -v prometheus >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null) \
	  || echo "prometheus not installed: the Prometheus server tests will skip"; }

# Debian's fuse3 (libfuse 3, fusermount3) for the power-cut file system of the power-loss tests
# (tests/helpers/powercut); like chromium. Without a usable /dev/fuse those tests skip.
fuse:
	@command -v fusermount3 >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3 >/dev/null) \
	  || echo "fuse3 not installed: the power-loss tests will fail to mount"; }

# Debian's Go (golang-go: Go 1.19, the Go upstream v1.3.0 was built with) for the oracle of the
# differential tests (tests/gooracle: Go's own regexp, encoding/json and crypto/x509 answering
# generated inputs); like chromium. Without it those tests skip.
golang:
	@command -v go >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go >/dev/null) \
	  || echo "go not installed: the Go-oracle differential tests will skip"; }

tests/js/node_modules/.installed: tests/js/package.json
	cd tests/js && npm install --no-audit --no-fund --silent
	touch $@

# Etsy's statsd daemon, fed by nsqd's --statsd-address in tests/nsqd/stats/test_statsd_daemon.py
tests/statsd_daemon/node_modules/.installed: tests/statsd_daemon/package.json
	cd tests/statsd_daemon && npm install --no-audit --no-fund --silent
	touch $@

run: $(STAMP)
	$(VENV)/bin/nsqpy-dev

# The suite on PYTEST_WORKERS workers (pytest-xdist): most tests wait on sockets, processes and
# timers, not on the 2 cores. Which tests share a worker or never overlap: tests/helpers/groups.py
# and docs/testing.md. PYTEST_ARGS narrows the main run (a path, -k ...). Beside the main run, on
# ports of their own (NSQPY_TEST_PORTS) and under the same serial lock (NSQPY_TEST_LOCKS), their
# output kept until the main run is done: the Spark floor (tests/spark on the oldest PySpark we
# allow, one process, one JVM session), and the quick suite with the TLS, interop and docs tests
# on each other CPython we claim (OTHER_PYTHONS, tests/other_pythons.sh); any failing fails.
PYTEST_WORKERS ?= 4
# No --dist: for any -n run tests/conftest.py installs tests/helpers/groups.py's GroupScheduling
# (xdist's loadscope with our groups and modules as the units, longest first, serial last);
# xdist's own `--dist loadgroup` groups nothing on pytest 9.2 (pytest-xdist#1386, docs/testing.md)
PYTEST_XDIST = -n $(PYTEST_WORKERS)
PYTEST_ARGS ?=
FLOOR_LOG := .pytest-spark-floor.log
OTHER_PYTHONS ?= 3.12 3.13
PYTHONS_LOG := .pytest-pythons.log

test: $(STAMP) tests/js/node_modules/.installed tests/statsd_daemon/node_modules/.installed browser graphite prometheus fuse golang
	@rc=0; export NSQPY_TEST_LOCKS=$$(mktemp -d); \
	{ $(MAKE) --no-print-directory $(STAMP_MIN) && \
	  NSQPY_TEST_PORTS=10000-14999 $(VENV_MIN)/bin/python -m pytest -q -p no:cacheprovider tests/spark \
	  --deselect tests/spark/test_connect.py --deselect tests/spark/test_standalone.py \
	  --deselect tests/spark/test_history_cluster.py; } > $(FLOOR_LOG) 2>&1 & floor=$$!; \
	tests/other_pythons.sh $(OTHER_PYTHONS) > $(PYTHONS_LOG) 2>&1 & pythons=$$!; \
	trap 'kill $$floor $$pythons 2>/dev/null' EXIT; \
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_XDIST) --durations=20 $(PYTEST_ARGS) || rc=$$?; \
	wait $$floor || rc=$$?; wait $$pythons || rc=$$?; trap - EXIT; \
	echo "== tests/spark again on PySpark $(SPARK_MIN) (the floor), run beside the above =="; \
	cat $(FLOOR_LOG); cat $(PYTHONS_LOG); rm -rf "$$NSQPY_TEST_LOCKS"; \
	exit $$rc

# The other CPythons' part of `make test` alone (tests/other_pythons.sh): make test-pythons
test-pythons: tests/js/node_modules/.installed golang
	tests/other_pythons.sh $(OTHER_PYTHONS)

# The loop to run before every commit (< 3 min): the protocol core, the import graph, and one
# smoke test per daemon and utility, listed in tests/quick.args.
test-quick: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_XDIST) --durations=5 @tests/quick.args

# Upstream's answers as data (tests/recordings; tests/helpers/recording.py): the side-by-side tests
# run live against upstream's binaries ($$NSQ_UPSTREAM_BIN) and write what upstream answered, so a
# change shows in `git diff`. The whole set is rewritten (a test gone takes its recording along);
# PYTEST_ARGS narrows the run and then only those recordings change.
RECORDED_TESTS = $(shell grep -rlE --include='test_*.py' \
  'helpers\.recording|helpers\.upstream|tools\.sidebyside|admin\.upstream_util|upstream_nsqd' tests | sort)
record-upstream: $(STAMP)
	@[ -d "$$NSQ_UPSTREAM_BIN" ] || { echo "record-upstream: set NSQ_UPSTREAM_BIN to the directory of upstream v1.3.0's binaries (docs/testing.md)"; exit 2; }
	@[ -n "$(PYTEST_ARGS)" ] || rm -rf tests/recordings
	NSQ_RECORD_UPSTREAM=1 $(PY) -m pytest -q -p no:cacheprovider $(PYTEST_XDIST) $(or $(PYTEST_ARGS),$(RECORDED_TESTS))

# wrk (Debian's package) for bench/http_bench.py: installed when missing and we may (root)
wrk:
	@command -v wrk >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null) \
	  || echo "wrk not installed: bench/http_bench.py will not run"; }

bench: $(STAMP) wrk
	$(PY) bench/nsqd_bench.py
	command -v wrk >/dev/null 2>&1 && $(PY) bench/http_bench.py || true

clean:
	rm -rf $(VENV) $(VENV_MIN) .venv-py3.* tests/js/node_modules tests/statsd_daemon/node_modules
