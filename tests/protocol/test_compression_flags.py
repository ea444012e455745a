"""Stream codecs against the reference implementations, and Go-style flag parsing."""

from __future__ import annotations

import zlib

import pytest
import snappy  # python-snappy: an independent implementation of the framing format

from nsqpy.common.flags import Flag, FlagError, FlagSet, format_duration, parse_duration
from nsqpy.protocol.compression import CompressionError, DeflateCodec, SnappyCodec


def test_snappy_interoperates_with_python_snappy():
    ours = SnappyCodec()
    theirs = snappy.StreamDecompressor()
    payload = b"message " * 1000
    assert theirs.decompress(ours.compress(payload)) == payload
    assert theirs.decompress(ours.compress(b"second")) == b"second"
    stream = snappy.StreamCompressor().add_chunk(payload)
    dec = SnappyCodec()
    out = b"".join(dec.decompress(stream[i : i + 7]) for i in range(0, len(stream), 7))
    assert out == payload


def test_snappy_rejects_garbage():
    with pytest.raises(CompressionError):
        SnappyCodec().decompress(b"\x00\x08\x00\x00garbage!")


def test_deflate_is_raw_and_sync_flushed():
    codec = DeflateCodec(6)
    part = codec.compress(b"hello")
    assert part.endswith(b"\x00\x00\xff\xff")  # sync flush marker: the peer can decode now
    assert zlib.decompressobj(-15).decompress(part) == b"hello"


@pytest.mark.parametrize("text,seconds", [
    ("0", 0.0), ("250ms", 0.25), ("1m30s", 90.0), ("1h", 3600.0), ("1.5s", 1.5), ("100us", 1e-4),
])
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


def test_duration_errors_and_format():
    with pytest.raises(ValueError):
        parse_duration("10")
    assert format_duration(3600) == "1h0m0s"
    assert format_duration(0.25) == "250ms"


def _fs() -> FlagSet:
    fs = FlagSet("prog")
    fs.add(Flag("config", ""), Flag("name", "x"), Flag("n", 1, kind="int"),
           Flag("on", False, kind="bool"), Flag("d", 1.0, kind="duration"),
           Flag("addr", [], kind="list", cfg="addrs"))
    return fs


def test_go_flag_forms(tmp_path):
    vals, explicit, args = _fs().parse(["-name", "a", "--n=3", "-on", "-d=2s", "--addr", "a:1",
                                        "-addr=b:2,c:3", "pos"])
    assert vals == {"config": "", "name": "a", "n": 3, "on": True, "d": 2.0,
                    "addr": ["a:1", "b:2", "c:3"]}
    assert args == ["pos"] and "name" in explicit
    vals, _, _ = _fs().parse(["-on=false"])
    assert vals["on"] is False


def test_config_file_precedence(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('name = "fromcfg"\nn = 7\nd = 1500\naddrs = ["x:1"]\n')
    vals, _, _ = _fs().parse([f"--config={cfg}", "-n=9"])
    assert vals["name"] == "fromcfg" and vals["n"] == 9 and vals["d"] == 1.5 and vals["addr"] == ["x:1"]


@pytest.mark.parametrize("argv", [["-nope"], ["-n"], ["-n=abc"], ["-on=maybe"], ["-d=10"]])
def test_flag_errors(argv):
    with pytest.raises(FlagError):
        _fs().parse(argv)
