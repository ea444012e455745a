"""Micro-benchmark of nsqpy's DiskQueue: batched writes and reads, group commit vs fsync-per-batch.

Records are 226 bytes (a 26-byte message header + 200-byte body, what nsqd stores for a 200 B
message), written with ``put_many`` in batches of 200 (an MPUB) and read back with
``get_many(200)``. Run: ``.venv/bin/python bench/diskqueue_bench.py [--records N] [--dir D]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import shutil
import tempfile
import time

from nsqpy.nsqd.diskqueue import DiskQueue

RECORD = 226
MB = 1024 * 1024


def rss_mib() -> tuple[float, float]:
    """(current RSS, peak RSS) in MiB."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    cur = pages * os.sysconf("SC_PAGE_SIZE") / MB
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return cur, peak


def run(path: str, records: int, batch: int, sync_every: int, max_bytes: int) -> None:
    log = logging.getLogger("bench")
    log.setLevel(logging.WARNING)
    q = DiskQueue("bench", path, max_bytes, 26, 1024 * 1024 + 26, sync_every, 2.0, log)
    body = os.urandom(RECORD - 16)
    batches = [[b"%016d" % (b * batch + i) + body for i in range(batch)]
               for b in range(min(64, records // batch))]
    n_batches = records // batch
    total = n_batches * batch
    nbytes = total * (RECORD + 4)

    t0 = time.perf_counter()
    for b in range(n_batches):
        q.put_many(batches[b % len(batches)])
    q.sync()
    t_put = time.perf_counter() - t0

    got = 0
    t0 = time.perf_counter()
    while True:
        out = q.get_many(batch)
        if not out:
            break
        got += len(out)
    q.sync()
    t_get = time.perf_counter() - t0
    assert got == total, (got, total)
    assert q.depth == 0
    q.delete()

    cur, peak = rss_mib()
    print(f"sync_every={sync_every:<5} records={total:<9} "
          f"put_many: {total / t_put:>10,.0f} rec/s {nbytes / t_put / MB:7.1f} MB/s   "
          f"get_many: {total / t_get:>10,.0f} rec/s {nbytes / t_get / MB:7.1f} MB/s   "
          f"RSS {cur:.1f} MiB (peak {peak:.1f})")


def run_single(path: str, records: int, max_bytes: int) -> None:
    """One record per call (``put``/``get``), as a per-message caller would use the queue."""
    log = logging.getLogger("bench")
    log.setLevel(logging.WARNING)
    q = DiskQueue("single", path, max_bytes, 26, 1024 * 1024 + 26, 2500, 2.0, log)
    msgs = [b"%016d" % i + os.urandom(RECORD - 16) for i in range(1000)]
    t0 = time.perf_counter()
    for i in range(records):
        q.put(msgs[i % 1000])
    t_put = time.perf_counter() - t0
    t0 = time.perf_counter()
    got = 0
    while q.get() is not None:
        got += 1
    t_get = time.perf_counter() - t0
    assert got == records
    q.delete()
    nbytes = records * (RECORD + 4)
    cur, peak = rss_mib()
    print(f"sync_every=2500  records={records:<9} "
          f"put:      {records / t_put:>10,.0f} rec/s {nbytes / t_put / MB:7.1f} MB/s   "
          f"get:      {records / t_get:>10,.0f} rec/s {nbytes / t_get / MB:7.1f} MB/s   "
          f"RSS {cur:.1f} MiB (peak {peak:.1f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000,
                    help="records per run with sync_every=2500")
    ap.add_argument("--records-sync1", type=int, default=100_000,
                    help="records per run with sync_every=1 (one fsync per batch)")
    ap.add_argument("--records-single", type=int, default=200_000,
                    help="records for the one-record-per-call run")
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--max-bytes-per-file", type=int, default=100 * MB)
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = ap.parse_args()

    base = tempfile.mkdtemp(prefix="dqbench-", dir=args.dir)
    try:
        print(f"data in {base}; {RECORD}-byte records, batches of {args.batch}, "
              f"max-bytes-per-file {args.max_bytes_per_file}")
        run(base, args.records, args.batch, 2500, args.max_bytes_per_file)
        run(base, args.records_sync1, args.batch, 1, args.max_bytes_per_file)
        run_single(base, args.records_single, args.max_bytes_per_file)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
