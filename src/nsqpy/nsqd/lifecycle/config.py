"""Per-topic and per-channel settings of the lifecycle controls (issue #13).

A setting left out inherits: channel setting, else its topic's setting, else the nsqd flag. The
explicit settings are stored on the object (``config``) and persisted inside ``nsqd.dat`` as an
extra ``"config"`` key of the topic or channel entry, only when there is one. Upstream v1.3.0
decodes that file with ``json.Unmarshal`` into structs that have no such field, and Go ignores
unknown keys, so the data directory stays readable by upstream nsqd (which then just runs
without the settings).

The effective values are copied onto plain attributes of the Topic/Channel (``max_attempts``,
``msg_ttl_ns``, ``max_disk_bytes``, ...) so the message paths read one attribute, never a dict.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...common.flags import format_duration, parse_duration
from ...protocol.names import is_valid_name
from .bounded import refresh_guard
from .options import DISK_FULL_POLICIES, MAX_ATTEMPTS_LIMIT

if TYPE_CHECKING:
    from ..channel import Channel
    from ..topic import Topic

KEYS = ("max_attempts", "dead_letter_topic", "msg_ttl", "mem_queue_size", "max_disk_bytes",
        "disk_full_policy")
#: a topic's history (docs/history.md): topics only, handed to history/ by :func:`apply_topic`
TOPIC_KEYS = KEYS + ("retention", "retention_bytes")
_DURATIONS = ("msg_ttl", "retention")


class ConfigError(ValueError):
    """A bad settings document; ``message`` is the upstream-style API error text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _int_in(value: Any, key: str, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= hi:
        raise ConfigError(f"INVALID_{key.upper()}")
    return value


def _validate(key: str, value: Any) -> Any:
    """The normalized value (``msg_ttl`` in seconds) or ConfigError."""
    if key == "max_attempts":
        return _int_in(value, key, MAX_ATTEMPTS_LIMIT)
    if key in ("mem_queue_size", "max_disk_bytes", "retention_bytes"):
        return _int_in(value, key, 1 << 62)
    if key in _DURATIONS:
        code = f"INVALID_{key.upper()}"
        if not isinstance(value, str):
            raise ConfigError(code)
        try:
            seconds = parse_duration(value)
        except ValueError:
            raise ConfigError(code) from None
        if seconds < 0:
            raise ConfigError(code)
        return seconds
    if key == "dead_letter_topic":
        if (not isinstance(value, str) or value.count("%s") > 1
                or not is_valid_name(value.replace("%s", "x"))):
            raise ConfigError("INVALID_DEAD_LETTER_TOPIC")
        return value
    if key == "disk_full_policy":
        if value not in DISK_FULL_POLICIES:
            raise ConfigError("INVALID_DISK_FULL_POLICY")
        return value
    raise ConfigError("INVALID_KEY")


def parse_update(doc: Any, keys: tuple[str, ...] = KEYS) -> dict[str, Any]:
    """A POSTed JSON object → ``{key: normalized value or None}`` (None clears the setting)."""
    if not isinstance(doc, dict):
        raise ConfigError("INVALID_BODY")
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if key not in keys:
            raise ConfigError("INVALID_KEY")
        out[key] = None if value is None else _validate(key, value)
    return out


def merged(current: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(current)
    for key, value in update.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


# --- persistence (the "config" key in nsqd.dat) --------------------------------------------------

def to_metadata(config: dict[str, Any]) -> dict[str, Any]:
    return {k: (format_duration(v) if k in _DURATIONS else v) for k, v in config.items()}


def from_metadata(raw: Any, log_warning) -> dict[str, Any]:
    """Settings read back from nsqd.dat; a bad entry is skipped with a warning, never fatal."""
    if not isinstance(raw, dict):
        return {}
    out: dict[str, Any] = {}
    for key, value in raw.items():
        try:
            out[key] = _validate(key, value)
        except ConfigError as err:
            log_warning("ignoring setting %s=%r from metadata - %s", key, value, err.message)
    return out


# --- effective values ----------------------------------------------------------------------------

def _flag_value(options: Any, key: str) -> Any:
    return getattr(options, key, 0)  # (Options without the history flags: history off)


def effective_topic(topic: "Topic") -> dict[str, Any]:
    opts = topic.nsqd.options
    return {k: topic.config[k] if k in topic.config else _flag_value(opts, k) for k in TOPIC_KEYS}


def shown_topic(topic: "Topic") -> dict[str, Any]:
    """What ``/topic/config`` shows: the history keys only once retention is on or set."""
    eff = effective_topic(topic)
    if not (eff["retention"] or eff["retention_bytes"] or "retention" in topic.config
            or "retention_bytes" in topic.config):
        del eff["retention"], eff["retention_bytes"]
    return eff


def effective_channel(channel: "Channel") -> dict[str, Any]:
    opts = channel.nsqd.options
    own, parent = channel.config, channel.topic.config
    out = {}
    for k in KEYS:
        out[k] = own[k] if k in own else parent[k] if k in parent else _flag_value(opts, k)
    return out


def render(values: dict[str, Any]) -> dict[str, Any]:
    """Effective settings as the API shows them (durations as Go duration strings)."""
    return {k: (format_duration(v) if k in _DURATIONS else v) for k, v in values.items()}


def dead_letter_name(template: str, topic_name: str) -> str | None:
    """The dead-letter topic for ``topic_name``; None when the result is unusable."""
    name = template.replace("%s", topic_name)
    if not is_valid_name(name) or name == topic_name:
        return None
    return name


# --- applying to the live objects ----------------------------------------------------------------

def apply_topic(topic: "Topic", channels: bool = True) -> None:
    eff = effective_topic(topic)
    topic.mem_cap = eff["mem_queue_size"]
    topic.max_disk_bytes = eff["max_disk_bytes"] if not topic.ephemeral else 0
    topic.disk_full_policy = eff["disk_full_policy"]
    if eff["retention"] or eff["retention_bytes"] or topic.history is not None:
        from ..history.install import retain  # (only once some topic keeps history)

        retain(topic, int(eff["retention"] * 1e9), eff["retention_bytes"])
    if channels:
        for channel in topic.channels.values():
            apply_channel(channel)
    refresh_guard(topic)


def apply_channel(channel: "Channel") -> None:
    eff = effective_channel(channel)
    opts = channel.nsqd.options
    topic = channel.topic
    channel.mem_cap = eff["mem_queue_size"]
    channel.max_attempts = eff["max_attempts"]
    channel.dead_letter_topic = dead_letter_name(eff["dead_letter_topic"], topic.name)
    channel.dead_letter_explicit = ("dead_letter_topic" in channel.config
                                    or "dead_letter_topic" in topic.config
                                    or "dead_letter_topic" in opts.explicit)
    channel.msg_ttl_ns = int(eff["msg_ttl"] * 1e9)
    channel.max_disk_bytes = eff["max_disk_bytes"] if not channel.ephemeral else 0
    channel.disk_full_policy = eff["disk_full_policy"]
    channel.requeue_on_disconnect = bool(opts.requeue_on_disconnect)
    refresh_guard(topic, channel)
    if topic.history is not None and channel.name in topic.history.saved:
        from ..history.replay import resume  # a replay under way at the last stop goes on

        resume(channel)
