"""The record of one TCP client: who it is, what it negotiated, what it has in flight, its counters.

This is what the rest of nsqd holds: ``nsqd.clients``, a channel's consumer list and ``/stats``
see a :class:`ClientV2` (upstream's ``client_v2.go`` keeps the same things). It does no I/O. Its
connection (``connection.py``) wires in the outbox the channels write message frames to
(``out``, ``writable``, ``schedule_flush``) and ``close_connection``; the V2 state machine
(``protocol_v2.py``) moves ``state`` and fills in the rest.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

from ...protocol.errors import E_BAD_BODY, FatalError

if TYPE_CHECKING:
    from .auth import AuthState
    from ..channel import Channel
    from ..options import Options
    from .tls import TLSInfo

# upstream's client states (shown as ``state`` in /stats); 1 and 2 exist but are never entered
STATE_INIT = 0
STATE_DISCONNECTED = 1
STATE_CONNECTED = 2
STATE_SUBSCRIBED = 3
STATE_CLOSING = 4

DEFAULT_OUTPUT_BUFFER_SIZE = 16 * 1024
DEFAULT_HEARTBEAT_INTERVAL = 30.0  # upstream's ClientTimeout / 2

_INT_FIELDS = ("heartbeat_interval", "output_buffer_size", "output_buffer_timeout",
               "deflate_level", "sample_rate", "msg_timeout")
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 63) - 1  # Go's int on 64-bit platforms
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_BOOL_FIELDS = ("feature_negotiation", "tls_v1", "deflate", "snappy")
_STR_FIELDS = ("client_id", "hostname", "user_agent")
# upstream's master (after v1.3.0) adds these to identifyDataV2; v1.3.0 ignores them, so they are
# typed only when the operator set a topology label (--topology-zone/--topology-region)
_TOPOLOGY_FIELDS = ("topology_region", "topology_zone")


def _identify_error(text: str) -> FatalError:
    return FatalError(E_BAD_BODY, f"IDENTIFY {text}", text)  # upstream logs the text again


def _unwired() -> None:
    """Placeholder for the hooks a connection installs (a record without one does nothing)."""


def check_identify_types(data: Any, topology: bool = False) -> dict:
    """Go's ``json.Unmarshal`` into upstream's ``identifyDataV2``: an object whose known fields
    have the Go types (int, int32, bool, string; null leaves the zero value). ValueError else.
    Fields v1.3.0 does not know (``short_id``, ``long_id``, which it dropped) are not looked at."""
    if not isinstance(data, dict):
        raise ValueError("not an object")
    for key in _INT_FIELDS:
        v = data.get(key, 0)
        if v is None:
            data[key] = 0
        elif isinstance(v, bool) or not isinstance(v, int) or not _INT_MIN <= v <= _INT_MAX:
            raise ValueError(key)
    if not _INT32_MIN <= data.get("sample_rate", 0) <= _INT32_MAX:
        raise ValueError("sample_rate")
    for key in _BOOL_FIELDS:
        v = data.get(key, False)
        if v is None:
            data[key] = False
        elif not isinstance(v, bool):
            raise ValueError(key)
    for key in _STR_FIELDS + _TOPOLOGY_FIELDS if topology else _STR_FIELDS:
        v = data.get(key, "")
        if v is None:
            data[key] = ""
        elif not isinstance(v, str):
            raise ValueError(key)
    return data


# upstream's identifyDataV2 fields in order, as its log prints the struct (Go's %+v)
_GO_FIELDS = (("ClientID", "client_id"), ("Hostname", "hostname"),
              ("HeartbeatInterval", "heartbeat_interval"), ("OutputBufferSize", "output_buffer_size"),
              ("OutputBufferTimeout", "output_buffer_timeout"),
              ("FeatureNegotiation", "feature_negotiation"), ("TLSv1", "tls_v1"),
              ("Deflate", "deflate"), ("DeflateLevel", "deflate_level"), ("Snappy", "snappy"),
              ("SampleRate", "sample_rate"), ("UserAgent", "user_agent"), ("MsgTimeout", "msg_timeout"))


def go_identify_text(data: dict) -> str:
    """IDENTIFY's fields as upstream logs them: ``{ClientID:x Hostname:y HeartbeatInterval:0 ...}``."""
    parts = []
    for go_name, key in _GO_FIELDS:
        value = data.get(key)
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif value is None:
            text = "false" if key in _BOOL_FIELDS else "" if key in _STR_FIELDS else "0"
        else:
            text = str(value)
        parts.append(f"{go_name}:{text}")
    return "{" + " ".join(parts) + "}"


class ClientV2:
    """One connected client as nsqd and ``/stats`` see it."""

    def __init__(self, client_id: int, opts: "Options") -> None:
        self.id = client_id
        self.state = STATE_INIT
        self.remote_address = ""
        self.remote_ip = ""
        self.client_id = ""
        self.hostname = ""
        self.user_agent = ""
        self.connect_ts = int(time.time())
        # negotiated with IDENTIFY
        self.heartbeat_interval = DEFAULT_HEARTBEAT_INTERVAL
        self.msg_timeout: float = opts.msg_timeout
        self.output_buffer_size = DEFAULT_OUTPUT_BUFFER_SIZE
        self.output_buffer_timeout: float = opts.output_buffer_timeout
        self.sample_rate = 0
        self.snappy = False
        self.deflate = False
        self.tls = False
        self.tls_info: TLSInfo | None = None
        self.auth_secret = b""
        self.auth_state: AuthState | None = None
        # consuming
        self.channel: Channel | None = None
        self.ready_count = 0
        self.in_flight: dict[bytes, tuple] = {}
        self.message_count = 0
        self.finish_count = 0
        self.requeue_count = 0
        self.timeout_count = 0
        self.lease: Any = None  # nsqd.leases.lease.Lease when IDENTIFY named one (--leases)
        # publishing
        self.pub_counts: dict[str, int] = {}
        # the outbox, wired by the connection: frames appended here go out on the next flush
        self.out: list[bytes] = []
        self.writable = True
        self.schedule_flush: Callable[[], None] = _unwired
        self.close_connection: Callable[[], None] = _unwired

    def set_peer(self, host: str, port: int) -> None:
        """Until IDENTIFY says otherwise, a client is named after its address (upstream)."""
        self.remote_address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.client_id = self.hostname = self.remote_ip = host

    def published(self, topic: str, count: int) -> None:
        self.pub_counts[topic] = self.pub_counts.get(topic, 0) + count

    def identify(self, data: dict, opts: "Options") -> None:
        """Take IDENTIFY's settings, validated as upstream's ``clientV2.Identify`` does; a bad
        value fails the IDENTIFY (the connection is closed)."""
        self.client_id = data.get("client_id") or ""
        self.hostname = data.get("hostname") or ""
        self.user_agent = data.get("user_agent") or ""
        hb = data.get("heartbeat_interval", 0)
        if hb == -1:
            heartbeat = 0.0
        elif hb == 0:
            heartbeat = self.heartbeat_interval
        elif 1000 <= hb <= opts.max_heartbeat_interval * 1000:
            heartbeat = hb / 1000.0
        else:
            raise _identify_error(f"heartbeat interval ({hb}) is invalid")
        obs = data.get("output_buffer_size", 0)
        if obs == -1:
            out_size = 1
        elif obs == 0:
            out_size = self.output_buffer_size
        elif 64 <= obs <= opts.max_output_buffer_size:
            out_size = obs
        else:
            raise _identify_error(f"output buffer size ({obs}) is invalid")
        obt = data.get("output_buffer_timeout", 0)
        if obt == -1:
            out_timeout = 0.0
        elif obt == 0:
            out_timeout = self.output_buffer_timeout
        elif opts.min_output_buffer_timeout * 1000 <= obt <= opts.max_output_buffer_timeout * 1000:
            out_timeout = obt / 1000.0
        else:
            raise _identify_error(f"output buffer timeout ({obt}) is invalid")
        rate = data.get("sample_rate", 0)
        if not 0 <= rate <= 99:
            raise _identify_error(f"sample rate ({rate}) is invalid")
        mt = data.get("msg_timeout", 0)
        if mt == 0:
            msg_timeout = self.msg_timeout
        elif 1000 <= mt <= opts.max_msg_timeout * 1000:
            msg_timeout = mt / 1000.0
        else:
            raise _identify_error(f"msg timeout ({mt}) is invalid")
        self.heartbeat_interval = heartbeat
        self.output_buffer_size = out_size
        self.output_buffer_timeout = out_timeout
        self.sample_rate = rate
        self.msg_timeout = msg_timeout
