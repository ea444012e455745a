"""The source's rows as Arrow: one record batch built from whole columns, no object per row.

Both streaming readers use it: the driver-side one (``source.py``) for the messages of several
connection reads, the executor-side one (``lease_read.py``) for one lease's messages; the batch
read of the history (``batch.py``) turns whole blocks of the log into batches.
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


def _joined(view: memoryview, starts: Any, ends: Any) -> bytes:
    """The bytes ``view[starts[i]:ends[i]]`` of every block, back to back: one join in C."""
    return b"".join(map(view.__getitem__, map(slice, starts.tolist(), ends.tolist())))


def record_batch_from_blocks(buf: bytearray, starts: list[int], counts: list[int], stop: int,
                             address: str, topic: str, channel: str | None, schema: Any = None) -> Any:
    """One record batch from whole history blocks (``/history/read``'s framing,
    :mod:`nsqpy.protocol.history_block`): ``buf`` holds blocks starting at ``starts``, holding
    ``counts`` records each, the last ending at ``stop``.

    A block keeps each column contiguous, so a column of the batch is its blocks' slices joined
    (one ``join`` in C per column) and read by numpy; the bodies and ids become Arrow's buffers
    as they are (``BinaryArray.from_buffers``). Python works once per block (in ``map``), never
    per record."""
    import numpy as np
    import pyarrow as pa  # type: ignore[import-untyped]

    from nsqpy.protocol.history_block import FramingError, ID_SIZE

    schema = schema if schema is not None else arrow_schema()
    at = np.asarray(starts, np.int64)
    n = np.asarray(counts, np.int64)
    ts_at = at + 16  # (history_block.column_offsets, for every block at once)
    sizes_at, ids_at, bodies_at = ts_at + 8 * n, ts_at + 12 * n, ts_at + 28 * n
    ends = np.append(at[1:], stop)
    view = memoryview(buf)
    rows = int(n.sum())
    stamps = np.frombuffer(_joined(view, ts_at, sizes_at), ">i8")
    sizes = np.frombuffer(_joined(view, sizes_at, ids_at), ">u4")
    ids = _joined(view, ids_at, bodies_at)
    bodies = _joined(view, bodies_at, ends)
    offsets = np.zeros(rows + 1, np.int32)
    np.cumsum(sizes, out=offsets[1:])
    if int(offsets[-1]) != len(bodies):
        raise FramingError(f"history blocks: body sizes add up to {int(offsets[-1])} bytes, "
                           f"the blocks hold {len(bodies)}")
    micros = stamps // 1000
    arrays = [
        pa.BinaryArray.from_buffers(pa.binary(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(bodies)]),
        pa.StringArray.from_buffers(rows, pa.py_buffer(np.arange(0, ID_SIZE * rows + 1, ID_SIZE, dtype=np.int32)),
                                    pa.py_buffer(ids)),
        pa.array(np.ones(rows, np.int32)),
        pa.array(micros.astype(np.int64)).cast(schema.field("timestamp").type),
        pa.repeat(pa.scalar(topic, pa.string()), rows),
        pa.repeat(pa.scalar(channel, pa.string()), rows),
        pa.repeat(pa.scalar(address, pa.string()), rows),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
