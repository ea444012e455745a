"""Unit tests of the utilities' shared pieces (no processes)."""

from __future__ import annotations

import ssl
import time

import pytest

from nsqpy.common.flags import FlagError, FlagSet
from nsqpy.tools.common import HostPool, RoundRobin, TimerMetrics, split_go_args, version_string
from nsqpy.tools.goconfig import go_parse_duration, parse_go_nsq_options
from nsqpy.tools.nsq_tail import build_flagset as tail_flags
from nsqpy.tools.nsq_stat import ChannelStats, format_line
from nsqpy.tools.nsq_to_file import compile_strftime, host_identifier
from nsqpy.tools.nsq_to_http import get_url, parse_custom_headers
from nsqpy.tools.to_nsq import final_chunk, split_chunks

pytestmark = pytest.mark.timeout(30)


def test_version_string():
    assert version_string("nsq_tail") == "nsq_tail v1.3.0"  # upstream's utilities: no build line


# --- go-nsq options -------------------------------------------------------------------------


def test_go_nsq_options_map_onto_the_client():
    cfg = parse_go_nsq_options([
        "max_attempts,10", "backoff_strategy,full_jitter", "backoff-multiplier,250ms",
        "max_backoff_duration,1m", "lookupd_poll_interval,15s", "lookupd_poll_jitter,0.5",
        "rdy_redistribute_interval,1s", "low_rdy_idle_timeout,2s", "max_in_flight,7",
        "heartbeat_interval,10s", "read_timeout,1m", "snappy", "msg_timeout,0",
        "output_buffer_timeout,-1ms", "output_buffer_size,-1", "sample_rate,25",
        "client_id,me", "user_agent,ua/1", "auth_secret,s3cret", "default_requeue_delay,0",
        "max_requeue_delay,5m", "max_msg_size,100", "dial_timeout,300ms", "topology_zone,z1",
    ], "consumer-opt")
    assert cfg.consumer == {
        "max_attempts": 10, "backoff_strategy": "full_jitter", "backoff_multiplier": 0.25,
        "max_backoff_duration": 60.0, "lookupd_poll_interval": 15.0, "lookupd_poll_jitter": 0.5,
        "rdy_redistribute_interval": 1.0, "low_rdy_idle_timeout": 2.0, "max_in_flight": 7,
    }
    options = cfg.connection_options("tool/1")
    assert options.heartbeat_interval == 10.0 and options.read_timeout == 60.0
    assert options.snappy and options.msg_timeout is None
    assert options.output_buffer_timeout is None and options.output_buffer_size is None
    assert options.sample_rate == 25 and options.client_id == "me" and options.user_agent == "ua/1"
    assert options.auth_secret == "s3cret" and options.default_requeue_delay == 0
    assert options.max_requeue_delay == 300.0 and options.max_frame_size == 130
    assert options.connect_timeout == 0.3
    assert cfg.no_effect == ["topology_zone"]
    assert parse_go_nsq_options([], "x").connection_options("tool/1").user_agent == "tool/1"


# every text below is what upstream v1.3.0's binaries print (go-nsq 1.1.0's ConfigFlag)
@pytest.mark.parametrize("value, error", [
    ("nope,1", "invalid option nope"),
    ("max_attempts,-1", 'failed to coerce option max_attempts (-1) - strconv.ParseUint: parsing "-1": invalid syntax'),
    ("max_attempts,70000", "invalid max_attempts ! 70000 > 65535"),
    ("max_attempts,x", 'failed to coerce option max_attempts (x) - strconv.ParseUint: parsing "x": invalid syntax'),
    ("read_timeout,50ms", "invalid read_timeout ! 50ms < 100ms"),
    ("read_timeout,x", 'failed to coerce option read_timeout (x) - time: invalid duration "x"'),
    ("read_timeout,5", 'failed to coerce option read_timeout (5) - time: missing unit in duration "5"'),
    ("dial_timeout,1x", 'failed to coerce option dial_timeout (1x) - time: unknown unit "x" in duration "1x"'),
    ("lookupd_poll_jitter,2", "invalid lookupd_poll_jitter ! 2 > 1"),
    ("lookupd_poll_jitter,x", 'failed to coerce option lookupd_poll_jitter (x) - strconv.ParseFloat: parsing "x": invalid syntax'),
    ("backoff_strategy,linear", "failed to coerce option backoff_strategy (linear) - invalid value type"),
    ("snappy,maybe", 'failed to coerce option snappy (maybe) - strconv.ParseBool: parsing "maybe": invalid syntax'),
    ("max_attempts", "failed to coerce option max_attempts (true) - invalid value type"),
    ("sample_rate,100", "invalid sample_rate ! 100 > 99"),
    ("msg_timeout,-1s", "invalid msg_timeout ! -1s < 0s"),
    ("deflate_level,0", "invalid deflate_level ! 0 < 1"),
    ("max_in_flight,-1", "invalid max_in_flight ! -1 < 0"),
    ("tls_min_version,tls9", "ERROR: tls9 is not a tls version"),
    ("tls_config,x", "tls_config cannot be set from the command line"),  # upstream panics
])
def test_go_nsq_option_errors_read_like_go(value, error):
    with pytest.raises(FlagError) as info:
        parse_go_nsq_options([value], "consumer-opt")
    assert str(info.value) == f'invalid value "{value}" for flag -consumer-opt: {error}'


def test_bad_options_can_be_ignored_as_nsq_to_file_does():
    cfg = parse_go_nsq_options(["max_attempts,-1", "nope", "max_attempts,9"], "consumer-opt",
                               ignore_errors=True)
    assert cfg.consumer == {"max_attempts": 9}


def test_validate_is_go_nsq_config_validate():
    assert parse_go_nsq_options(["read_timeout,10s"], "x").validate() == \
        "HeartbeatInterval 30s must be less than ReadTimeout 10s"
    assert parse_go_nsq_options(["heartbeat_interval,90s"], "x").validate() == \
        "HeartbeatInterval 1m30s must be less than ReadTimeout 1m0s"
    assert parse_go_nsq_options([], "x").validate(-1) == "invalid MaxInFlight ! -1 < 0"
    assert parse_go_nsq_options([], "x").validate(0) is None


def test_go_durations():
    assert go_parse_duration("1m30s") == 90.0 and go_parse_duration("-1.5ms") == -0.0015
    assert go_parse_duration("0") == 0.0
    for text, why in (("", 'invalid duration ""'), (".s", 'invalid duration ".s"'),
                      ("10", 'missing unit in duration "10"'), ("3d", 'unknown unit "d" in duration "3d"')):
        with pytest.raises(ValueError, match=why):
            go_parse_duration(text)


def test_flags_stop_at_the_first_argument_as_gos_do():
    fs = tail_flags()
    assert split_go_args(fs, ["--topic", "t", "x", "--n=1"]) == (["--topic", "t"], ["x", "--n=1"])
    assert split_go_args(fs, ["-print-topic", "y"]) == (["-print-topic"], ["y"])
    assert split_go_args(fs, ["--n=2", "--", "--topic=t"]) == (["--n=2"], ["--topic=t"])
    assert split_go_args(fs, ["-", "--topic=t"]) == ([], ["-", "--topic=t"])
    assert split_go_args(FlagSet("x"), []) == ([], [])


def test_tls_options_build_a_context():
    cfg = parse_go_nsq_options(["tls_v1", "tls_insecure_skip_verify,true", "tls_min_version,tls1.2"],
                               "consumer-opt")
    context = cfg.connection_options("t").tls
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_NONE and not context.check_hostname
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert parse_go_nsq_options(["tls_v1,false"], "x").connection_options("t").tls is None


# --- selection and metrics ---------------------------------------------------------------------


def test_host_pool_skips_dead_hosts_and_revives_them():
    now = [0.0]
    pool = HostPool(["a", "b", "c"], clock=lambda: now[0])
    assert [pool.get() for _ in range(4)] == ["a", "b", "c", "a"]
    pool.mark("b", True)
    assert [pool.get() for _ in range(4)] == ["c", "a", "c", "a"]
    now[0] = 31.0  # retry time passed: b gets one more try
    assert "b" in [pool.get() for _ in range(3)]
    pool.mark("b", True)  # failed again: wait doubles to 60s
    now[0] = 31.0 + 59.0
    assert "b" not in [pool.get() for _ in range(6)]
    now[0] = 31.0 + 61.0
    assert "b" in [pool.get() for _ in range(3)]
    pool.mark("b", False)
    for host in ("a", "b", "c"):
        pool.mark(host, True)
    assert {pool.get() for _ in range(3)} == {"a", "b", "c"}  # all dead: all revived


def test_round_robin():
    rr = RoundRobin(["a", "b"])
    assert [rr.get() for _ in range(4)] == ["b", "a", "b", "a"]


def test_timer_metrics_line():
    lines: list[str] = []
    metrics = TimerMetrics(100, "[aggregate]:", lines.append)
    assert metrics.format([i / 1000 for i in range(1, 101)]) == \
        "[aggregate]: finished 100 - 99th: 100.00ms - 95th: 97.00ms - avg: 50.50ms"
    for _ in range(100):
        metrics.status(time.monotonic())
    assert lines == []  # timer_metrics prints at the first timing past the window
    metrics.status(time.monotonic())
    assert len(lines) == 1 and lines[0].startswith("[aggregate]: finished 100 - 99th: ")
    for _ in range(100):
        metrics.status(time.monotonic())
    assert len(lines) == 2
    TimerMetrics(50, "x", lines.append)
    assert lines[-1] == ("Warning: use more than 100 status values for accurate percentiles "
                         "(configured with 50)")
    TimerMetrics(0, "x", lines.append).status(0.0)  # disabled: no error, nothing kept


# --- per-tool helpers ---------------------------------------------------------------------------


def test_strftime_subset():
    t = time.struct_time((2024, 3, 5, 14, 7, 9, 1, 65, 0))
    assert time.strftime(compile_strftime("%Y-%m-%d_%H"), t) == "2024-03-05_14"
    assert time.strftime(compile_strftime("%y%b%B%a%A%I%M%S%p%%"), t) == "24MarMarchTueTuesday020709PM%"
    # directives upstream does not know stay literal
    assert time.strftime(compile_strftime("%j-%Q-100%"), t) == "%j-%Q-100%"


def test_host_identifier():
    assert host_identifier("", "web1.example.com") == "web1"
    assert host_identifier("<SHORT_HOST>@<HOSTNAME>", "web1.example.com") == "web1@web1.example.com"


def test_custom_headers():
    assert parse_custom_headers(["A: 1", " B :x:y "]) == {"A": "1", "B": "x:y"}
    for bad in ("nocolon", ": v", "k:"):
        with pytest.raises(ValueError):
            parse_custom_headers([bad])


def test_get_url_escapes_like_go_query_escape():
    assert str(get_url("http://h/p?q=%s&r=%20", b"a b+c/d?&=\xc3\xa9~_.-")) == \
        "http://h/p?q=a+b%2Bc%2Fd%3F%26%3D%C3%A9~_.-&r=%20"


def test_splitting_stdin():
    buf = bytearray(b"a\nb\n\nc")
    assert split_chunks(buf, 0x0A) == [b"a", b"b", b""]
    assert buf == bytearray(b"c")
    assert split_chunks(buf, 0x0A) == []
    assert final_chunk(b"three\n", ord(",")) == b"three"
    assert final_chunk(b"three", ord(",")) == b"three"
    assert final_chunk(b"three", 0x0A) == b"three"


def test_stat_line_rates_truncate_like_go():
    prev = ChannelStats(message_count=100, depth=10)
    cur = ChannelStats(message_count=105, depth=11, memory_depth=11, in_flight_count=2, client_count=1)
    assert format_line(cur, prev, 2.0) == \
        "      2       2 |      11      11       0     2     0 |       0       0          105       1"
