"""The executor-side source: a partitioned ``DataSourceStreamReader`` over nsqd's leases.

Used when every nsqd of the query announces leases (docs/spark.md, "Two modes"). The reader
object lives in two places, as for any Python source (docs/spark.md §6):

* in the driver's *source runner* it plans: ``latestOffset`` asks each nsqd's ``/stats`` whether
  the channel has messages and, if so, names the next batch; ``partitions(start, end)`` turns a
  batch into leases ``<query-run>/<batch>/<partition>`` spread over the nodes; ``commit(end)``
  finishes every lease of every batch up to ``end`` on every node, over HTTP
  (``/lease/fin?group=<run>&upto=<batch>``). That state is a :class:`_Planner`, made on first use
  and never pickled.
* on the executors, ``read(partition)`` reads one lease (``lease_read.py``).

Offsets are ``{"run", "seq", "flush", "nodes"}``: ``run`` names the query run that planned the
batch (the lease group), ``seq`` the batch within it, ``nodes`` the plan (``[tcp, http, limit,
partitions]`` per nsqd) so that a batch Spark re-runs from its checkpoint, after a restart, reads
exactly the same leases. A batch is read as a *replay* (nsqd sends what the lease holds, nothing
new) when this runner did not plan it itself or when Spark retries the task; the first attempt of
a batch planned here reads new messages. ``flush > 0`` marks the empty batch that makes Spark
commit the last data batch when no new data comes (the driver-side reader's ack-flush).
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from typing import Any, Iterator

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from ._compat import SupportsTriggerAvailableNow
from .arrow import arrow_schema
from .lease_read import LeaseSpec, read_partition
from .nodes import (
    Node, NsqdHttpError, channel_state, configured_nodes, ensure_channel, http_call,
    lookupd_nodes, probe, query,
)

log = logging.getLogger("nsqpy.spark")

#: below this many rows a node's share is not split further (unless partitionsPerNode says so)
MIN_ROWS_PER_PARTITION = 1000
FIN_ATTEMPTS = 3


class NsqPartitionedReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The picklable face; the planning state is created on first use in the runner."""

    def __init__(self, config: Any, default_parallelism: int) -> None:
        self.config = config
        self.default_parallelism = default_parallelism
        self._planner: _Planner | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "default_parallelism": self.default_parallelism, "_planner": None}

    def _plan(self) -> _Planner:
        if self._planner is None:
            self._planner = _Planner(self.config, self.default_parallelism)
        return self._planner

    def initialOffset(self) -> dict[str, Any]:
        return self._plan().initial()

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        return self._plan().latest(start)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        return self._plan().partitions(start, end)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """On an executor: one lease, as one Arrow record batch."""
        spec: LeaseSpec = partition.value
        replay = spec.replay or _task_retried()
        batch = read_partition(spec, self.config, replay, arrow_schema())
        return iter([] if batch is None else [batch])

    def commit(self, end: dict[str, Any]) -> None:
        self._plan().commit(end)

    def prepareForTriggerAvailableNow(self) -> None:
        self._plan().prepare_available_now()

    def stop(self) -> None:  # never called by PySpark 4.x (the runner is killed)
        if self._planner is not None:
            self._planner.closing.set()


def _task_retried() -> bool:
    """Spark runs this task again (its executor was lost mid-read): the lease may hold what the
    lost attempt read, on a connection nsqd may not have seen close yet, so the read must be a
    replay (which takes the lease over). A stage Spark re-runs later in the batch (lost shuffle
    output) starts again at attempt 0, but its lease was closed when the first read ended, and
    nsqd answers a closed lease with its replay in any case."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx is not None and ctx.attemptNumber() > 0


def split(budget: int, depths: list[tuple[Node, int]]) -> list[tuple[Node, int]]:
    """``budget`` rows over the nodes that have messages, in proportion to their depth."""
    depths = [(n, d) for n, d in depths if d > 0]
    total = sum(d for _, d in depths)
    if total <= budget:
        return depths
    shares = [(n, min(d, max(1, budget * d // total))) for n, d in depths]
    left = budget - sum(s for _, s in shares)
    out = []
    for n, s in shares:
        extra = min(left, dict(depths)[n] - s) if left > 0 else 0
        left -= extra
        out.append((n, s + extra))
    return out


class _Planner:
    """The runner's side of the source: nodes, batches planned, commits, AvailableNow."""

    def __init__(self, cfg: Any, default_parallelism: int) -> None:
        self.cfg = cfg
        self.default_parallelism = max(1, default_parallelism)
        self.run = uuid.uuid4().hex[:16]
        self.seq = 0
        self.last: dict[str, Any] = {"run": self.run, "seq": 0, "flush": 0, "nodes": []}
        self.planned: dict[int, list[list[Any]]] = {}  # our batches: seq -> plan
        self.uncommitted: set[int] = set()
        self.hosts_of_run: dict[str, set[str]] = {}  # lease group -> nsqd HTTP bases
        self.known: dict[str, Node] = {}  # tcp -> node with leases
        self.refused: set[str] = set()
        self.with_channel: set[str] = set()
        self.listed: list[Node] = []
        self.lookupd_at = -math.inf
        self.finished_own = 0  # messages our commits FINished, of batches planned here
        self.an_target: int | None = None
        self.an_base = 0
        self.lock = threading.Lock()
        self.closing = threading.Event()
        threading.Thread(target=self._renew_loop, name="nsqpy-lease-renew", daemon=True).start()
        log.info("nsq source: executor-side reads, query run %s (leases %s/<batch>/<partition>)",
                 self.run, self.run)

    # --- nodes ---------------------------------------------------------------------------------

    def nodes(self) -> list[Node]:
        """The nsqd with leases that carry the topic now; others are logged once and skipped."""
        cfg = self.cfg
        now = time.monotonic()
        if cfg.lookupd_http and now - self.lookupd_at >= cfg.lookupd_poll_interval:
            found = lookupd_nodes(cfg.lookupd_http, cfg.topic)
            if found is not None:
                self.listed = found
                self.lookupd_at = now
        out = []
        for node in configured_nodes(cfg.nsqd_tcp, cfg.nsqd_http) + self.listed:
            known = self.known.get(node.tcp)
            if known is None and node.tcp not in self.refused:
                reached, node, answer = probe(node, cfg.connection)
                if not reached:
                    continue
                if answer is None:
                    self.refused.add(node.tcp)
                    log.error("nsq source: %s does not announce leases: executor-side reads skip it "
                              "(restart the query with mode=driver to read it)", node.tcp)
                    continue
                known = self.known[node.tcp] = node
            if known is not None and known not in out:
                out.append(known)
        return out

    def _states(self, nodes: list[Node]) -> list[tuple[Node, dict[str, int]]]:
        cfg = self.cfg
        out = []
        for node in nodes:
            if node.tcp not in self.with_channel:
                try:
                    ensure_channel(node, cfg.topic, cfg.channel, cfg.connection.get("auth_secret"))
                    self.with_channel.add(node.tcp)
                except (OSError, NsqdHttpError) as err:
                    log.warning("nsq source: cannot create %s/%s at %s: %s", cfg.topic, cfg.channel, node.http, err)
                    continue
            state = channel_state(node, cfg.topic, cfg.channel, cfg.connection.get("auth_secret"))
            if state is not None:
                out.append((node, state))
        return out

    # --- offsets ---------------------------------------------------------------------------------

    def initial(self) -> dict[str, Any]:
        from .start import prepare_channel

        prepare_channel(self.cfg)  # a new checkpoint: the channel starts at startingPosition
        self._states(self.nodes())  # the channel exists from the query's start
        return dict(self.last)

    def latest(self, start: dict[str, Any] | None) -> dict[str, Any]:
        states = self._states(self.nodes())
        budget = self.cfg.max_batch_size
        if self.an_target is not None:
            states, budget = self._available_now_budget(states, budget)
        depths = [(node, st["depth"]) for node, st in states]
        if budget > 0 and any(d > 0 for _, d in depths):
            return self._plan_batch(split(budget, depths))
        with self.lock:
            pending = bool(self.uncommitted)
        if pending:  # no new data, but a batch waits for Spark's commit: an empty batch brings it
            self.last = {**self.last, "flush": self.last["flush"] + 1}
            return dict(self.last)
        if start is not None:
            return start  # nothing new (under AvailableNow: the query ends here)
        return dict(self.last)

    def _plan_batch(self, limits: list[tuple[Node, int]]) -> dict[str, Any]:
        cfg = self.cfg
        per_node = cfg.partitions_per_node or math.ceil(self.default_parallelism / max(1, len(self.known)))
        plan = []
        for node, limit in limits:
            count = per_node if cfg.partitions_per_node else min(per_node, math.ceil(limit / MIN_ROWS_PER_PARTITION))
            plan.append([node.tcp, node.http, limit, max(1, min(count, limit))])
        with self.lock:
            self.seq += 1
            self.planned[self.seq] = plan
            self.uncommitted.add(self.seq)
            self.hosts_of_run.setdefault(self.run, set()).update(n.http for n, _ in limits)
        self.last = {"run": self.run, "seq": self.seq, "flush": 0, "nodes": plan}
        return dict(self.last)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        if end.get("flush", 0) > 0 or end.get("seq", 0) <= 0:
            return []  # the ack-flush batch (or the empty one a restart may plan): nothing to read
        run, seq = end["run"], int(end["seq"])
        replay = not (run == self.run and seq in self.planned)
        with self.lock:
            self.hosts_of_run.setdefault(run, set()).update(entry[1] for entry in end["nodes"])
        out = []
        for tcp, _http, limit, count in end["nodes"]:
            share = math.ceil(limit / count)
            for p in range(count):
                take = min(share, limit - p * share)
                if take > 0:
                    out.append(InputPartition(LeaseSpec(tcp, f"{run}/{seq}/{p}", take, replay)))
        if replay:
            log.info("nsq source: batch %s/%d planned by an earlier run: its %d leases are replayed",
                     run, seq, len(out))
        return out

    # --- commit ----------------------------------------------------------------------------------

    def commit(self, end: dict[str, Any]) -> None:
        """FIN every lease of ``end``'s run up to its batch, on every node that may hold one."""
        seq = int(end.get("seq", 0))
        if seq <= 0:
            return
        run = end["run"]
        with self.lock:
            hosts = {entry[1] for entry in end.get("nodes") or ()} | self.hosts_of_run.get(run, set())
        done = sum(self._group_call(http, "fin", run, seq) for http in sorted(hosts))
        with self.lock:
            if run == self.run:
                self.uncommitted = {s for s in self.uncommitted if s > seq}
                self.finished_own += done
                for s in [s for s in self.planned if s <= seq]:
                    del self.planned[s]
        log.debug("nsq source: FIN leases %s up to %d: %d messages", run, seq, done)

    def _group_call(self, http: str, action: str, run: str, upto: int) -> int:
        """``POST /lease/<action>?group=run&upto=N`` on one node: the messages it acted on (0
        when nothing matched, e.g. a commit Spark repeats after a restart)."""
        url = f"{http}/lease/{action}?{query(group=run, upto=upto)}"
        for attempt in range(FIN_ATTEMPTS):
            try:
                answer = http_call(url, "POST", secret=self.cfg.connection.get("auth_secret"))
                return int((answer or {}).get("messages", 0))
            except NsqdHttpError as err:
                if err.status == 404:
                    return 0
                problem: Exception = err
            except OSError as err:
                problem = err
            if attempt + 1 < FIN_ATTEMPTS:
                time.sleep(0.2 * (attempt + 1))
        log.warning("nsq source: %s of leases %s up to %d at %s failed: %s; their messages come "
                    "back after leaseTimeoutMs", action, run, upto, http, problem)
        return 0

    def _renew_loop(self) -> None:
        """Keep the leases of batches not committed yet alive however long Spark takes (nsqd
        caps a message's life at --max-msg-timeout)."""
        interval = self.cfg.lease_timeout / 3
        while not self.closing.wait(interval):
            with self.lock:
                upto = max(self.uncommitted, default=0)
                hosts = sorted(self.hosts_of_run.get(self.run, ()))
            if upto:
                for http in hosts:
                    self._group_call(http, "touch", self.run, upto)

    # --- AvailableNow --------------------------------------------------------------------------

    def prepare_available_now(self) -> None:
        """Snapshot the backlog: the query reads this many messages (or until nothing is left)
        and ends."""
        states = self._states(self.nodes())
        self.an_target = sum(st["depth"] + st["deferred_count"] for _, st in states)
        with self.lock:
            self.an_base = self.finished_own
        log.info("nsq source: trigger AvailableNow, backlog %d", self.an_target)

    def _held_by_run(self) -> int:
        held = 0
        for http in sorted(self.hosts_of_run.get(self.run, ())):
            try:
                doc = http_call(f"{http}/leases?{query(group=self.run)}",
                                secret=self.cfg.connection.get("auth_secret"))
            except (OSError, NsqdHttpError) as err:
                log.warning("nsq source: %s/leases: %s", http, err)
                continue
            held += sum(int(x.get("held", 0)) for x in (doc or {}).get("leases") or ())
        return held

    def _available_now_budget(self, states: list[tuple[Node, dict[str, int]]],
                              budget: int) -> tuple[list[tuple[Node, dict[str, int]]], int]:
        """Under AvailableNow: how much the next batch may still take. With nothing queued but
        something that may come back (deferred, or in flight with another consumer), wait."""
        assert self.an_target is not None
        while True:
            with self.lock:
                read = self.finished_own - self.an_base
            remaining = self.an_target - read - self._held_by_run()
            if remaining <= 0:
                return states, 0
            if any(st["depth"] > 0 for _, st in states):
                return states, min(budget, remaining)
            waiting = sum(st["deferred_count"] + max(0, st["in_flight_count"] - st["lease_held_count"])
                          for _, st in states)
            if waiting == 0:
                return states, 0
            time.sleep(max(0.1, self.cfg.poll_timeout))
            states = self._states(self.nodes())
