"""The fenced code blocks of README.md and docs/*.md, with the markers that say how to run them.

A block is run when its language is a shell (``sh``, ``shell``, ``bash``, ``console``) or
``python``. The lines ``<!-- docs: ... -->`` right above its fence (blank lines between allowed)
are its markers; the vocabulary, which test_docs_run.py implements:

``<!-- docs: skip -- REASON -->``
    not runnable here (a YARN recipe, a two-hour benchmark); the reason is required and printed.
``<!-- docs: needs topic=T channel=T/C ... -->``
    create these topics / channels (on the cluster's nsqd, over HTTP) before the block.
``<!-- docs: cluster=fresh -->``
    stop the file's cluster and start a new one with an empty data directory before the block.
``<!-- docs: cluster=started-here -->``
    the block starts the cluster itself (``make run``): it runs in the background, the blocks after
    it use that cluster, and at the end of the file it gets Ctrl-C and must exit 0.
``<!-- docs: timeout=SECONDS -->``
    the block's time bound (default: 60 for shell, 180 for Python).
``<!-- docs: run-for=SECONDS -->``
    how long long-running commands in this block (nsq_tail, nsq_to_file, nsqd, ``make run``...) run
    before they get Ctrl-C (default 4); they pass if they were still running or exited 0.
``<!-- docs: expect=TEXT -->``
    the block's output (stdout and stderr) must contain TEXT (shell-quoted; repeatable).

Several markers may share one comment (``<!-- docs: needs topic=orders timeout=30 -->``).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

SHELL_LANGS = {"sh", "shell", "bash", "console"}
RUN_LANGS = SHELL_LANGS | {"python"}
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
MARKER = re.compile(r"^\s*<!--\s*docs:\s*(.*?)\s*-->\s*$")
DEFAULT_PORTS = (4150, 4151, 4160, 4161, 4171)
KEYS = {"cluster", "timeout", "run-for", "expect"}


class MarkerError(ValueError):
    """A marker the vocabulary does not know (a typo would otherwise silently run or skip)."""


@dataclass
class Block:
    path: Path
    line: int                     # of the opening fence, 1-based
    lang: str
    code: str
    skip: str | None = None       # the reason, when marked not runnable
    topics: list[str] = field(default_factory=list)
    channels: list[tuple[str, str]] = field(default_factory=list)
    cluster: str | None = None    # None, "fresh" or "started-here"
    timeout: float | None = None
    run_for: float = 4.0
    expect: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"

    @property
    def runnable(self) -> bool:
        return self.lang in RUN_LANGS and self.skip is None


def doc_files(root: Path) -> list[Path]:
    """README.md and every docs/*.md, known or not."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def extract(path: Path) -> list[Block]:
    """Every fenced block of ``path`` with its markers applied; raises MarkerError on a bad marker."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    markers: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = MARKER.match(line)
        if m:
            markers.append(m.group(1))
            i += 1
            continue
        fence = FENCE.match(line)
        if fence:
            indent, ticks, lang = fence.groups()
            body: list[str] = []
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(ticks):
                text = lines[j]
                body.append(text[len(indent):] if text.startswith(indent) else text.lstrip())
                j += 1
            block = Block(path, i + 1, lang.lower(), "\n".join(body) + "\n")
            for text in markers:
                _apply(block, text)
            blocks.append(block)
            markers = []
            i = j + 1
            continue
        if line.strip():
            markers = []   # a marker applies only to the block right below it
        i += 1
    return blocks


def _apply(block: Block, text: str) -> None:
    where = f"{block.where}: marker <!-- docs: {text} -->"
    if text == "skip" or text.startswith("skip ") or text.startswith("skip--"):
        reason = text[4:].strip()
        if not reason.startswith("--") or not reason[2:].strip():
            raise MarkerError(f"{where}: write the reason: <!-- docs: skip -- REASON -->")
        block.skip = reason[2:].strip()
        return
    tokens = shlex.split(text)
    needs = False
    for token in tokens:
        if token == "needs":
            needs = True
            continue
        key, sep, value = token.partition("=")
        if not sep:
            raise MarkerError(f"{where}: {token!r} is not KEY=VALUE")
        if needs and key == "topic":
            block.topics.append(value)
        elif needs and key == "channel" and "/" in value:
            topic, channel = value.split("/", 1)
            block.channels.append((topic, channel))
        elif key == "cluster" and value in ("fresh", "started-here"):
            block.cluster = value
        elif key == "timeout":
            block.timeout = float(value)
        elif key == "run-for":
            block.run_for = float(value)
        elif key == "expect":
            block.expect.append(value)
        else:
            raise MarkerError(f"{where}: unknown {token!r} (vocabulary: tests/docs/docblocks.py)")


def rewrite_ports(code: str, ports: tuple[int, ...]) -> str:
    """``:4150`` ... ``:4171`` (host:port, URLs, flags) become the test cluster's ports."""
    mapping = dict(zip(map(str, DEFAULT_PORTS), map(str, ports)))
    return re.sub(r"(?<=:)(4150|4151|4160|4161|4171)\b", lambda m: mapping[m.group(1)], code)


#: first words of commands: an unlabeled block made of these is one a user would copy
_COMMANDS = re.compile(r"^\s*(\$ )?([A-Z_]+=|curl|make|python3?|\.venv/|nsq\w*|to_nsq|pip|spark-submit|"
                       r"\$SPARK_HOME|docker|kubectl|bench/|env/|/opt/)")


def looks_like_commands(block: Block) -> bool:
    """An unlabeled block whose first non-comment line is a command: label it ``sh`` or ``text``."""
    if block.lang:
        return False
    for line in block.code.splitlines():
        if line.strip() and not line.strip().startswith("#"):
            return bool(_COMMANDS.match(line))
    return False
