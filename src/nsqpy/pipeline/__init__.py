"""A click-stream pipeline on NSQ and Spark Structured Streaming (see run.py and docs/spark.md).

* events.py   — deterministic synthetic click events (with known spammers)
* producer.py — publishes them to ``clicks``
* jobs.py     — the Spark jobs: archive, per-minute metrics, spam alerts (-> ``alerts``), and
                the batch job that recomputes the metrics from the archive
* run.py      — ``python -m nsqpy.pipeline``: everything on local Spark, checked end to end
"""
