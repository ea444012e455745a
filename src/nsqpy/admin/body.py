"""Request bodies read as upstream's handlers read them: ``json.NewDecoder(body).Decode(&struct)``
into a struct of string fields, with Go's error texts (the API answers them in ``message``).

Sans I/O. :func:`~nsqpy.common.gojson.scan_value` walks the bytes with Go's scanner states, so
a malformed body is refused with the same ``invalid character 'x' ...`` as upstream's; a valid
value is then decoded and matched to the struct's fields as Go's decoder does (keys in order,
exact or case-insensitive, ``null`` leaves a field alone, a wrong type is reported).
"""

from __future__ import annotations

import json
from typing import Any

from ..common.gojson import scan_value


class _Object(list):  # type: ignore[type-arg]
    """A JSON object as its (key, value) pairs in order (Go's decoder visits keys in order)."""


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, _Object):
        return "object"
    return "array"


def struct_type(fields: tuple[str, ...]) -> str:
    """The Go type upstream decodes into, as ``reflect`` names it in errors."""
    parts = "; ".join(f'{f.capitalize()} string "json:\\"{f}\\""' for f in fields)
    return f"struct {{ {parts} }}"


def decode_body(raw: bytes, fields: tuple[str, ...]) -> dict[str, str]:
    """The string fields of a JSON object body; ValueError with Go's error text."""
    value = json.loads(scan_value(raw).decode("utf-8", "replace"), object_pairs_hook=_Object)
    out = dict.fromkeys(fields, "")
    if value is None:
        return out
    if not isinstance(value, _Object):
        raise ValueError(f"json: cannot unmarshal {_kind(value)} into Go value of type "
                         f"{struct_type(fields)}")
    error = None
    for key, v in value:
        name = key if key in out else next((f for f in fields if f == key.lower()), None)
        if name is None or v is None:
            continue
        if isinstance(v, str):
            out[name] = v
        elif error is None:
            error = (f"json: cannot unmarshal {_kind(v)} into Go struct field .{name} "
                     f"of type string")
    if error is not None:
        raise ValueError(error)
    return out
