"""nsqpy: the NSQ realtime distributed messaging platform, in Python and wire-compatible with NSQ."""

__version__ = "0.1.0"

#: The upstream NSQ release whose wire behaviour we reproduce; clients see this in IDENTIFY and /info.
NSQ_COMPAT_VERSION = "1.3.0"


def version_string(program: str) -> str:
    """``nsqd v1.3.0 (built w/nsqpy 0.1.0 python3.11.7)``: upstream's --version line plus our build."""
    import sys

    v = sys.version_info
    return f"{program} v{NSQ_COMPAT_VERSION} (built w/nsqpy {__version__} python{v.major}.{v.minor}.{v.micro})"
