"""The docs run as written (issue #34): every ``sh``/``shell``/``bash``/``console`` and ``python``
block of README.md and docs/*.md (files added later included) runs against a real local cluster.

Per file, in order: the cluster is ``nsqpy-dev`` (what ``make run`` starts: nsqlookupd + nsqd +
nsqadmin) on free loopback ports (``NSQPY_DEV_PORTS``) with its own data directory, started at the
file's first runnable block unless a block starts it itself (``cluster=started-here``: README's
``make run``). Every block's ``:4150 :4151 :4160 :4161 :4171`` are rewritten to those ports; that is
the only change made to a block. Markers (``<!-- docs: ... -->`` above a fence) are documented in
tests/docs/docblocks.py: ``skip -- REASON``, ``needs topic=T channel=T/C``, ``cluster=fresh``,
``cluster=started-here``, ``timeout=S``, ``run-for=S``, ``expect=TEXT``.

How blocks run, so that a broken example fails:
* shell blocks: one ``bash -eo pipefail`` script each, with the cwd a scratch directory whose
  entries link to the repository's (so ``.venv/bin/nsq_tail`` and ``make run`` work and what a block
  writes stays out of the tree), stdin from /dev/null, the venv *not* activated (its bin dir is
  not on PATH, VIRTUAL_ENV unset: a user who just ran ``make run``); ``curl`` fails on an HTTP
  error status; long-running commands (nsq_tail, nsq_to_*, nsq_stat, the daemons, ``make run``) run
  for ``run-for`` seconds, then get Ctrl-C, and pass if still running or exited 0;
* Python blocks: one interpreter per file (``.venv/bin/python``, tests/docs/pyrunner.py), blocks
  in order sharing their names; an exception fails the block;
* a block fails on a non-zero exit, an exception, a timeout, or a missing ``expect`` text.
"""

from __future__ import annotations

import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from docs.docblocks import (SHELL_LANGS, Block, doc_files, extract, looks_like_commands, rewrite_ports)
from docs.docrun import ROOT, VENV_BIN, Cluster, block_env, scratch_dir
from helpers.servers import free_port

LONG_RUNNING = {"nsq_tail", "nsq_to_file", "nsq_to_http", "nsq_to_nsq", "nsq_stat", "nsqd", "nsqlookupd",
                "nsqadmin", "nsqpy-dev"}
PRELUDE = r"""
curl() { command curl --fail-with-body "$@"; }
make() {  # never reinstalls the venv from inside the suite (make takes no -o from MAKEFLAGS)
  [ -e .venv/.installed ] || { echo "docs test: .venv/.installed missing (run make setup)" >&2; return 1; }
  command make -o .venv/.installed "$@"
}
__docs_bounded() {  # run the command on stdin for $1 seconds, then Ctrl-C; fail only on a failed exit
  local cmd; cmd=$(cat)
  timeout --signal=INT --kill-after=10 "$1" bash -c "$cmd" </dev/null && return 0
  local rc=$?
  [ $rc -eq 124 ] && return 0
  echo "docs test: long-running command exited $rc before its bound: $cmd" >&2
  return $rc
}
"""


def _long_running(command: str) -> bool:
    words = shlex.split(command, comments=True) if command.strip() else []
    while words and "=" in words[0] and not words[0].startswith(("-", "=")):
        words = words[1:]      # VAR=value prefixes
    if not words:
        return False
    return Path(words[0]).name in LONG_RUNNING or words[:2] == ["make", "run"]


def shell_script(block: Block, ports: tuple[int, ...]) -> str:
    """The block as a bash script: ports rewritten, long-running commands bounded."""
    code = rewrite_ports(block.code, ports)
    lines = code.splitlines()
    if block.lang == "console":   # the `$ ` lines and their continuations; the rest is output
        kept: list[str] = []
        for line in lines:
            if line.startswith("$ "):
                kept.append(line[2:])
            elif kept and kept[-1].rstrip().endswith("\\"):
                kept.append(line)
        lines = kept
    out: list[str] = [PRELUDE]
    pending = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line + "\n"
            continue
        command, pending = pending + line, ""
        try:
            bounded = _long_running(command.replace("\\\n", " "))
        except ValueError:   # unbalanced quotes across lines: leave it to bash
            bounded = False
        if bounded and block.cluster != "started-here":
            out.append(f"__docs_bounded {block.run_for:g} <<'__DOCS_EOF__'\n{command}\n__DOCS_EOF__")
        else:
            out.append(command)
    if pending:
        out.append(pending)
    return "\n".join(out) + "\n"


class PythonSession:
    """tests/docs/pyrunner.py: the file's Python blocks in one interpreter."""

    def __init__(self, cwd: Path, env: dict[str, str]):
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("pyrunner.py"))],
                                     cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def run(self, code: str, timeout: float) -> tuple[bool, str]:
        data = code.encode()
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"%d\n" % len(data) + data)
        self.proc.stdin.flush()
        out: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.close()
                return False, "".join(out) + f"\n[docs test: timed out after {timeout:g}s]"
            if line is None:
                return False, "".join(out) + f"\n[docs test: the interpreter exited ({self.proc.poll()})]"
            text = line.decode(errors="replace")
            if text.startswith("DOCS-BLOCK-DONE "):
                return text.split()[1] == "ok", "".join(out)
            out.append(text)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # type: ignore[union-attr]
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)   # Spark's JVM and workers included
        except ProcessLookupError:
            pass
        self.proc.wait(5)


def run_shell(block: Block, script: str, cwd: Path, env: dict[str, str], timeout: float) -> tuple[bool, str]:
    proc = subprocess.Popen(["bash", "-eo", "pipefail", "-c", script], cwd=cwd, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        ok = proc.returncode == 0
        text = out.decode(errors="replace") + ("" if ok else f"\n[docs test: exit status {proc.returncode}]")
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        ok, text = False, out.decode(errors="replace") + f"\n[docs test: timed out after {timeout:g}s]"
    try:
        os.killpg(proc.pid, signal.SIGKILL)   # nothing it started outlives it
    except ProcessLookupError:
        pass
    return ok, text


def run_file(path: Path, tmp: Path) -> tuple[list[Block], list[Block]]:
    """Run every runnable block of ``path`` in order; returns (ran, marked not runnable)."""
    blocks = extract(path)
    ran = [b for b in blocks if b.runnable]
    marked = [b for b in blocks if b.lang in {"python", *SHELL_LANGS} and b.skip is not None]
    if not ran:
        return ran, marked
    ports = tuple(free_port() for _ in range(5))
    work = scratch_dir(tmp)
    cluster: Cluster | None = None
    python: PythonSession | None = None
    generation = 0
    finished = False

    def env() -> dict[str, str]:
        return block_env(ports, tmp / f"data{generation}")

    def start_cluster() -> Cluster:
        return Cluster([str(VENV_BIN / "nsqpy-dev")], ports, work, env(), tmp / f"cluster{generation}.log")

    try:
        for block in ran:
            if block.cluster in ("fresh", "started-here") and cluster is not None:
                cluster.stop()
                cluster, generation = None, generation + 1
            if block.cluster == "started-here":
                script = shell_script(block, ports)
                cluster = Cluster(["bash", "-eo", "pipefail", "-c", script], ports, work, env(),
                                  tmp / f"cluster{generation}.log")
                cluster.block = block  # type: ignore[attr-defined]
                continue
            if cluster is None:
                cluster = start_cluster()
            cluster.create(block.topics, block.channels)
            if block.lang == "python":
                python = python or PythonSession(work, env())
                ok, out = python.run(rewrite_ports(block.code, ports), block.timeout or 180)
            else:
                ok, out = run_shell(block, shell_script(block, ports), work, env(), block.timeout or 60)
            missing = [t for t in block.expect if t not in out]
            assert ok and not missing, (
                f"{block.where} ({block.lang}) failed"
                + (f"; output lacks {missing}" if missing else "")
                + f"\n--- block (ports {ports}) ---\n{rewrite_ports(block.code, ports)}--- output ---\n{out}")
        finished = True
    finally:
        if python is not None:
            python.close()
        if cluster is not None:
            started_here = getattr(cluster, "block", None)
            running = cluster.proc.poll() is None
            cluster.stop()
            if started_here is not None:
                out = cluster.output()
                missing = [t for t in started_here.expect if t not in out]
                assert not finished or (running and not missing), (f"{started_here.where}: the cluster it started "
                                                 f"{'lacks ' + str(missing) if missing else 'exited early'}:\n{out}")
    return ran, marked


DOC_FILES = doc_files(ROOT)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", DOC_FILES, ids=[p.relative_to(ROOT).as_posix() for p in DOC_FILES])
def test_doc_runs(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    ran, marked = run_file(path, tmp_path)
    with capsys.disabled():
        print(f"\n[docs] {path.relative_to(ROOT)}: ran {len(ran)} blocks, {len(marked)} marked not runnable "
              f"({time.monotonic() - started:.0f}s)")
        for block in marked:
            print(f"[docs]   not run {block.where}: {block.skip}")


def test_docs_inventory(capsys: pytest.CaptureFixture[str]) -> None:
    """Markers are valid (extract raises on an unknown one), and no command hides in an unlabeled
    fence; prints what will run and what is marked, with the reasons."""
    runnable, marked, unlabeled = [], [], []
    for path in DOC_FILES:
        for block in extract(path):
            if block.runnable:
                runnable.append(block)
            elif block.skip is not None:
                marked.append(block)
            elif looks_like_commands(block):
                unlabeled.append(block.where)
    with capsys.disabled():
        print(f"\n[docs] {len(runnable)} runnable blocks, {len(marked)} marked not runnable in "
              f"{len(DOC_FILES)} files:")
        for block in marked:
            print(f"[docs]   {block.where} ({block.lang or 'unlabeled'}): {block.skip}")
    assert not unlabeled, ("commands in unlabeled fences (label them ```sh, add <!-- docs: skip -- REASON --> "
                           f"if they cannot run here, or ```text if they are not commands): {unlabeled}")
    assert runnable, "no runnable block found: the extractor is broken"
