"""Runs the Python blocks of one docs file in one interpreter, in order, sharing their names.

As if pasted one after another into one session (a later block may use what an earlier one
defined, as readers do). Protocol on stdin: a line ``<n>`` then ``n`` bytes of code; after each
block a line ``DOCS-BLOCK-DONE ok`` or ``DOCS-BLOCK-DONE failed`` on stdout, after its output
(a traceback included). Run by test_docs_run.py as ``python pyrunner.py`` with the docs
block's working directory; stdout and stderr are one pipe.
"""

import sys
import traceback

namespace = {"__name__": "__main__"}
stdin = sys.stdin.buffer
while True:
    header = stdin.readline()
    if not header:
        break
    code = stdin.read(int(header)).decode()
    try:
        exec(compile(code, "<docs block>", "exec"), namespace)
        status = "ok"
    except SystemExit as stop:
        status = "ok" if stop.code in (None, 0) else "failed"
        if status == "failed":
            traceback.print_exc()
    except BaseException:  # SystemExit included: the block failed, the session goes on
        traceback.print_exc()
        status = "failed"
    sys.stdout.flush()
    sys.stderr.flush()
    print(f"\nDOCS-BLOCK-DONE {status}", flush=True)
