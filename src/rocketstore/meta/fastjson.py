"""RocketMQ's JSON dialect: fastjson 1.2.x pretty format, and a tolerant reader (spec section 10.3).

Writer (:func:`dumps`) rules, as ``JSON.toJSONString(obj, true)`` produces them:

* a dict is ``{``, then per entry: a ``str`` key starts a new line indented with one TAB more than
  the dict's own line and is written quoted; an ``int`` key is written bare and stays on the current
  line (so a map with integer keys keeps its entries inline: ``{0:250,1:248``); entries are separated
  by ``,`` and ``:`` has no space around it; a non-empty dict closes on a new line indented like its
  own line, an empty one is ``{}``;
* a dict entry whose value is ``None`` is left out (fastjson's default, no ``WriteMapNullValue``);
* lists, tuples and sets are written inline, ``["TopicTest"]`` (fastjson's collection codec does
  not pretty-print); sets are sorted to keep the output stable;
* no trailing newline. Key order is the dict's insertion order: callers sort bean properties.

Reader (:func:`loads`): standard JSON plus what fastjson's default parser features and lexer take
(``JSON.DEFAULT_PARSER_FEATURE``, which RocketMQ's ``RemotingSerializable.fromJson`` reads config
files with): bare integer object keys (``{1:23,2:32}``), which come back as Python ``int`` keys
(quoted keys stay ``str``); unquoted identifier keys (AllowUnQuotedFieldNames); single-quoted
strings (AllowSingleQuotes); extra and trailing commas (AllowArbitraryCommas); ``\f`` and ``\b``
as whitespace, and ``/* */`` and ``//`` comments where whitespace may be.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from json import JSONDecodeError
from json.decoder import scanstring
from json.encoder import encode_basestring as _quote_printable_ascii  # escapes '"' and '\\' as fastjson does

from rocketstore.config_values import join_surrogates

__all__ = ["dumps", "loads"]

# --------------------------------------------------------------------------------------------- writer

# Characters fastjson escapes inside a double-quoted string (SerializeWriter.writeStringWithDoubleQuote
# without BrowserCompatible): the usual JSON ones, other C0 controls, DEL..0x9F and U+2028/U+2029 as
# \uXXXX with upper-case hex digits. '/' is not escaped (WriteSlashAsSpecial is off). A lone
# surrogate (read from a file as an escape without its pair) is written as the escape too: UTF-8
# cannot hold it (fastjson writes it raw and Java's FileWriter turns it into '?').
_ESCAPE_RE = re.compile('[\\x00-\\x1f"\\\\\\x7f-\\x9f\u2028\u2029\ud800-\udfff]')
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _escape_char(match: re.Match[str]) -> str:
    ch = match.group()
    short = _SHORT_ESCAPES.get(ch)
    return short if short is not None else f"\\u{ord(ch):04X}"


def _quote(text: str) -> str:
    if text.isascii() and text.isprintable():  # the usual name or value: only '"' and '\\' to escape
        return _quote_printable_ascii(text)
    if _ESCAPE_RE.search(text) is None:
        return '"' + text + '"'
    return '"' + _ESCAPE_RE.sub(_escape_char, text) + '"'


def _float_text(value: float) -> str:
    # Best effort: fastjson writes NaN/Infinity as null and drops a trailing ".0". Exponent notation
    # differs from Java's Double.toString; RocketMQ's config beans hold no floating-point fields.
    if math.isnan(value) or math.isinf(value):
        return "null"
    text = repr(value)
    return text[:-2] if text.endswith(".0") else text


def _scalar_text(value: object) -> str | None:
    """Text of a scalar (also used for bare map keys), or None if ``value`` is not a scalar."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, float):
        return _float_text(value)
    return None


def _write(value: object, out: list[str], indent: int) -> None:
    text = _scalar_text(value)
    if text is not None:
        out.append(text)
    elif isinstance(value, Mapping):
        _write_map(value, out, indent)
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else value
        out.append("[")
        first = True
        for item in items:
            if not first:
                out.append(",")
            first = False
            _write(item, out, indent)
        out.append("]")
    else:
        raise TypeError(f"fastjson.dumps cannot write a {type(value).__name__}")


def _write_map(mapping: Mapping[object, object], out: list[str], indent: int) -> None:
    if not mapping:
        out.append("{}")
        return
    close = "\n" + "\t" * indent  # MapSerializer tests map.size(), not the number of entries written
    keys, values = mapping.keys(), mapping.values()
    if all(type(k) is int for k in keys) and all(type(v) is int for v in values):  # an offset table's queues
        out.append("{" + ",".join([f"{k}:{v}" for k, v in mapping.items()]) + close + "}")
        return
    out.append("{")
    inner = "\n" + "\t" * (indent + 1)
    first = True
    for key, value in mapping.items():
        if value is None:
            continue
        if first:
            first = False
        else:
            out.append(",")
        if type(key) is str or isinstance(key, str):  # the exact type first: the usual case, fast
            out.append(inner + _quote(key) + ":")
        elif isinstance(key, int):  # bool included: fastjson writes a Boolean key bare too
            out.append(_scalar_text(key) + ":")  # type: ignore[operator]
        else:
            raise TypeError(f"fastjson.dumps cannot write a {type(key).__name__} map key")
        kind = type(value)  # the usual bean fields first, without _write's general checks
        if kind is str:
            out.append(_quote(value))  # type: ignore[arg-type]
        elif kind is int:
            out.append(str(value))
        elif kind is bool:
            out.append("true" if value else "false")
        elif kind is dict:
            _write_map(value, out, indent + 1)  # type: ignore[arg-type]
        else:
            _write(value, out, indent + 1)
    out.append(close + "}")


def dumps(obj: object) -> str:
    """Serialize ``obj`` the way fastjson 1.2.x does with ``prettyFormat=true`` (no trailing newline)."""
    out: list[str] = []
    _write(obj, out, 0)
    return "".join(out)


# --------------------------------------------------------------------------------------------- reader

_WS_RE = re.compile(r"(?:[ \t\n\r\f\b]+|/\*.*?\*/|//[^\n]*)*", re.DOTALL)  # fastjson's skipWhitespace
_NUMBER_RE = re.compile(r"(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_INT_KEY_RE = re.compile(r"-?[0-9]+")
_NAME_KEY_RE = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")  # an unquoted field name (AllowUnQuotedFieldNames)
_WS_CHARS = " \t\n\r\f\b/"
# a quoted string's body up to the first unescaped quote (single quotes: AllowSingleQuotes), then
# its escapes as fastjson's lexer reads them (scanString, scanStringSingleQuote): JSON's, and \' \v
# \F, \0 to \7 as those characters, \xHH
_QUOTED_RE = {q: re.compile(f"((?:[^{q}\\\\]|\\\\.)*){q}", re.DOTALL) for q in "'\""}
_ESCAPE_RE_IN = re.compile(r"\\(u[0-9A-Fa-f]{4}|x[0-9A-Fa-f]{2}|.)", re.DOTALL)
_ESCAPES = {
    **{c: chr(int(c)) for c in "01234567"},
    "b": "\b",
    "f": "\f",
    "F": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "'": "'",
    '"': '"',
    "\\": "\\",
    "/": "/",
}


class _Parser:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def skip_ws(self, pos: int) -> int:
        text = self.text
        if pos < len(text) and text[pos] in _WS_CHARS:
            end = _WS_RE.match(text, pos).end()  # type: ignore[union-attr]
            if text.startswith("/*", end):
                raise self.error("Unterminated comment", end)
            return end
        return pos

    def skip_commas(self, pos: int) -> int:
        """Past any commas (and whitespace) at ``pos``: fastjson's AllowArbitraryCommas."""
        text = self.text
        while text.startswith(",", pos):
            pos = self.skip_ws(pos + 1)
        return pos

    def quoted(self, pos: int, quote: str) -> tuple[str, int]:
        """The string whose body starts at ``pos`` (after its ``quote``), escapes read as fastjson's."""
        match = _QUOTED_RE[quote].match(self.text, pos)
        if match is None:
            raise self.error("Unterminated string starting at", pos - 1)

        def escape(m: re.Match[str]) -> str:
            code = m.group(1)
            if len(code) > 1:
                return chr(int(code[1:], 16))
            if code not in _ESCAPES:
                raise self.error(f"Invalid \\escape: {code!r}", pos + m.start())
            return _ESCAPES[code]

        return join_surrogates(_ESCAPE_RE_IN.sub(escape, match.group(1))), match.end()

    def double_quoted(self, pos: int) -> tuple[str, int]:
        """JSON's string at ``pos`` (after its ``"``); one with fastjson's other escapes the long way."""
        try:
            return scanstring(self.text, pos, False)
        except JSONDecodeError:
            return self.quoted(pos, '"')

    def error(self, message: str, pos: int) -> JSONDecodeError:
        return JSONDecodeError(message, self.text, pos)

    def value(self, pos: int) -> tuple[object, int]:
        text = self.text
        if pos >= len(text):
            raise self.error("Expecting value", pos)
        ch = text[pos]
        if ch == '"':
            return self.double_quoted(pos + 1)
        if ch == "'":
            return self.quoted(pos + 1, "'")
        if ch == "{":
            return self.object(pos + 1)
        if ch == "[":
            return self.array(pos + 1)
        if ch == "n" and text.startswith("null", pos):
            return None, pos + 4
        if ch == "t" and text.startswith("true", pos):
            return True, pos + 4
        if ch == "f" and text.startswith("false", pos):
            return False, pos + 5
        match = _NUMBER_RE.match(text, pos)
        if match is None:
            raise self.error("Expecting value", pos)
        integer, frac, exp = match.groups()
        if frac or exp:
            return float(integer + (frac or "") + (exp or "")), match.end()
        return int(integer), match.end()

    def object(self, pos: int) -> tuple[dict[object, object], int]:
        text = self.text
        result: dict[object, object] = {}
        pos = self.skip_commas(self.skip_ws(pos))
        if text.startswith("}", pos):
            return result, pos + 1
        while True:
            key: object
            if text.startswith('"', pos):
                key, pos = self.double_quoted(pos + 1)
            elif text.startswith("'", pos):
                key, pos = self.quoted(pos + 1, "'")
            elif (match := _INT_KEY_RE.match(text, pos)) is not None:
                key, pos = int(match.group()), match.end()
            elif (match := _NAME_KEY_RE.match(text, pos)) is not None:
                key, pos = match.group(), match.end()
            else:
                raise self.error("Expecting a property name", pos)
            pos = self.skip_ws(pos)
            if not text.startswith(":", pos):
                raise self.error("Expecting ':' delimiter", pos)
            value, pos = self.value(self.skip_ws(pos + 1))
            result[key] = value
            pos = self.skip_ws(pos)
            if text.startswith(",", pos):
                pos = self.skip_commas(pos)
                if text.startswith("}", pos):
                    return result, pos + 1
            elif text.startswith("}", pos):
                return result, pos + 1
            else:
                raise self.error("Expecting ',' delimiter or '}'", pos)

    def array(self, pos: int) -> tuple[list[object], int]:
        text = self.text
        result: list[object] = []
        pos = self.skip_commas(self.skip_ws(pos))
        if text.startswith("]", pos):
            return result, pos + 1
        while True:
            value, pos = self.value(pos)
            result.append(value)
            pos = self.skip_ws(pos)
            if text.startswith(",", pos):
                pos = self.skip_commas(pos)
                if text.startswith("]", pos):
                    return result, pos + 1
            elif text.startswith("]", pos):
                return result, pos + 1
            else:
                raise self.error("Expecting ',' delimiter or ']'", pos)


def loads(text: str) -> object:
    """Parse JSON that may use bare integer object keys (fastjson's ``Map<Integer, ...>`` output).

    Raises :class:`json.JSONDecodeError` (a :class:`ValueError` carrying ``pos``, ``lineno`` and
    ``colno``) on malformed input.
    """
    if not isinstance(text, str):
        raise TypeError(f"fastjson.loads expects str, not {type(text).__name__}")
    parser = _Parser(text)
    try:
        value, pos = parser.value(parser.skip_ws(0))
    except RecursionError:
        raise JSONDecodeError("JSON nested too deeply", text, 0) from None
    pos = parser.skip_ws(pos)
    if pos != len(text):
        raise parser.error("Extra data", pos)
    return value
