"""Topic and channel name rules, shared by nsqd, nsqlookupd and the clients.

Upstream: ``^[.a-zA-Z0-9_-]+(#ephemeral)?$`` with a total length of 1..64 characters.
"""

from __future__ import annotations

import re

EPHEMERAL_SUFFIX = "#ephemeral"
MAX_NAME_LENGTH = 64
_NAME_RE = re.compile(r"[.a-zA-Z0-9_-]+(?:#ephemeral)?")


def is_valid_name(name: str) -> bool:
    """True when ``name`` is a legal topic or channel name."""
    return 0 < len(name) <= MAX_NAME_LENGTH and _NAME_RE.fullmatch(name) is not None


is_valid_topic_name = is_valid_name
is_valid_channel_name = is_valid_name


def is_ephemeral(name: str) -> bool:
    """Ephemeral topics/channels never touch disk and vanish when unused."""
    return name.endswith(EPHEMERAL_SUFFIX)
