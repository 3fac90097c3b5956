"""The model names of a native pass-through, in the bytes: the request's
model id set to the channel's (``rewrite_model``) and the answer's model set
back to the public name the client asked for (``rename_answer`` for a plain
answer, ``ModelRewriter`` for a stream); see ``pipeline.native`` for the
rule. Pure byte work: no I/O.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

import orjson

from gateway_bridge.protocols.base import CallRequest

_MODEL_KEY = re.compile(rb'"model"\s*:\s*')
_STRING_END = re.compile(rb'(?<!\\)(?:\\\\)*"')
# Where an answer names its model, by the client's protocol: the top-level key
# (a plain answer, a Gemini event); for a stream, the object of the first
# events that holds it (Anthropic's message_start message, the Responses
# API's response; None: every event names it, any value is the vendor's), and
# whether only that first event names it (Anthropic: then the rest of the
# stream is not looked at).
ANSWER_MODEL_KEYS = {"anthropic": "model", "openai": "model", "gemini": "modelVersion"}
_STREAM_FIELDS = {
    "anthropic": ("model", "message", True),
    "openai": ("model", "response", False),
    "gemini": ("modelVersion", None, False),
}
# How many of a stream's first events may name the vendor's id before it is given up.
LEARN_EVENTS = 4
_JSON_SPACE = b" \t\r\n"
_BACKSLASH = 0x5C
_COLON = 0x3A
_ANY_STRING = rb'"(?:[^"\\]|\\.)*"'
_KEY_PATTERNS: dict[str, re.Pattern[bytes]] = {}
_KEY_CUTS: dict[str, tuple[bytes, ...]] = {}
# The rewriters' patterns by (key, vendor ids; None: any string), bounded.
_FIELD_PATTERNS: dict[tuple[str, tuple[bytes, ...] | None], re.Pattern[bytes]] = {}
_MAX_FIELD_PATTERNS = 256


def _key_pattern(key: str) -> re.Pattern[bytes]:
    """``"<key>"`` and its colon: a key, unless after a backslash (then inside a
    string; checked by the callers: a lookbehind here would cost the search
    its literal prefix)."""
    pattern = _KEY_PATTERNS.get(key)
    if pattern is None:
        quoted = re.escape(orjson.dumps(key))
        pattern = _KEY_PATTERNS[key] = re.compile(quoted + rb"[ \t\r\n]*:[ \t\r\n]*")
    return pattern


def _key_cuts(key: str) -> tuple[bytes, ...]:
    """``"<key>"`` cut short (``"``, ``"m``, ... ``"mode``), the longest first."""
    cuts = _KEY_CUTS.get(key)
    if cuts is None:
        quoted = orjson.dumps(key)
        cuts = _KEY_CUTS[key] = tuple(quoted[:n] for n in range(len(quoted) - 1, 0, -1))
    return cuts


def rename_answer(
    raw: bytes, obj: dict[str, Any], key: str, public: str
) -> tuple[bytes, dict[str, Any]]:
    """A plain answer ``raw`` (whose parse is ``obj``) with its top-level ``key``
    naming ``public``, and that parse. The value is replaced in place, the other
    bytes kept; when several ``key`` keys are in the answer (a tool's input
    named so), the one whose replacement parses as the renamed answer. Only
    when none can be edited in place is the answer re-encoded."""
    value = obj.get(key)
    if not isinstance(value, str) or value == public:
        return raw, obj
    renamed = {**obj, key: public}
    literal = orjson.dumps(public)
    keys = [m for m in _key_pattern(key).finditer(raw) if raw[m.start() - 1 : m.start()] != b"\\"]
    for match in keys:
        start = match.end()
        if raw[start : start + 1] != b'"':
            continue
        end = _STRING_END.search(raw, start + 1)
        if end is None:
            continue
        edited = raw[:start] + literal + raw[end.end() :]
        if len(keys) == 1:  # the one such key of the answer is its top-level one
            return edited, renamed
        with contextlib.suppress(orjson.JSONDecodeError):
            if orjson.loads(raw[start : end.end()]) == value and orjson.loads(edited) == renamed:
                return edited, renamed
    return orjson.dumps(renamed), renamed


class ModelRewriter:
    """Renames the model in a native stream's bytes as they are relayed: each
    ``"<key>": "<vendor id>"`` becomes ``"<key>": "<public>"``, all other bytes
    as they came. ``feed`` returns what may go out now: a chunk less only the
    tail that may still become such a field once the next chunk is in (a
    pattern cut by a chunk boundary), held until then; ``close`` returns the
    held tail at the stream's end, as it came.

    The vendor ids: with ``holder`` None (Gemini's ``modelVersion``) any string
    value; else those ``learn`` reads from the first events, at
    ``event[holder][key]`` (Anthropic's ``message_start``, the Responses API's
    ``response.created``), before those events' bytes go out."""

    __slots__ = (
        "_cuts",
        "_key",
        "_literals",
        "_once",
        "_pattern",
        "_pending",
        "_prev",
        "_public",
        "holder",
        "key",
        "learned",
        "public",
    )

    def __init__(self, key: str, public: str, holder: str | None, once: bool = False):
        self.key = key
        self.public = public
        self.holder = holder
        self.learned: set[str] = set()
        self._once = once
        self._key = orjson.dumps(key)
        self._cuts = _key_cuts(key)
        self._public = orjson.dumps(public)
        # The vendor ids as JSON strings; None: any string (then always compiled).
        self._literals: list[bytes] | None = None if holder is None else []
        self._pattern = None if holder is not None else self._compile()
        self._pending = b""
        self._prev = b""  # its last byte: the one before the next data

    def _compile(self) -> re.Pattern[bytes]:
        literals = None if self._literals is None else tuple(self._literals)
        pattern = _FIELD_PATTERNS.get((self.key, literals))
        if pattern is None:
            values = _ANY_STRING if literals is None else b"|".join(map(re.escape, literals))
            pattern = re.compile(_key_pattern(self.key).pattern + b"(" + values + b")")
            if len(_FIELD_PATTERNS) >= _MAX_FIELD_PATTERNS:
                _FIELD_PATTERNS.clear()
            _FIELD_PATTERNS[(self.key, literals)] = pattern
        return pattern

    @property
    def learning(self) -> bool:
        return self.holder is not None and not self.learned

    def renames(self, value: object) -> bool:
        """Whether the stream's ``value`` of the key reaches the client renamed."""
        return isinstance(value, str) and (self.holder is None or value in self.learned)

    def learn(self, payload: bytes) -> bool:
        """Read the vendor's id from one of the first events' data; True once known."""
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return False
        holder = event.get(self.holder) if isinstance(event, dict) else None
        value = holder.get(self.key) if isinstance(holder, dict) else None
        if not isinstance(value, str):
            return False
        self.learned.add(value)
        if value != self.public and self._literals is not None:  # learning: a list
            self._literals.append(orjson.dumps(value))
            self._pattern = self._compile()
        return True

    def feed(self, chunk: bytes) -> bytes:
        pattern = self._pattern
        if pattern is None:  # nothing to rename (yet)
            return chunk
        data = self._pending + chunk if self._pending else chunk
        parts = None
        last = 0
        if self._key not in data:
            if not data.endswith(self._cuts):  # the common case: out as it came
                self._pending = b""
                self._prev = data
                return data
        else:
            for match in pattern.finditer(data):
                if self._after_backslash(data, match.start()):
                    continue
                if parts is None:
                    parts = []
                parts.append(data[last : match.start(1)])
                parts.append(self._public)
                last = match.end(1)
        cut = self._undecided(data, last)
        if cut < len(data):
            self._pending = data[cut:]
            if cut:
                self._prev = data[cut - 1 : cut]
        else:
            self._pending = b""
            self._prev = data
        if parts is None:
            return data[:cut] if self._pending else data
        if self._once and not self._pending:  # the one event naming the model is done
            self._pattern = None
        parts.append(data[last:cut])
        return b"".join(parts)

    def close(self) -> bytes:
        """The held tail (a field the stream ended inside of), as it came."""
        tail, self._pending = self._pending, b""
        return tail

    def _undecided(self, data: bytes, start: int) -> int:
        """Where the tail of ``data`` from ``start`` on that may still become a
        renamed field begins (``len(data)``: none)."""
        key = self._key
        at = data.rfind(key, start)
        if at >= 0 and not self._after_backslash(data, at) and self._open(data, at + len(key)):
            return at
        end = len(data)
        if data.endswith(self._cuts):  # a key cut short by the end: where, the longest first
            for cut in self._cuts:
                at = end - len(cut)
                if at >= start and data.endswith(cut) and not self._after_backslash(data, at):
                    return at
        return end

    def _after_backslash(self, data: bytes, at: int) -> bool:
        return data[at - 1] == _BACKSLASH if at else self._prev[-1:] == b"\\"

    def _open(self, data: bytes, at: int) -> bool:
        """Whether ``data[at:]``, after a key, may still become its renamed value."""
        end = len(data)
        while at < end and data[at] in _JSON_SPACE:
            at += 1
        if at == end:
            return True
        if data[at] != _COLON:
            return False
        at += 1
        while at < end and data[at] in _JSON_SPACE:
            at += 1
        rest = data[at:]
        if self._literals is None:
            return not rest or (rest[:1] == b'"' and _STRING_END.search(rest, 1) is None)
        return any(len(rest) < len(v) and v.startswith(rest) for v in self._literals)


def model_rewriter(req: CallRequest, protocol: str) -> ModelRewriter:
    """The rewriter of a native stream in ``protocol`` answering ``req``."""
    key, holder, once = _STREAM_FIELDS[protocol]
    return ModelRewriter(key, req.model, holder, once)


def rewrite_model(raw: bytes, body: dict[str, Any], upstream: str) -> bytes:
    """``raw`` (whose parse is ``body``) with its top-level ``model`` set to
    ``upstream``; unchanged bytes when it already is."""
    if body.get("model") == upstream:
        return raw
    keys = list(_MODEL_KEY.finditer(raw))
    # Outside strings "model" followed by a colon is a key; inside a JSON string
    # its quotes would be escaped. One such key must be the top-level one.
    if len(keys) == 1 and isinstance(body.get("model"), str):
        start = keys[0].end()
        if raw[start : start + 1] == b'"':
            end = _STRING_END.search(raw, start + 1)
            if end is not None:
                return raw[:start] + orjson.dumps(upstream) + raw[end.end() :]
    return orjson.dumps({**body, "model": upstream})
