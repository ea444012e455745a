"""What differs between the PySpark 4.x lines the ``spark`` extra allows (4.0 to 4.3), in one place.

Measured on each line's latest patch (docs/spark.md, "Supported PySpark versions"):

* ``pyspark.sql.streaming.datasource`` (``SupportsTriggerAvailableNow``) first exists in 4.2. Before
  that the JVM has no AvailableNow support for Python sources: ``trigger(availableNow=True)`` falls
  back to ``Trigger.Once``, one micro-batch that Spark never commits to the source, so the source can
  neither FIN it nor read the rest of the backlog. :func:`nsqpy.spark.register` guards such queries
  on those versions (see :mod:`nsqpy.spark.guard`).
* ``DataSourceStreamArrowWriter`` first exists in 4.1 (4.0 streams rows to the stream writer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyspark


def _version(text: str) -> tuple[int, int]:
    parts = text.split(".")
    return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)


#: (major, minor) of the installed PySpark
PYSPARK_VERSION = _version(pyspark.__version__)

if TYPE_CHECKING:
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    HAS_AVAILABLE_NOW = True
else:
    try:  # PySpark >= 4.2
        from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

        HAS_AVAILABLE_NOW = True
    except ImportError:  # 4.0 / 4.1: Spark runs AvailableNow as a single, never committed batch

        class SupportsTriggerAvailableNow:  # noqa: D101 - an empty stand-in, never called by Spark
            pass

        HAS_AVAILABLE_NOW = False

#: the message shown when a query cannot keep the source's guarantees on this PySpark
AVAILABLE_NOW_UNSUPPORTED = (
    "format('nsq'): trigger(availableNow=True) and trigger(once=True) need PySpark >= 4.2 (this is "
    f"{pyspark.__version__}): before 4.2 Spark runs a Python source's AvailableNow query as one "
    "micro-batch and never commits it to the source, so its messages could not be FINished and the "
    "rest of the backlog would not be read. Use the default or a processingTime trigger and "
    "nsqpy.spark.stop_when_drained(query, ...) (docs/spark.md)."
)


def version_info() -> dict[str, Any]:
    """For logs and test reports: the PySpark line and which features it has."""
    return {"pyspark": pyspark.__version__, "available_now": HAS_AVAILABLE_NOW}


__all__ = ["AVAILABLE_NOW_UNSUPPORTED", "HAS_AVAILABLE_NOW", "PYSPARK_VERSION", "SupportsTriggerAvailableNow"]
