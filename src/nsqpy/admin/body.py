"""Request bodies read as upstream's handlers read them: ``json.NewDecoder(body).Decode(&struct)``
into a struct of string fields, with Go's error texts (the API answers them in ``message``).

Sans I/O. :func:`~nsqpy.protocol.goscan.scan_value` walks the bytes with Go's scanner states, so
a malformed body is refused with the same ``invalid character 'x' ...`` as upstream's; a valid
value is then decoded into the struct's fields by :func:`nsqpy.protocol.gojson.decode_struct`.
"""

from __future__ import annotations

from ..protocol.gojson import STRING, decode_struct
from ..protocol.goscan import scan_value


def struct_type(fields: tuple[str, ...]) -> str:
    """The Go type upstream decodes into, as ``reflect`` names it in errors."""
    parts = "; ".join(f'{f.capitalize()} string "json:\\"{f}\\""' for f in fields)
    return f"struct {{ {parts} }}"


def decode_body(raw: bytes, fields: tuple[str, ...]) -> dict[str, str]:
    """The string fields of a JSON object body (the first value, read by Go's scanner,
    decoded by :mod:`nsqpy.protocol.gojson`); ValueError with Go's error text."""
    value = scan_value(raw)
    return {**dict.fromkeys(fields, ""),
            **decode_struct(value, dict.fromkeys(fields, STRING), struct_type(fields))}
