"""The text exposition writer on bytes, checked with prometheus_client's own parser."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nsqpy.common.prometheus import Exposition, escape_label, format_value, labels
from nsqpy.nsqd.stats.prometheus import backend_bytes

pytestmark = pytest.mark.timeout(30)


def test_values_and_labels():
    assert [format_value(v) for v in (3, True, False, 2.0, 0.25, float("nan"), float("inf"),
                                      float("-inf"), 1e20)] == \
        ["3", "1", "0", "2", "0.25", "NaN", "+Inf", "-Inf", "1e+20"]
    assert escape_label('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    assert labels() == ""
    assert labels(topic="t", client_id='x"y') == '{topic="t",client_id="x\\"y"}'


def test_families_stay_grouped_and_parse():
    exp = Exposition()
    a = exp.gauge("x_depth", "Depth.\nSecond line")
    b = exp.counter("x_messages_total", "Messages.")
    exp.gauge("x_unused", "never sampled: left out")
    for topic in ("t1", "t2"):  # interleaved production, grouped output
        a.add(labels(topic=topic), 5)
        b.add(labels(topic=topic), 7)
    exp.single("x_up", "gauge", "Up.", True)
    text = exp.render().decode()
    assert "x_unused" not in text
    assert text.index("x_depth{topic=\"t2\"}") < text.index("# HELP x_messages_total")
    assert "# HELP x_depth Depth.\\nSecond line\n" in text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert [(s.labels, s.value) for s in fams["x_messages"].samples] == [
        ({"topic": "t1"}, 7), ({"topic": "t2"}, 7)]
    assert fams["x_messages"].type == "counter" and fams["x_up"].samples[0].value == 1


def test_backend_bytes_from_positions():
    q = SimpleNamespace(read_file_num=2, write_file_num=2, read_pos=100, write_pos=350,
                        max_bytes_per_file=1000)
    assert backend_bytes(q) == 250
    q.write_file_num, q.write_pos = 4, 30  # rest of file 2, all of file 3, start of file 4
    assert backend_bytes(q) == 900 + 1000 + 30
    assert backend_bytes(SimpleNamespace(depth=0)) == 0  # an ephemeral DummyQueue
