"""The source's rows as Arrow: one record batch built from whole columns, no object per row.

Both readers use it: the driver-side one (``source.py``) for the messages of several connection
reads, the executor-side one (``lease_read.py``) for one lease's messages.
"""

from __future__ import annotations

from typing import Any


def arrow_schema() -> Any:
    """The source's schema in Arrow, as every PySpark 4.x expects record batches (timestamps in
    UTC). Built here rather than with PySpark's ``to_arrow_schema``, whose time-zone argument was
    renamed between 4.1 and 4.2."""
    import pyarrow as pa  # type: ignore[import-untyped]

    return pa.schema(
        [
            ("body", pa.binary()),
            ("id", pa.string()),
            ("attempts", pa.int32()),
            ("timestamp", pa.timestamp("us", tz="UTC")),
            ("topic", pa.string()),
            ("channel", pa.string()),
            ("nsqd_address", pa.string()),
        ]
    )


def record_batch(ids: list[bytes], bodies: list[bytes], timestamps: list[int], attempts: list[int],
                 addresses: list[str] | str, topic: str, channel: str, schema: Any = None) -> Any:
    """One record batch; ``addresses`` is one per row, or a single address for all of them.
    Timestamps are nsqd's (ns since the epoch)."""
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    schema = schema if schema is not None else arrow_schema()
    n = len(ids)
    ns = pa.array(timestamps, pa.int64())
    if isinstance(addresses, str):
        address_column = pa.repeat(pa.scalar(addresses, pa.string()), n)
    else:
        address_column = pa.array(addresses, pa.string())
    arrays = [
        pa.array(bodies, pa.binary()),
        pa.array(ids, pa.binary()).cast(pa.string()),
        pa.array(attempts, pa.int32()),
        pc.divide(ns, 1000).cast(schema.field("timestamp").type),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(channel, pa.string()), n),
        address_column,
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
