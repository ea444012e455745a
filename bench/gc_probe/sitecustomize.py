"""Put into our nsqd by ``bench/measure_bench.py`` (on ``PYTHONPATH``) for the ``gc_pause`` row.

``/stats`` reports a collection's wall time, as Go does; on a loaded machine a pass of a
millisecond's CPU that the scheduler interrupts reads as tens of milliseconds. This records the
CPU time of the longest pass too (the thread's own clock, which stops while it waits for a
core) and writes it, in nanoseconds, to the file ``NSQPY_GC_PROBE`` names on ``SIGUSR1``.
"""

import gc
import os
import signal
import time

_OUT = os.environ.get("NSQPY_GC_PROBE")
_started = 0
_longest = 0


def _probe(phase: str, info: dict) -> None:
    global _started, _longest
    if phase == "start":
        _started = time.thread_time_ns()
    elif _started:
        _longest = max(_longest, time.thread_time_ns() - _started)
        _started = 0


def _report(signum: int, frame: object) -> None:
    with open(_OUT, "w") as out:  # type: ignore[arg-type]
        out.write(str(_longest))


if _OUT:
    gc.callbacks.append(_probe)
    signal.signal(signal.SIGUSR1, _report)
