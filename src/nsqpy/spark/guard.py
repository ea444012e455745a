"""PySpark 4.0/4.1: stop AvailableNow and Once queries reading ``format("nsq")``, loudly.

Before 4.2 Spark runs such a query on a Python source as a single micro-batch that it never commits
to the source: the source cannot FIN what it read and the rest of the backlog is not read, while the
query ends successfully. Nothing is lost (nsqd redelivers un-FINed messages after ``msgTimeoutMs``),
but the user asked for a drained channel and would silently get a fraction of it, written again on
the next run. The source's runner cannot tell the trigger, so the driver does: a
``StreamingQueryListener`` added by :func:`nsqpy.spark.register` looks at every query that starts
and stops the ones that have an nsq source and such a trigger, with
:data:`~nsqpy.spark._compat.AVAILABLE_NOW_UNSUPPORTED` as an ERROR log and in
:data:`REFUSED` (query id -> reason), before their first batch when the listener is quick enough,
and at worst after it (then that batch's messages come back after ``msgTimeoutMs``).
Classic (py4j) sessions only: a Spark Connect client has no JVM handle to inspect.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

from ._compat import AVAILABLE_NOW_UNSUPPORTED, HAS_AVAILABLE_NOW

log = logging.getLogger("nsqpy.spark")

#: query id -> why the guard stopped it (for callers that want to check after awaitTermination)
REFUSED: dict[str, str] = {}
_TRIGGERS = ("AvailableNowTrigger", "OneTimeTrigger")
_installed: set[int] = set()


def install(spark: Any) -> bool:
    """Add the guard to ``spark`` (once) when this PySpark needs it; True if it is active."""
    if HAS_AVAILABLE_NOW or getattr(spark, "_jsparkSession", None) is None:
        return False
    key = id(spark._jsparkSession)
    if key in _installed:
        return True
    from pyspark.sql.streaming.listener import StreamingQueryListener

    class _Guard(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            _check(spark, str(event.id))

        def onQueryProgress(self, event: Any) -> None:
            pass

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    spark.streams.addListener(_Guard())
    _installed.add(key)
    return True


def _check(spark: Any, query_id: str) -> None:
    try:
        query = spark.streams.get(query_id)
        if query is None:
            return
        execution = query._jsq.streamingQuery()
        trigger = execution.trigger().getClass().getSimpleName()
        if not any(t in trigger for t in _TRIGGERS) or not _reads_nsq(execution):
            return
    except Exception as err:  # the guard must never break a query it cannot inspect
        log.warning("nsq guard: cannot inspect query %s: %s", query_id, err)
        return
    REFUSED[query_id] = AVAILABLE_NOW_UNSUPPORTED
    log.error("%s (query %s stopped)", AVAILABLE_NOW_UNSUPPORTED, query_id)
    # stop from another thread: this callback runs on Spark's listener bus
    threading.Thread(target=query.stop, name="nsqpy-guard-stop", daemon=True).start()


#: how a data source named nsq prints in the query's analyzed plan (4.0 and 4.1): a relation
#: not yet turned into a scan, so reading it starts nothing
_NSQ_RELATION = re.compile(r"StreamingRelationV2 \S*PythonDataSourceV2@\S+, nsq, ")
#: how a streaming scan of a data source named nsq prints in the query's logical plan
_NSQ_SCAN = re.compile(r"StreamingDataSourceV2\w*Relation\[[^\]]*\] nsq\s*$", re.MULTILINE)


def _reads_nsq(execution: Any) -> bool:
    """Whether the query reads a Python data source named ``nsq``. The analyzed plan first: the
    logical plan is made on first use, and making it creates every source's reader (a Python
    worker that must connect back within 10 s): on a busy machine that can fail inside this
    listener, and the guard would let a query it could not inspect run its one uncommitted
    batch (CI, 2026-11-29: a Once query not refused)."""
    try:
        analyzed = execution.analyzedPlan().treeString()
    except Exception:  # noqa: BLE001 - a PySpark whose execution has no analyzedPlan
        return bool(_NSQ_SCAN.search(execution.logicalPlan().toString()))
    return bool(_NSQ_RELATION.search(analyzed))
