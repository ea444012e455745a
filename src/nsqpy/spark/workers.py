"""Spark's Python workers must import nsqpy: check it at ``register()``, fix it where Spark allows.

The data source runs in Spark's Python workers (planner, source runner, sink tasks), which start
``PYSPARK_PYTHON``, by default ``python3`` from ``PATH``, not the driver's interpreter. A script run
as ``.venv/bin/python script.py`` without an activated venv then fails at the first query with
``ModuleNotFoundError: No module named 'nsqpy'`` from a worker. PySpark takes the workers'
interpreter from ``SparkContext.pythonExec`` when a Python function (the data source included) is
wrapped, so :func:`nsqpy.spark.register` can still change it for this session:

* the workers' Python imports ``nsqpy.spark`` and pyarrow (it is the driver's, or a probe
  succeeds): nothing to do;
* local mode and nobody chose the workers' Python (``PYSPARK_PYTHON`` and ``spark.pyspark.python``
  unset): the workers run the driver's interpreter from now on (every worker is on this host);
* otherwise (a cluster, or an explicit choice that lacks nsqpy) :class:`WorkerPythonError` at
  once, saying what to set, instead of a worker's traceback at the first query.

Spark Connect sessions are not checked: the server's workers are the server's business.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from typing import Any

log = logging.getLogger("nsqpy.spark")

PROBE = "import nsqpy.spark.source, pyarrow"


class WorkerPythonError(RuntimeError):
    """Spark's Python workers would run an interpreter that cannot import nsqpy."""


def _same_interpreter(executable: str) -> bool:
    """Exactly the driver's interpreter path (not resolved: a venv's python is a symlink to its base,
    which has none of the venv's packages)."""
    found = shutil.which(executable)
    return found is not None and os.path.abspath(found) == os.path.abspath(sys.executable)


def probe(executable: str, timeout: float = 60.0) -> str | None:
    """None if ``executable`` imports nsqpy's source and pyarrow; otherwise why not."""
    if _same_interpreter(executable):
        return None
    try:
        done = subprocess.run([executable, "-c", PROBE], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as err:
        return str(err)
    if done.returncode == 0:
        return None
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit status {done.returncode}"


def ensure(spark: Any) -> None:
    """Make this classic session's Python workers able to import nsqpy, or fail saying how."""
    try:
        sc = spark.sparkContext
        executable = sc.pythonExec
    except Exception:  # Spark Connect: no SparkContext on the client
        return
    conf_choice = sc.getConf().get("spark.pyspark.python", None)
    if conf_choice and not os.environ.get("PYSPARK_PYTHON") and executable != conf_choice:
        executable = sc.pythonExec = conf_choice   # PySpark's driver reads only the environment
    why = probe(executable)
    if why is None:
        return
    chosen = os.environ.get("PYSPARK_PYTHON") or conf_choice
    if sc.master.startswith("local") and not chosen:
        log.info("nsq: Spark's Python workers would run %r (%s); they run %s instead",
                 executable, why, sys.executable)
        sc.pythonExec = sys.executable
        return
    raise WorkerPythonError(
        f"Spark's Python workers run {executable!r}, which cannot import nsqpy ({why}). "
        f"Set PYSPARK_PYTHON={sys.executable} (or the conf spark.pyspark.python; on a cluster a Python "
        f"with nsqpy[spark] installed on every host, docs/spark.md §5) before the SparkSession starts, "
        f"or install nsqpy[spark] for {executable}.")
