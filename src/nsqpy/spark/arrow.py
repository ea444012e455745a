"""The source's rows as Arrow: one record batch built from whole columns, no object per row.

Both streaming readers use it: the driver-side one (``source.py``) for the messages of several
connection reads, the executor-side one (``lease_read.py``) for one lease's messages; the batch
read of the history (``batch.py``) turns whole blocks of the log into batches.
"""

from __future__ import annotations

from typing import Any

#: blocks holding at least this many records on average are cut by joining their column slices
#: (one slice per block and column); smaller ones (a topic of single PUBs) by numpy arithmetic
#: per record, which costs no Python step per block either
JOIN_ROWS_PER_BLOCK = 8


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

    raw = np.frombuffer(buf, np.uint8)
    at = np.asarray(starts, np.int64)
    attempts = _gather(raw, at + 16, 2).view(">u2").ravel().astype(np.int32)
    bodies = _binary_at(buf, raw, at + 34, np.asarray(sizes, np.int64) - 30)
    return _batch(schema, bodies, _gather(raw, at + 18, 16), attempts,
                  _gather(raw, at + 8, 8).view(">i8").ravel(), topic, channel, address)


def record_batch_from_blocks(buf: bytes | bytearray | memoryview, starts: list[int], counts: list[int],
                             stop: int, address: str, topic: str, channel: str | None,
                             schema: Any = None) -> Any:
    """One record batch from whole history blocks (``/history/read``'s framing,
    :mod:`nsqpy.protocol.history_block`): ``buf`` holds blocks starting at ``starts``, holding
    ``counts`` records each, the last ending at ``stop``.

    A block's head says where its columns are and each column is contiguous: with large blocks
    (MPUBs) a column of the batch is its blocks' slices joined (one ``join`` in C per column),
    read by numpy and handed to Arrow as it is (``BinaryArray.from_buffers``); with small ones
    every record's positions come from the starts and counts by numpy arithmetic, the columns
    are gathered by numpy and the bodies described to Arrow as views over ``buf``. Either way
    no Python step per record, at most one per block."""
    import numpy as np
    import pyarrow as pa  # type: ignore[import-untyped]

    from nsqpy.protocol.history_block import FIXED, HEAD_SIZE, FramingError

    at = np.asarray(starts, np.int64)
    n = np.asarray(counts, np.int64)
    rows = int(n.sum())
    first = np.cumsum(n) - n  # each block's first record
    ts_at, bodies_at = at + HEAD_SIZE, at + HEAD_SIZE + FIXED * n  # (history_block.column_offsets)
    ends = np.append(at[1:], stop)
    by_join = rows >= JOIN_ROWS_PER_BLOCK * len(starts)
    if by_join:
        view = memoryview(buf)
        stamps = np.frombuffer(_joined(view, ts_at, ts_at + 8 * n), ">i8")
        sizes = np.frombuffer(_joined(view, ts_at + 8 * n, ts_at + 12 * n), ">u4").astype(np.int64)
        ids = np.frombuffer(_joined(view, ts_at + 12 * n, bodies_at), np.uint8)
    else:
        raw = np.frombuffer(buf, np.uint8)
        index = np.arange(rows) - np.repeat(first, n)  # each record's place in its block
        column, count = np.repeat(ts_at, n), np.repeat(n, n)
        stamps = _gather(raw, column + 8 * index, 8).view(">i8").ravel()
        sizes = _gather(raw, column + 8 * count + 4 * index, 4).view(">u4").ravel().astype(np.int64)
        ids = _gather(raw, column + 12 * count + 16 * index, 16)
    told, held = np.add.reduceat(sizes, first), ends - bodies_at
    if (told != held).any():  # (before any body is cut: nothing points past its block)
        bad = int(np.flatnonzero(told != held)[0])
        raise FramingError(f"history block at offset {starts[bad]}: its body sizes add up to "
                           f"{int(told[bad])} bytes, its bodies take {int(held[bad])}")
    if by_join:
        offsets = np.zeros(rows + 1, np.int32)
        np.cumsum(sizes, out=offsets[1:])
        bodies = pa.BinaryArray.from_buffers(pa.binary(), rows, [
            None, pa.py_buffer(offsets), pa.py_buffer(_joined(view, bodies_at, ends))])
    else:
        before = np.cumsum(sizes) - sizes  # bytes of the bodies before each record
        bodies = _binary_at(buf, raw, np.repeat(bodies_at, n) + before - np.repeat(before[first], n), sizes)
    return _batch(schema, bodies, ids, np.ones(rows, np.int32), stamps, topic, channel, address)


def _joined(view: memoryview, starts: Any, ends: Any) -> bytes:
    """The bytes ``view[starts[i]:ends[i]]`` of every block, back to back: one join in C."""
    return b"".join(map(view.__getitem__, map(slice, starts.tolist(), ends.tolist())))


def _gather(raw: Any, at: Any, width: int) -> Any:
    """The ``width`` bytes at each offset of ``at`` (each within ``raw``), as rows of a numpy
    array: one C gather through a sliding-window view of ``raw``, which copies nothing itself."""
    from numpy.lib.stride_tricks import sliding_window_view

    return sliding_window_view(raw, width)[at]


def _binary_at(buf: Any, raw: Any, body_at: Any, lengths: Any) -> Any:
    """An Arrow binary array of the bodies at ``body_at`` (``lengths`` bytes each) in ``buf``:
    described in Arrow's view layout (16 bytes per row: the length, then up to 12 bytes inline,
    or a 4-byte prefix, buffer 0 and the offset) and compacted by Arrow's cast."""
    import numpy as np
    import pyarrow as pa  # type: ignore[import-untyped]

    n, size = len(body_at), len(raw)
    if not n:
        return pa.array([], pa.binary())
    # (a row is a frame or a block of at least 34 bytes: the buffer holds 12)
    head = _gather(raw, np.minimum(body_at, size - 12), 12)
    for row in np.flatnonzero((body_at > size - 12) & (lengths > 0)).tolist():
        # a short body in the buffer's last 12 bytes: the window above started before it
        head[row] = 0
        head[row, :lengths[row]] = raw[body_at[row]:body_at[row] + lengths[row]]
    head = head * (np.arange(12) < lengths[:, None])
    views = np.zeros((n, 16), np.uint8)
    views[:, 0:4] = lengths.astype("<i4").view(np.uint8).reshape(n, 4)
    views[:, 4:16] = head
    longer = lengths > 12
    views[longer, 8:12] = 0
    views[longer, 12:16] = body_at[longer].astype("<i4").view(np.uint8).reshape(-1, 4)
    try:
        bodies = pa.Array.from_buffers(pa.binary_view(), n, [None, pa.py_buffer(views), pa.py_buffer(buf)])
        return bodies.cast(pa.binary())
    except (AttributeError, NotImplementedError, pa.ArrowNotImplementedError):  # an Arrow without views
        view = memoryview(buf)
        return pa.array([bytes(view[a:a + z]) for a, z in zip(body_at.tolist(), lengths.tolist())], pa.binary())


def _batch(schema: Any, bodies: Any, ids: Any, attempts: Any, stamps: Any, topic: str,
           channel: str | None, address: str) -> Any:
    """The record batch of the source's schema from its columns (``ids``: rows of 16 bytes,
    ``stamps``: nanoseconds)."""
    import numpy as np
    import pyarrow as pa  # type: ignore[import-untyped]

    schema = schema if schema is not None else arrow_schema()
    n = len(stamps)
    arrays = [
        bodies,
        pa.StringArray.from_buffers(n, pa.py_buffer(np.arange(0, 16 * n + 1, 16, dtype=np.int32)),
                                    pa.py_buffer(np.ascontiguousarray(ids))),
        pa.array(attempts, pa.int32()),
        pa.array(stamps.astype(np.int64) // 1000, pa.int64()).cast(schema.field("timestamp").type),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(channel, pa.string()), n),
        pa.repeat(pa.scalar(address, pa.string()), n),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
