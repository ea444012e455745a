"""The loop-on-a-thread helper, used from plain synchronous code (as a Spark reader would)."""

from __future__ import annotations

import queue

import pytest

from nsqpy.client import SyncPublisher
from nsqpy.client.options import ConnectionOptions
from nsqpy.client.threaded import LoopThread, subscribe

from client.client_util import unique

pytestmark = pytest.mark.timeout(30)


def test_subscribe_and_answer_from_a_plain_thread(servers):
    node = servers.nsqd()
    topic = unique()
    with SyncPublisher(node.tcp_address) as p:
        p.mpub(topic, [b"%d" % i for i in range(30)])
    io = LoopThread()
    try:
        inbox: queue.Queue = queue.Queue()
        conn = io.run(subscribe("127.0.0.1", node.tcp_port, topic, "spark", on_message=inbox.put,
                                options=ConnectionOptions(msg_timeout=10.0)))
        assert conn.identify_response["msg_timeout"] == 10000
        conn.ready_threadsafe(min(20, conn.max_rdy_count))
        got = []
        for _ in range(30):
            msg = inbox.get(timeout=10)
            got.append(int(msg.body))
            if msg.attempts == 1 and int(msg.body) % 10 == 0:
                msg.requeue_threadsafe(0, backoff=False)
                continue
            msg.touch_threadsafe()
            msg.finish_threadsafe()
        for _ in range(3):  # the three requeued ones come back
            msg = inbox.get(timeout=10)
            assert msg.attempts == 2
            msg.finish_threadsafe()
        assert sorted(got) == list(range(30))
        assert io.run(conn.start_close, timeout=5) == b"CLOSE_WAIT"
        conn.close_threadsafe()
        io.run(conn.wait_closed(), timeout=5)
        assert conn.in_flight == 0
    finally:
        io.stop()
