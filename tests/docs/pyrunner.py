"""Runs the Python blocks of one docs file in one interpreter, in order, sharing their names.

As if pasted one after another into one session (a later block may use what an earlier one
defined, as readers do). Protocol on stdin: a line ``<n>`` then ``n`` bytes of code; after each
block a line ``DOCS-BLOCK-DONE ok`` or ``DOCS-BLOCK-DONE failed`` on stdout, after its output
(a traceback included). Run by test_docs_run.py as ``python pyrunner.py`` with the docs
block's working directory; stdout and stderr are one pipe.

Both streams write whole lines: Spark's JVM writes its log lines to the same pipe, and an
unbuffered ``print("drained:", drained)`` went out as four writes, so a JVM warning could land
inside the printed line (``drained:<warning>\n True``) and the block's expected text was not
there. A line at a time, the JVM's lines can only come between the block's own.
"""

import sys
import traceback

sys.stdout.reconfigure(line_buffering=True, write_through=False)
sys.stderr.reconfigure(line_buffering=True, write_through=False)
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
    sys.stdout.write(f"\nDOCS-BLOCK-DONE {status}\n")  # one write: no JVM line inside it
