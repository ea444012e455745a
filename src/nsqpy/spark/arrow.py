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


def record_batch_from_frames(buf: bytearray, starts: list[int], sizes: list[int], address: str,
                             topic: str, channel: str, schema: Any = None) -> Any:
    """One record batch from raw message frames: ``buf`` holds the frames (as nsqd sent them),
    ``starts``/``sizes`` where each message frame starts and its size field. No Python object per
    row: the fixed-width fields are gathered with numpy, the bodies are described as an Arrow
    binary-view array over ``buf`` itself and compacted by Arrow's cast, in C.

    A frame: ``[size:4][type:4][timestamp:8][attempts:2][id:16][body]``, big-endian."""
    import numpy as np
    import pyarrow as pa  # type: ignore[import-untyped]

    schema = schema if schema is not None else arrow_schema()
    n = len(starts)
    raw = np.frombuffer(buf, np.uint8)
    at = np.asarray(starts, np.int64)
    timestamps = raw[(at + 8)[:, None] + np.arange(8)].view(">i8").ravel()
    attempts = raw[(at + 16)[:, None] + np.arange(2)].view(">u2").ravel().astype(np.int32)
    ids = raw[(at + 18)[:, None] + np.arange(16)]
    id_offsets = np.arange(0, 16 * n + 1, 16, dtype=np.int32)
    # bodies: Arrow's view layout, 16 bytes per row: length, then up to 12 bytes inline, or a
    # 4-byte prefix, buffer 0 and the body's offset in it
    lengths = np.asarray(sizes, np.int64) - 30
    body_at = at + 34
    head = raw[np.minimum(body_at[:, None] + np.arange(12), len(raw) - 1)] * (np.arange(12) < lengths[:, None])
    views = np.zeros((n, 16), np.uint8)
    views[:, 0:4] = lengths.astype("<i4").view(np.uint8).reshape(n, 4)
    views[:, 4:16] = head
    longer = lengths > 12
    views[longer, 8:12] = 0
    views[longer, 12:16] = body_at[longer].astype("<i4").view(np.uint8).reshape(-1, 4)
    try:
        bodies = pa.Array.from_buffers(pa.binary_view(), n, [None, pa.py_buffer(views), pa.py_buffer(buf)])
        bodies = bodies.cast(pa.binary())
    except (AttributeError, NotImplementedError, pa.ArrowNotImplementedError):  # an Arrow without views
        bodies = pa.array([bytes(buf[s + 34 : s + 4 + z]) for s, z in zip(starts, sizes)], pa.binary())
    arrays = [
        bodies,
        pa.StringArray.from_buffers(n, pa.py_buffer(id_offsets), pa.py_buffer(ids)),
        pa.array(attempts, pa.int32()),
        pa.array(timestamps.astype(np.int64) // 1000, pa.int64()).cast(schema.field("timestamp").type),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(channel, pa.string()), n),
        pa.repeat(pa.scalar(address, pa.string()), n),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
