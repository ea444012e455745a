"""Go's ``encoding/json`` scanner, byte for byte: which input it refuses and with which words.

The error-text half of the JSON codec (:mod:`nsqpy.protocol.gojson` reads and writes values).

Sans I/O. Upstream's daemons answer a malformed body (nsqadmin) or refuse a malformed file
(nsqd's ``nsqd.dat``) with the scanner's own text (``invalid character 'x' looking for beginning
of value``, ``unexpected end of JSON input``); :func:`scan_value` reads the first value as Go's
``Decoder`` does, :func:`unmarshal_syntax_error` checks a whole input as ``json.Unmarshal`` does.
"""

from __future__ import annotations

_SPACE = b" \t\r\n"
_DIGITS = b"0123456789"
_HEX = b"0123456789abcdefABCDEF"
_ESCAPES = b'bfnrt\\/"'
_GO_CONTROL = {7: "\\a", 8: "\\b", 9: "\\t", 10: "\\n", 11: "\\v", 12: "\\f", 13: "\\r"}


def quote_char(c: int) -> str:
    """Go's ``quoteChar``: a byte as the scanner's errors show it (a byte >= 0x80 is shown as
    the code point of the same number, as Go's ``string(byte)`` makes it)."""
    if c == 0x27:
        return "'\\''"
    if c == 0x22:
        return "'\"'"
    if c == 0x5C:
        return "'\\\\'"
    if c in _GO_CONTROL:
        return f"'{_GO_CONTROL[c]}'"
    if c < 0x20 or c == 0x7F:
        return f"'\\x{c:02x}'"
    if 0x80 <= c <= 0xA0 or c == 0xAD:
        return f"'\\u{c:04x}'"
    return f"'{chr(c)}'"


class _Scanner:
    """Go's scanner, one byte at a time: ``step`` is the state, ``stack`` the open containers
    (``"key"`` / ``"value"`` inside an object, ``"array"``)."""

    def __init__(self) -> None:
        self.step = self.begin_value
        self.stack: list[str] = []
        self.done = False  # a whole top-level value has been read
        self.ended_before = False  # ... and the byte that told (after a number) is not in it
        self.left = 0  # remaining bytes of a literal or a \u escape
        self.expect = b""
        self.literal = ""

    @staticmethod
    def fail(c: int, context: str) -> None:
        raise ValueError(f"invalid character {quote_char(c)} {context}")

    def begin_value(self, c: int) -> None:
        if c in _SPACE:
            return
        if c == 0x7B:  # {
            self.stack.append("key")
            self.step = self.begin_key_or_empty
        elif c == 0x5B:  # [
            self.stack.append("array")
            self.step = self.begin_value_or_empty
        elif c == 0x22:
            self.step = self.in_string
        elif c == 0x2D:  # -
            self.step = self.neg
        elif c == 0x30:
            self.step = self.zero
        elif 0x31 <= c <= 0x39:
            self.step = self.digits
        elif c in b"tfn":
            self.literal = {0x74: "true", 0x66: "false", 0x6E: "null"}[c]
            self.expect = self.literal[1:].encode()
            self.step = self.in_literal
        else:
            self.fail(c, "looking for beginning of value")

    def begin_value_or_empty(self, c: int) -> None:
        if c in _SPACE:
            return
        if c == 0x5D:  # ]
            self.end_container()
            return
        self.begin_value(c)

    def begin_key_or_empty(self, c: int) -> None:
        if c in _SPACE:
            return
        if c == 0x7D:  # }
            self.end_container()
            return
        self.begin_key(c)

    def begin_key(self, c: int) -> None:
        if c in _SPACE:
            return
        if c != 0x22:
            self.fail(c, "looking for beginning of object key string")
        self.step = self.in_string

    def end_container(self) -> None:
        self.stack.pop()
        self.step = self.end_value
        if not self.stack:
            self.done = True

    def end_value(self, c: int) -> None:
        if c in _SPACE:
            return
        top = self.stack[-1]
        if top == "key":
            if c != 0x3A:  # :
                self.fail(c, "after object key")
            self.stack[-1] = "value"
            self.step = self.begin_value
        elif top == "value":
            if c == 0x2C:  # ,
                self.stack[-1] = "key"
                self.step = self.begin_key
            elif c == 0x7D:
                self.end_container()
            else:
                self.fail(c, "after object key:value pair")
        else:
            if c == 0x2C:
                self.step = self.begin_value
            elif c == 0x5D:
                self.end_container()
            else:
                self.fail(c, "after array element")

    def value_ended(self, c: int) -> None:
        """A number ended at ``c``: ``c`` belongs to what follows."""
        self.step = self.end_value
        if not self.stack:
            self.done = self.ended_before = True
            return
        self.end_value(c)

    def scalar_ended(self) -> None:
        self.step = self.end_value
        if not self.stack:
            self.done = True

    def in_string(self, c: int) -> None:
        if c == 0x22:
            self.scalar_ended()
        elif c == 0x5C:
            self.step = self.in_escape
        elif c < 0x20:
            self.fail(c, "in string literal")

    def in_escape(self, c: int) -> None:
        if c in _ESCAPES:
            self.step = self.in_string
        elif c == 0x75:  # u
            self.left = 4
            self.step = self.in_escape_u
        else:
            self.fail(c, "in string escape code")

    def in_escape_u(self, c: int) -> None:
        if c not in _HEX:
            self.fail(c, "in \\u hexadecimal character escape")
        self.left -= 1
        if not self.left:
            self.step = self.in_string

    def in_literal(self, c: int) -> None:
        want = self.expect[0]
        if c != want:
            self.fail(c, f"in literal {self.literal} (expecting {quote_char(want)})")
        self.expect = self.expect[1:]
        if not self.expect:
            self.scalar_ended()

    def neg(self, c: int) -> None:
        if c == 0x30:
            self.step = self.zero
        elif 0x31 <= c <= 0x39:
            self.step = self.digits
        else:
            self.fail(c, "in numeric literal")

    def digits(self, c: int) -> None:
        if c in _DIGITS:
            return
        self.zero(c)

    def zero(self, c: int) -> None:
        if c == 0x2E:  # .
            self.step = self.dot
        elif c in b"eE":
            self.step = self.exp
        else:
            self.value_ended(c)

    def dot(self, c: int) -> None:
        if c not in _DIGITS:
            self.fail(c, "after decimal point in numeric literal")
        self.step = self.fraction

    def fraction(self, c: int) -> None:
        if c in _DIGITS:
            return
        if c in b"eE":
            self.step = self.exp
        else:
            self.value_ended(c)

    def exp(self, c: int) -> None:
        if c in b"+-":
            self.step = self.exp_sign
            return
        self.exp_sign(c)

    def exp_sign(self, c: int) -> None:
        if c not in _DIGITS:
            self.fail(c, "in exponent of numeric literal")
        self.step = self.exp_digits

    def exp_digits(self, c: int) -> None:
        if c in _DIGITS:
            return
        self.value_ended(c)


def scan_value(raw: bytes) -> bytes:
    """The first JSON value of ``raw`` as Go's ``Decoder`` reads it (what follows is ignored);
    ValueError with Go's text: ``EOF`` (nothing), ``unexpected EOF`` (cut short), or the
    scanner's ``invalid character ...``."""
    scanner = _Scanner()
    start = None
    for i, c in enumerate(raw):
        if start is None and c not in _SPACE:
            start = i
        scanner.step(c)
        if scanner.done:
            return raw[start:i if scanner.ended_before else i + 1]
    if start is None:
        raise ValueError("EOF")
    try:
        scanner.step(0x20)  # as Go at the end of the input: a number may end there
    except ValueError:
        pass
    if scanner.done:
        return raw[start:]
    raise ValueError("unexpected EOF")


def unmarshal_syntax_error(raw: bytes) -> str | None:
    """Go's ``json.Unmarshal`` syntax check of a whole input: None when it is one valid value
    (spaces around it allowed), else the error's text (``unexpected end of JSON input`` when it
    is empty or cut short, ``invalid character 'x' after top-level value`` after a value)."""
    scanner = _Scanner()
    try:
        for c in raw:
            if scanner.done:
                if c not in _SPACE:
                    _Scanner.fail(c, "after top-level value")
                continue
            scanner.step(c)
        if not scanner.done:
            scanner.step(0x20)  # as Go's eof(): a number or a literal may end there
    except ValueError as err:
        return str(err)
    return None if scanner.done else "unexpected end of JSON input"
