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

from ...protocol.gojson import (
    ANY, BOOL, INT, INT32, OPTIONAL_STRING, STRING, decode_struct,
)
from ...protocol.errors import E_BAD_BODY, FatalError

if TYPE_CHECKING:
    from ..auth.client import AuthState
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

# upstream's identifyDataV2: its JSON field names and Go types
_IDENTIFY_FIELDS = {
    "client_id": STRING, "hostname": STRING, "heartbeat_interval": INT, "output_buffer_size": INT,
    "output_buffer_timeout": INT, "feature_negotiation": BOOL, "tls_v1": BOOL, "deflate": BOOL,
    "deflate_level": INT, "snappy": BOOL, "sample_rate": INT32, "user_agent": STRING,
    "msg_timeout": INT,
}
_BOOL_FIELDS = frozenset(k for k, kind in _IDENTIFY_FIELDS.items() if kind == BOOL)
_STR_FIELDS = frozenset(k for k, kind in _IDENTIFY_FIELDS.items() if kind == STRING)
# upstream's master (after v1.3.0) adds these; v1.3.0 ignores the keys whatever they hold, so a
# string is carried only when the operator set a topology label (--topology-zone/--topology-region)
# and any other value is ignored
_WITH_TOPOLOGY = {**_IDENTIFY_FIELDS, "topology_region": OPTIONAL_STRING,
                  "topology_zone": OPTIONAL_STRING}
# --leases reads its own keys (leases/registry.py checks their types)
_LEASE_FIELDS = {"lease": ANY, "lease_replay": ANY}


def _identify_error(text: str) -> FatalError:
    return FatalError(E_BAD_BODY, f"IDENTIFY {text}", text)  # upstream logs the text again


def _unwired() -> None:
    """Placeholder for the hooks a connection installs (a record without one does nothing)."""


def decode_identify(body: bytes, topology: bool = False, leases: bool = False) -> dict:
    """IDENTIFY's body as Go's ``json.Unmarshal`` fills upstream's ``identifyDataV2``: the
    fields the body set (absent ones are the caller's zero values); GoJSONError when upstream
    answers ``E_BAD_BODY IDENTIFY failed to decode JSON body``."""
    fields = _WITH_TOPOLOGY if topology else _IDENTIFY_FIELDS
    if leases:
        fields = {**fields, **_LEASE_FIELDS}
    return decode_struct(body, fields)


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
        # /stats: the fixed fields of this client's entry as JSON, with the values they were
        # written from (stats/snapshot.py's _client_json)
        self.stats_json: tuple | None = None
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
