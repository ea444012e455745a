"""nsqpy: the NSQ realtime distributed messaging platform, in Python and wire-compatible with NSQ."""

__version__ = "0.1.0"

#: The upstream NSQ release whose wire behaviour we reproduce; clients see this in IDENTIFY and /info.
NSQ_COMPAT_VERSION = "1.3.0"
