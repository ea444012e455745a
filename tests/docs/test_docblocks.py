"""The docs runner's own vocabulary, on small made-up documents: every marker does what
tests/docs/docblocks.py says, and a broken block fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from docs.docblocks import MarkerError, extract, looks_like_commands, rewrite_ports
from docs.test_docs_run import run_file, shell_script


def write(tmp: Path, text: str) -> Path:
    path = tmp / "made-up.md"
    path.write_text(text)
    return path


def test_markers_parse_and_apply_to_the_next_block_only(tmp_path: Path) -> None:
    blocks = extract(write(tmp_path, """
<!-- docs: skip -- needs a YARN cluster -->
```sh
spark-submit --master yarn x.py
```

<!-- docs: needs topic=orders channel=orders/billing -->

<!-- docs: cluster=fresh timeout=30 run-for=2 expect="a b" expect=c -->
```python
print("a b c")
```

Text between.

```
curl -s http://127.0.0.1:4151/ping
```

```text
curl is not run here
```
"""))
    skipped, python, unlabeled, text = blocks
    assert skipped.skip == "needs a YARN cluster" and not skipped.runnable
    assert python.topics == ["orders"] and python.channels == [("orders", "billing")]
    assert (python.cluster, python.timeout, python.run_for, python.expect) == ("fresh", 30, 2, ["a b", "c"])
    assert unlabeled.skip is None and looks_like_commands(unlabeled) and not looks_like_commands(text)


@pytest.mark.parametrize("marker", ["skip", "skip -- ", "needs topik=x", "cluster=warm", "expect"])
def test_bad_marker_is_an_error(tmp_path: Path, marker: str) -> None:
    with pytest.raises(MarkerError):
        extract(write(tmp_path, f"<!-- docs: {marker} -->\n```sh\ntrue\n```\n"))


def test_ports_rewritten_only_as_ports() -> None:
    code = "curl http://127.0.0.1:4151/x --lookupd-http-address=h:4161 :4150 :41500 4150 '[::1]:4171'"
    assert rewrite_ports(code, (1, 2, 3, 4, 5)) == \
        "curl http://127.0.0.1:2/x --lookupd-http-address=h:4 :1 :41500 4150 '[::1]:5'"


def test_long_running_commands_are_bounded(tmp_path: Path) -> None:
    block = extract(write(tmp_path, "<!-- docs: run-for=3 -->\n```console\n$ .venv/bin/nsq_tail \\\n"
                                    "    --topic=t\nnot a command\n$ curl -s x\n```\n"))[0]
    script = shell_script(block, (1, 2, 3, 4, 5))
    assert "__docs_bounded 3 <<'__DOCS_EOF__'\n.venv/bin/nsq_tail \\\n    --topic=t\n__DOCS_EOF__" in script
    assert "\ncurl -s x\n" in script and "not a command" not in script


@pytest.mark.timeout(180)
def test_vocabulary_against_a_cluster(tmp_path: Path) -> None:
    """needs, cluster=fresh, console, a bounded nsq_tail and expect, against nsqpy-dev on free ports."""
    doc = write(tmp_path, """
<!-- docs: needs topic=orders channel=orders/billing expect=billing -->
```sh
curl -s 'http://127.0.0.1:4151/stats?format=json&topic=orders'
```

<!-- docs: expect=hello -->
```console
$ curl -s -d hello 'http://127.0.0.1:4151/pub?topic=tail'
OK
$ .venv/bin/nsq_tail --topic=tail --nsqd-tcp-address=127.0.0.1:4150
hello
```

<!-- docs: cluster=fresh -->
```python
import json, urllib.request
stats = json.load(urllib.request.urlopen("http://127.0.0.1:4151/stats?format=json"))
assert stats["topics"] == [], stats["topics"]     # a fresh cluster: nothing from above
```
""")
    (tmp_path / "run").mkdir()
    ran, marked = run_file(doc, tmp_path / "run")
    assert len(ran) == 3 and marked == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("body", [
    "```sh\ncurl -s 'http://127.0.0.1:4151/pub?topik=x' -d x\n```\n",             # HTTP 400
    "```sh\n.venv/bin/nsq_tail --topik=x --nsqd-tcp-address=127.0.0.1:4150\n```\n",  # a bad flag
    "<!-- docs: expect=never -->\n```sh\necho something\n```\n",                    # missing output
    "```python\nraise SystemExit(3)\n```\n",
    "<!-- docs: timeout=2 -->\n```python\nimport time; time.sleep(30)\n```\n",
])
def test_a_broken_block_fails(tmp_path: Path, body: str) -> None:
    (tmp_path / "run").mkdir()
    with pytest.raises(AssertionError, match="failed"):
        run_file(write(tmp_path, body), tmp_path / "run")
