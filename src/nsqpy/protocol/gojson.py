"""JSON read and written exactly as Go's ``encoding/json`` does it (upstream v1.3.0's Go 1.19).

Clients, peers and scripts see the three daemons' JSON byte for byte (IDENTIFY answers, ``/stats``,
``/nodes``, ``/lookup``, ...) and see which bodies are accepted (IDENTIFY on nsqd and nsqlookupd,
auth server answers), so every daemon reads and writes JSON through this one module.

Writing (:func:`dumps`), where Go differs from orjson:

- ``<``, ``>``, ``&``, U+2028 and U+2029 in strings are ``\\u003c`` ... ``\\u2029``;
- control characters other than ``\\n``, ``\\r``, ``\\t`` are ``\\u00XX`` (``\\u0008``, not ``\\b``);
- bytes that are not UTF-8 are one ``\\ufffd`` each (a ``bytes`` value, or a ``str`` holding lone
  surrogates, stands for a Go string holding those bytes);
- floats: ``1`` not ``1.0``, ``10000000000000000`` not ``1e+16``, ``0.000001`` not ``1e-6``.

orjson still writes almost everything (``/stats`` is plain ASCII): its output is used when one
regular-expression search finds none of the cases above, and written again exactly otherwise.

Reading, where Go differs from orjson:

- invalid UTF-8 in a string is one U+FFFD per bad byte; a lone surrogate escape (``"\\ud800"``)
  is U+FFFD; nesting is allowed up to 10000 levels;
- a number is converted only where it is stored: ``1e400`` under a key nobody reads is fine,
  in a Go ``int`` field (or ``interface{}``: :func:`loads`) it is an error;
- into a struct (:func:`decode_struct`): keys match field names exactly or with Go 1.19's folding
  (ASCII case, and U+017F / U+212A for ``s`` / ``k``; not Unicode case folding: ``ß`` is not
  ``ss``), later keys win, ``null`` leaves a field as it was, unknown keys are skipped unread, and
  a value of the wrong type fails the whole decode (after the rest was read, as Go does).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any, Mapping, NamedTuple

import orjson

MAX_DEPTH = 10000  # encoding/json's maxNestingDepth


class GoJSONError(ValueError):
    """The input is not JSON Go reads (syntax), or a value does not fit its field (type)."""


# --- writing -----------------------------------------------------------------------------------

# orjson's output is Go's but for: escapes (orjson writes ``\b``, ``\f``), floats written
# ``N.0`` or with an exponent, and ``<>&`` U+2028 U+2029 (which orjson leaves raw and only
# strings can hold: replaced in place). The tests are ``in`` and literal-led regexes because a
# scan of 8 MB of /stats must cost a fraction of orjson's own time.
_FLOAT_DOT_ZERO = re.compile(rb"\.0[,}\]]")
_EXPONENT = re.compile(rb"e[-+][0-9]")
_DIGITS = frozenset(b"0123456789")
_HTML_ESCAPES = ((b"<", b"\\u003c"), (b">", b"\\u003e"), (b"&", b"\\u0026"),
                 (b"\xe2\x80\xa8", b"\\u2028"), (b"\xe2\x80\xa9", b"\\u2029"))


class RawJSON:
    """JSON text already written as Go writes it (by :func:`dumps`), placed in a document as
    it is: a part that repeats from one document to the next (a ``/stats`` client's fixed
    fields) is then encoded once, not per document."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


def _fragment(value: Any) -> orjson.Fragment:
    """orjson's ``default``: a :class:`RawJSON` goes in as it is; anything else is refused."""
    if type(value) is RawJSON:
        return orjson.Fragment(value.data)
    raise TypeError


def _is_go(out: bytes, floats: bool = True) -> bool:
    """orjson's ``out`` needs no rewriting but the HTML escapes (false alarms only cost time);
    ``floats=False``: the caller knows the value holds no float, whose spelling then needs no
    scan (the scans cost more than orjson's own encoding of a large ``/stats``)."""
    if b"\\" in out:
        return False
    if not floats:
        return True
    if _FLOAT_DOT_ZERO.search(out) is not None or out.endswith(b".0"):
        return False
    return not any(out[m.start() - 1] in _DIGITS for m in _EXPONENT.finditer(out))


def dumps(value: Any, sort_keys: bool = False, floats: bool = True) -> bytes:
    """``json.Marshal``: compact; dict keys sorted when ``sort_keys`` (Go sorts a map's keys; a
    struct's fields keep their order, so pass dicts in field order for structs). ``str``,
    ``bytes``, ``int``, ``float``, ``bool``, ``None``, ``dict``, ``list``, ``tuple`` and
    :class:`RawJSON`, another type is a TypeError. No NaN or infinity: Go refuses them
    (UnsupportedValueError) where orjson writes ``null``, and nsqpy's documents never hold one.
    ``floats=False`` promises that ``value`` holds no float (a float would then be written as
    orjson spells it)."""
    try:
        out = orjson.dumps(value, default=_fragment,
                           option=orjson.OPT_SORT_KEYS if sort_keys else 0)
    except (TypeError, orjson.JSONEncodeError):
        pass  # lone surrogates, bytes, big ints, non-str keys: the exact writer decides
    else:
        if _is_go(out, floats):
            for raw, escaped in _HTML_ESCAPES if b"\xe2" in out else _HTML_ESCAPES[:3]:
                if raw in out:
                    out = out.replace(raw, escaped)
            return out
    parts: list[str] = []
    _write(value, parts, sort_keys)
    return "".join(parts).encode("utf-8")


_ESCAPE = re.compile("[\x00-\x1f\"\\\\<>&\u2028\u2029\udc80-\udcff]")
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t", '"': '\\"', "\\": "\\\\"}


def _escape(m: re.Match) -> str:
    ch = m.group()
    short = _SHORT.get(ch)
    if short is not None:
        return short
    code = ord(ch)
    return "\\ufffd" if code >= 0xDC80 and code <= 0xDCFF else f"\\u{code:04x}"


def _go_bytes(raw: bytes) -> str:
    """The text of a Go string holding ``raw``: each byte that is not UTF-8 becomes a lone
    surrogate U+DC80+byte, which the writer turns into ``\\ufffd``."""
    return raw.decode("utf-8", "surrogateescape")


def _go_str(text: str) -> str:
    """A ``str`` as a Go string: ``surrogateescape``'s bytes are the bytes they stand for; any
    other lone surrogate is its three (invalid) UTF-8 bytes."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    raw = b"".join(ch.encode("utf-8", "surrogateescape" if "\udc80" <= ch <= "\udcff"
                             else "surrogatepass") for ch in text)
    return _go_bytes(raw)


def _quote(text: str) -> str:
    return '"' + _ESCAPE.sub(_escape, text) + '"'


def go_float(value: float) -> str:
    """A float64 as Go's encoder writes it: the shortest digits that read back, ``'f'`` form for
    1e-6 <= |x| < 1e21, else ``'e'`` form with the exponent's leading zero dropped (``1e-7``)."""
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"json: unsupported value: {value!r}")
    text = repr(value)
    magnitude = abs(value)
    if magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21):
        mantissa, _, exponent = text.partition("e")
        if mantissa.endswith(".0"):
            mantissa = mantissa[:-2]
        return f"{mantissa}e{exponent[0]}{int(exponent[1:]):02d}" if exponent[0] == "+" \
            else f"{mantissa}e-{int(exponent[1:])}"
    if "e" in text:
        text = format(Decimal(text), "f")
    return text[:-2] if text.endswith(".0") else text


def _write(value: Any, parts: list[str], sort_keys: bool) -> None:
    if value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif isinstance(value, str):
        parts.append(_quote(_go_str(value)))
    elif isinstance(value, int):
        parts.append(int.__repr__(value))
    elif isinstance(value, float):
        parts.append(go_float(value))
    elif isinstance(value, dict):
        items = [(_go_str(k) if isinstance(k, str) else _key(k), v) for k, v in value.items()]
        if sort_keys:
            items.sort(key=lambda kv: kv[0].encode("utf-8", "surrogateescape"))
        parts.append("{")
        first = True
        for key, item in items:
            if not first:
                parts.append(",")
            first = False
            parts.append(_quote(key))
            parts.append(":")
            _write(item, parts, sort_keys)
        parts.append("}")
    elif isinstance(value, (list, tuple)):
        parts.append("[")
        for i, item in enumerate(value):
            if i:
                parts.append(",")
            _write(item, parts, sort_keys)
        parts.append("]")
    elif isinstance(value, (bytes, bytearray, memoryview)):
        parts.append(_quote(_go_bytes(bytes(value))))
    elif type(value) is RawJSON:
        parts.append(value.data.decode("utf-8"))  # (Go's output: UTF-8 by construction)
    else:
        raise TypeError(f"json: unsupported type: {type(value).__name__}")


def _key(key: Any) -> str:
    """Go writes an integer map key as its decimal text; bytes as the Go string they hold."""
    if isinstance(key, (bytes, bytearray)):
        return _go_bytes(bytes(key))
    if isinstance(key, int) and not isinstance(key, bool):
        return int.__repr__(key)
    raise TypeError(f"json: unsupported map key type: {type(key).__name__}")


# --- reading -----------------------------------------------------------------------------------

_WS = re.compile(rb"[ \t\n\r]*+")
_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?(?:[eE][-+]?[0-9]++)?")
_STRING = re.compile(rb'"((?:[^"\\\x00-\x1f]++|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*+)"')
_LITERALS = {0x74: (b"true", True), 0x66: (b"false", False), 0x6E: (b"null", None)}
_SIMPLE_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
                   '"': '"', "\\": "\\", "/": "/"}
_BAD_BYTE = re.compile("[\udc80-\udcff]")


def _utf8(raw: bytes) -> str:
    """Go's reading of string bytes: each byte that is not part of valid UTF-8 is one U+FFFD
    (Python's ``replace`` would make one of a truncated sequence)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return _BAD_BYTE.sub("\ufffd", raw.decode("utf-8", "surrogateescape"))


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    n = len(text)
    while True:
        j = text.find("\\", i)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:j])
        c = text[j + 1]
        if c != "u":
            out.append(_SIMPLE_ESCAPES[c])
            i = j + 2
            continue
        code = int(text[j + 2:j + 6], 16)
        i = j + 6
        if 0xD800 <= code < 0xE000:
            low = int(text[i + 2:i + 6], 16) if text.startswith("\\u", i) and i + 6 <= n else -1
            if code < 0xDC00 and 0xDC00 <= low < 0xE000:
                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                i += 6
            else:
                code = 0xFFFD  # a lone half: the next escape is read on its own
        out.append(chr(code))


class _Obj(list):
    """An object read for :func:`decode_struct`: its (key, value) pairs in order, repeats kept."""


class _Num(bytes):
    """A number's literal, converted only where it is stored (Go skips unread ones)."""


def _syntax(data: bytes, pos: int, what: str) -> GoJSONError:
    if pos >= len(data):
        return GoJSONError("unexpected end of JSON input")
    return GoJSONError(f"invalid character {chr(data[pos])!r} {what} (offset {pos})")


def _parse(data: bytes, as_pairs: bool) -> Any:
    """Go's ``checkValid`` and the value read in one pass, without recursion (10000 levels).
    Objects are dicts (last key wins), or :class:`_Obj` when ``as_pairs``; numbers stay
    :class:`_Num` when ``as_pairs``, else become int (integer literal) or float."""
    ws = _WS.match
    pos = ws(data, 0).end()
    end = len(data)
    stack: list[tuple[Any, Any]] = []  # (container, key of the value being read or None)
    while True:
        # a value starts at pos
        if pos >= end:
            raise _syntax(data, pos, "")
        c = data[pos]
        if c == 0x22:
            m = _STRING.match(data, pos)
            if m is None:
                raise _syntax(data, pos, "in string literal")
            raw = m.group(1)
            value: Any = _utf8(raw)
            if b"\\" in raw:
                value = _unescape(value)
            pos = m.end()
        elif c == 0x7B or c == 0x5B:
            if len(stack) >= MAX_DEPTH:
                raise GoJSONError(f"exceeded max depth (offset {pos})")
            pos = ws(data, pos + 1).end()
            if c == 0x5B:
                if pos < end and data[pos] == 0x5D:
                    value = []
                    pos += 1
                else:
                    stack.append(([], None))
                    continue
            else:
                if pos < end and data[pos] == 0x7D:
                    value = _Obj() if as_pairs else {}
                    pos += 1
                else:
                    container = _Obj() if as_pairs else {}
                    key, pos = _read_key(data, pos)
                    stack.append((container, key))
                    continue
        elif c == 0x2D or 0x30 <= c <= 0x39:
            m = _NUMBER.match(data, pos)
            if m is None:
                raise _syntax(data, pos + 1, "in numeric literal")
            pos = m.end()
            value = _Num(m.group()) if as_pairs else _number(m.group())
        else:
            literal = _LITERALS.get(c)
            if literal is None or not data.startswith(literal[0], pos):
                raise _syntax(data, pos, "looking for beginning of value")
            value = literal[1]
            pos += len(literal[0])
        # the value is read: store it, then find what follows
        while True:
            pos = ws(data, pos).end()
            if not stack:
                if pos != end:
                    raise _syntax(data, pos, "after top-level value")
                return value
            container, key = stack[-1]
            if key is None:
                container.append(value)
                close = 0x5D
            else:
                if as_pairs:
                    container.append((key, value))
                else:
                    container[key] = value
                close = 0x7D
            if pos < end and data[pos] == 0x2C:
                pos = ws(data, pos + 1).end()
                if key is not None:
                    key, pos = _read_key(data, pos)
                    stack[-1] = (container, key)
                break
            if pos < end and data[pos] == close:
                pos += 1
                stack.pop()
                value = container
                continue
            raise _syntax(data, pos, "after array element" if key is None
                          else "after object key:value pair")


def _read_key(data: bytes, pos: int) -> tuple[str, int]:
    """An object key and the ``:`` after it; returns the key and where its value starts."""
    m = _STRING.match(data, pos) if pos < len(data) and data[pos] == 0x22 else None
    if m is None:
        raise _syntax(data, pos, "looking for beginning of object key string")
    raw = m.group(1)
    key = _utf8(raw)
    if b"\\" in raw:
        key = _unescape(key)
    pos = _WS.match(data, m.end()).end()
    if pos >= len(data) or data[pos] != 0x3A:
        raise _syntax(data, pos, "after object key")
    return key, _WS.match(data, pos + 1).end()


_INTEGER = re.compile(rb"-?[0-9]+")


def _number(literal: bytes) -> int | float:
    """A number read into ``interface{}``: Go's float64, refused when out of its range. An
    integer literal stays an int (exact, and what Python callers want) while it fits 64 bits."""
    if _INTEGER.fullmatch(literal):
        n = int(literal)
        if -(1 << 63) <= n < (1 << 64):
            return n
        try:
            return float(n)
        except OverflowError:
            raise GoJSONError(f"json: cannot unmarshal number {literal.decode()} "
                              "into Go value of type float64") from None
    f = float(literal)
    if f in (float("inf"), float("-inf")):
        raise GoJSONError(f"json: cannot unmarshal number {literal.decode()} "
                          "into Go value of type float64")
    return f


def _plain(value: Any) -> Any:
    """A value read with pairs made ``interface{}``: dicts (last key wins), numbers converted."""
    if isinstance(value, _Num):
        return _number(value)
    if isinstance(value, _Obj):
        return {k: _plain(v) for k, v in value}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """``json.Unmarshal`` into ``interface{}``: GoJSONError where Go fails. Numbers are ints for
    integer literals (floats beyond 64 bits), floats otherwise: Go's float64 values, except
    that ``-0`` is the int 0."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    try:
        return orjson.loads(data)  # agrees with Go wherever it succeeds
    except orjson.JSONDecodeError:
        pass
    return _parse(bytes(data), as_pairs=False)


# Go types of struct fields for decode_struct: these names, a ListOf (a slice) or a mapping of
# field names to types (a nested struct)
STRING, INT, INT32, BOOL, ANY = "string", "int", "int32", "bool", "any"
#: a string carried when it is one and ignored otherwise (a key upstream v1.3.0 does not know)
OPTIONAL_STRING = "optional-string"
#: ``time.Time`` as its UnmarshalJSON reads it: an RFC 3339 string (kept as the text)
TIME = "time"


class ListOf(NamedTuple):
    """A Go slice of ``item``: ``null`` is a nil slice (None), a ``null`` element the zero value."""

    item: Any


_INT_RANGES = {INT: (-(1 << 63), (1 << 63) - 1), INT32: (-(1 << 31), (1 << 31) - 1)}
_ZEROS = {STRING: "", INT: 0, INT32: 0, BOOL: False, ANY: None, TIME: "", OPTIONAL_STRING: ""}
_RFC3339 = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?"
                      r"(?:Z|[+-][0-9]{2}:[0-9]{2})", re.ASCII)
_FOLD = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ\u017f\u212a", "abcdefghijklmnopqrstuvwxyzsk")


def fold_key(key: str) -> str:
    """A key as Go 1.19's ``foldFunc`` compares it with an ASCII field name: ASCII letters in
    either case, U+017F as ``s``, U+212A (Kelvin) as ``k``; nothing else folds."""
    return key.translate(_FOLD)


def _type_error(value: Any, kind: Any, name: str) -> GoJSONError:
    what = _go_kind(value, with_number=isinstance(kind, str) and kind in _INT_RANGES)
    go = kind if isinstance(kind, str) else "[]" if isinstance(kind, ListOf) else "struct"
    return GoJSONError(f"json: cannot unmarshal {what} into Go struct field .{name} of type {go}")


def _store(kind: Any, value: Any, name: str) -> Any:
    """``value`` (not null) converted to the field's Go type; GoJSONError when Go would not
    store it (Go reads on and reports the first error: the first is raised here, after the
    whole input was checked, which fails the decode the same way)."""
    if kind == STRING:
        if isinstance(value, str):
            return value
    elif kind == BOOL:
        if isinstance(value, bool):
            return value
    elif isinstance(kind, str) and kind in _INT_RANGES:
        if isinstance(value, _Num) and _INTEGER.fullmatch(value):
            n = int(value)
            low, high = _INT_RANGES[kind]
            if low <= n <= high:
                return n
    elif kind == ANY:
        return _plain(value)
    elif kind == TIME:
        if isinstance(value, str) and _RFC3339.fullmatch(value):
            return value
    elif isinstance(kind, ListOf):
        if type(value) is list:
            item = kind.item
            zero = _ZEROS.get(item, {}) if isinstance(item, str) else None if isinstance(item, ListOf) else {}
            return [zero if v is None else _store(item, v, name) for v in value]
    elif isinstance(value, _Obj):  # a nested struct
        return _fill(kind, value, {})
    raise _type_error(value, kind, name)


def _go_kind(value: Any, with_number: bool = False) -> str:
    """What Go's UnmarshalTypeError names: the number's text only when it failed as an int."""
    if isinstance(value, _Num):
        return f"number {value.decode()}" if with_number else "number"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "string"
    return "object" if isinstance(value, _Obj) else "array"


def _fill(fields: Mapping[str, Any], doc: "_Obj", out: dict[str, Any]) -> dict[str, Any]:
    for key, value in doc:
        name = key if key in fields else fold_key(key)
        kind = fields.get(name)
        if kind is None:
            continue  # skipped unread, whatever it holds
        if value is None:
            if kind == ANY or isinstance(kind, ListOf):
                out[name] = None  # an interface or a slice becomes nil
            continue  # anything else is left as it was
        if kind == OPTIONAL_STRING:
            if isinstance(value, str):
                out[name] = value
        elif isinstance(kind, Mapping) and isinstance(value, _Obj):
            out[name] = _fill(kind, value, dict(out.get(name) or {}))  # a repeat adds to it
        else:
            out[name] = _store(kind, value, name)
    return out


def decode_struct(data: bytes | bytearray | memoryview, fields: Mapping[str, Any],
                  go_type: str = "struct") -> dict[str, Any]:
    """``json.Unmarshal`` into a struct whose JSON field names (lowercase ASCII) and Go types
    are ``fields``. Returns the fields the input set (a missing or ``null`` one is absent: the
    caller's zero value; a nested struct likewise); GoJSONError on a syntax error, when the
    input is neither an object nor ``null`` (the message names ``go_type``), or when any
    field's value has the wrong type."""
    doc = _parse(bytes(data), as_pairs=True)
    if doc is None:
        return {}
    if not isinstance(doc, _Obj):
        raise GoJSONError(f"json: cannot unmarshal {_go_kind(doc)} into Go value of type {go_type}")
    return _fill(fields, doc, {})


def decode_strings(data: bytes | bytearray | memoryview) -> list[str] | None:
    """``json.Unmarshal`` into a Go ``[]string``: None for ``null`` (a nil slice), a ``null``
    element is ``""``; GoJSONError on a syntax error or any value that is not a string."""
    doc = _parse(bytes(data), as_pairs=True)
    if doc is None:
        return None
    if type(doc) is not list:
        raise GoJSONError(f"json: cannot unmarshal {_go_kind(doc)} into Go value of type []string")
    return _store(ListOf(STRING), doc, "")
