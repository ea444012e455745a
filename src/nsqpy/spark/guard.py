"""PySpark 4.0/4.1: refuse AvailableNow and Once queries reading ``format("nsq")`` at ``start()``.

Before 4.2 Spark runs such a query on a Python source as a single micro-batch that it never commits
to the source: the source cannot FIN what it read and the rest of the backlog is not read, while the
query ends successfully. Nothing is lost (nsqd redelivers un-FINed messages after ``msgTimeoutMs``),
but the user asked for a drained channel and would silently get a fraction of it, written again on
the next run. The source's runner cannot tell the trigger, so the driver does, before anything runs:
:func:`install` (called by :func:`nsqpy.spark.register`) wraps PySpark's ``DataStreamWriter`` so
that ``start()`` and ``toTable()`` of a query with such a trigger whose plan reads nsq raise
:class:`UnsupportedTriggerError` with :data:`~nsqpy.spark._compat.AVAILABLE_NOW_UNSUPPORTED`.

Why not a ``StreamingQueryListener`` (the first version): Spark delivers its events on an
asynchronous bus, so a Once query whose one batch was quick had ended before the listener looked,
and went through (beside ``stress-ng``, 2026-11-29). The check in ``start()`` has no such race.
Classic (py4j) sessions only: a Spark Connect client has no JVM handle to inspect.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Any

from ._compat import AVAILABLE_NOW_UNSUPPORTED, HAS_AVAILABLE_NOW

log = logging.getLogger("nsqpy.spark")

#: the JVM sessions register() guarded (by id of the py4j handle)
_guarded: set[int] = set()
#: set on a DataStreamWriter by trigger(): whether it asked for a single-batch trigger
_ONE_BATCH = "_nsqpy_one_batch"


class UnsupportedTriggerError(NotImplementedError):
    """This PySpark cannot run ``trigger(availableNow=True)`` / ``trigger(once=True)`` on nsq."""


def install(spark: Any) -> bool:
    """Guard ``spark``'s streaming writers when this PySpark needs it; True if the guard is active."""
    if HAS_AVAILABLE_NOW or getattr(spark, "_jsparkSession", None) is None:
        return False
    _wrap_writer()
    _guarded.add(id(spark._jsparkSession))
    return True


def _wrap_writer() -> None:
    """Wrap DataStreamWriter.trigger / start / toTable once per process."""
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    if getattr(DataStreamWriter, "_nsqpy_guard", False):
        return
    trigger, start, to_table = DataStreamWriter.trigger, DataStreamWriter.start, DataStreamWriter.toTable

    @functools.wraps(trigger)
    def guarded_trigger(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = trigger(self, *args, **kwargs)
        setattr(self, _ONE_BATCH, bool(kwargs.get("once") or kwargs.get("availableNow")))
        return result

    DataStreamWriter.trigger = guarded_trigger  # type: ignore[method-assign]
    DataStreamWriter.start = _refusing(start)  # type: ignore[method-assign]
    DataStreamWriter.toTable = _refusing(to_table)  # type: ignore[method-assign]
    DataStreamWriter._nsqpy_guard = True  # type: ignore[attr-defined]


def _refusing(method: Any) -> Any:
    """``method`` of DataStreamWriter (start, toTable), refusing what the guard refuses first."""

    @functools.wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        _refuse_if_single_batch_on_nsq(self)
        return method(self, *args, **kwargs)

    return guarded


def _refuse_if_single_batch_on_nsq(writer: Any) -> None:
    if not getattr(writer, _ONE_BATCH, False):
        return
    spark = getattr(writer, "_spark", None)
    if id(getattr(spark, "_jsparkSession", None)) not in _guarded:
        return
    try:
        reads_nsq = _reads_nsq(writer._df._jdf.queryExecution().analyzed().treeString())
    except Exception as err:  # noqa: BLE001 - the guard must never break a query it cannot inspect
        log.warning("nsq guard: cannot inspect the query's plan: %s", err)
        return
    if reads_nsq:
        log.error("%s (query refused)", AVAILABLE_NOW_UNSUPPORTED)
        raise UnsupportedTriggerError(AVAILABLE_NOW_UNSUPPORTED)


#: how a data source named nsq prints in an analyzed plan (4.0 and 4.1): a relation not yet turned
#: into a scan, so reading the plan starts nothing (no reader, no Python worker)
_NSQ_RELATION = re.compile(r"StreamingRelationV2 \S*PythonDataSourceV2@\S+, nsq, ")


def _reads_nsq(analyzed_plan: str) -> bool:
    """Whether a streaming DataFrame's analyzed plan reads a Python data source named ``nsq``."""
    return bool(_NSQ_RELATION.search(analyzed_plan))
