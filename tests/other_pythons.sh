#!/usr/bin/env bash
# `make test`'s run on every other CPython pyproject.toml claims (docs/testing.md): for each
# version given (3.12 3.13), the interpreter is `pythonX.Y` on PATH or pyenv's newest X.Y.*;
# in a venv of its own (.venv-pyX.Y, rebuilt when pyproject.toml is newer) it runs the quick
# suite (tests/quick.args) and the TLS, interop and docs tests (tests/pythons.args), on ports of
# its own (an equal share of PYTHONS_PORTS, default 15000-19999), all versions at once, each
# one's output printed when all are done. A version not found is named as skipped. Exits
# non-zero when any run failed.
set -u
cd "$(dirname "$0")/.."
pyenv_root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
workers=${PYTHONS_WORKERS:-2}

find_python() {  # the first candidate that really is CPython $1 (a pyenv shim may not be)
    local candidate
    for candidate in "$(command -v "python$1")" \
        $(ls -d "$pyenv_root"/versions/"$1".*/bin/python"$1" 2>/dev/null | sort -V -r); do
        [ -n "$candidate" ] && "$candidate" -c "import sys; assert sys.version.startswith('$1.')" \
            2>/dev/null && { echo "$candidate"; return 0; }
    done
    return 1
}

run_one() {  # version, interpreter, port range
    local venv=".venv-py$1"
    if [ ! "$venv/.installed" -nt pyproject.toml ]; then
        rm -rf "$venv" && "$2" -m venv "$venv" &&
            "$venv/bin/python" -m pip install -q --upgrade pip &&
            "$venv/bin/python" -m pip install -q --no-compile -e '.[test,spark]' && touch "$venv/.installed" ||
            return 1
    fi
    # the `serial` tests among them (upstream's log lines, tests/helpers/groups.py) are left to
    # the main run: a serial test holds every run of `make test` off (the shared lock), so each
    # version's would drain the whole machine once more, waiting out the longest running test
    NSQPY_TEST_PORTS=$3 "$venv/bin/python" -m pytest -q -p no:cacheprovider -n "$workers" \
        @tests/quick.args @tests/pythons.args \
        --deselect tests/interop/test_upstream_v2.py::test_same_log_lines
}

declare -A pythons pids logs
for version in "$@"; do
    if python=$(find_python "$version"); then
        pythons[$version]=$python
    else
        echo "== CPython $version: skipped, not found (python$version on PATH, $pyenv_root/versions/$version.*) =="
    fi
done
[ ${#pythons[@]} -eq 0 ] && exit 0
range=${PYTHONS_PORTS:-15000-19999}
first_port=${range%-*}
share=$(( (${range#*-} - first_port + 1) / ${#pythons[@]} ))
for version in "$@"; do
    [ -n "${pythons[$version]:-}" ] || continue
    python=${pythons[$version]}
    logs[$version]=".pytest-py$version.log"
    ports="$first_port-$((first_port + share - 1))"
    first_port=$((first_port + share))
    { echo "== CPython $version ($python, .venv-py$version): tests/quick.args and tests/pythons.args =="
      run_one "$version" "$python" "$ports"; } > "${logs[$version]}" 2>&1 &
    pids[$version]=$!
done
rc=0
for version in "${!pids[@]}"; do
    wait "${pids[$version]}" || rc=1
done
for version in "$@"; do
    [ -n "${logs[$version]:-}" ] && cat "${logs[$version]}" && rm -f "${logs[$version]}"
done
exit $rc
