"""Deterministic, readable output text.

A generation is a list of token strings drawn from a fixed word list by a PRNG
seeded with a stable hash of the prompt's token ids plus the request seed and
the choice index, so the same request always yields the same text. Words are
cut into pieces with the tokenizer's rule, so ``completion_tokens`` equals
``count_tokens(text)`` for an untruncated generation.

A tool call (``generate_tool_call``) is as deterministic: its id and arguments
come from the same kind of seed, the arguments from the function's JSON schema,
and its tokens (the arguments' by the tokenizer) are the output. An answer to
tool results starts by quoting them (``results_lead``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import re
import string
from array import array
from dataclasses import dataclass, field

from console.kernel.tokens import RUN_PIECE, pieces

_WORD_TEXT = (
    "the a an of to in on for with by from as at and or but so if then that this these "
    "model token node cache prefix batch queue query answer question system user reply "
    "fast slow small large quick steady clear simple direct careful exact useful local "
    "run runs ran send sends read reads write writes serve serves keep keeps find finds "
    "data value result request stream server client price bill cost time latency "
    "each every some many few more most less all any no one two three four five "
    "is are was were be been has have had can will may would should could must "
    "first last next new old same other own early late good well very also only just "
    "text word line page book note list table chart graph plan step rule case point "
    "we you they it he she our your their its who what when where why how which "
    "make makes made take takes took give gives gave show shows look looks seem seems"
)
WORDS = tuple(_WORD_TEXT.split())
# Natural answer length in tokens when neither max_tokens nor a stop ends it.
NATURAL_MIN, NATURAL_MAX = 24, 160


def _word_pieces(word: str, first_in_text: bool) -> list[str]:
    lead = "" if first_in_text else " "
    head = lead + word[:RUN_PIECE]
    return [head] + [word[i : i + RUN_PIECE] for i in range(RUN_PIECE, len(word), RUN_PIECE)]


# Pieces of each word, precomputed: (lower case, capitalized) x (first in text, later).
_PIECES = [
    (
        (_word_pieces(w, True), _word_pieces(w, False)),
        (_word_pieces(w.capitalize(), True), _word_pieces(w.capitalize(), False)),
    )
    for w in WORDS
]


def prompt_seed(prompt_ids: list[int], seed: int | None, index: int) -> int:
    raw = array("I", prompt_ids).tobytes()
    digest = hashlib.blake2b(raw, digest_size=8, salt=b"sim-text").digest()
    return int.from_bytes(digest, "little") ^ ((seed or 0) * 1_000_003 + index)


def natural_tokens(rng: random.Random) -> int:
    return rng.randint(NATURAL_MIN, NATURAL_MAX)


def generate_pieces(rng: random.Random, limit: int, lead: list[str] | None = None) -> list[str]:
    """Up to ``limit`` token strings of sentence-like text (after the ``lead`` pieces)."""
    out: list[str] = list(lead or ())
    sentence_left = 0
    draw = rng.random
    count = len(_PIECES)
    while len(out) < limit:
        if sentence_left == 0:
            if out:
                out.append(".")
                if len(out) >= limit:
                    break
            sentence_left = 5 + int(draw() * 10)
            forms = _PIECES[int(draw() * count)][1]
        else:
            forms = _PIECES[int(draw() * count)][0]
        out.extend(forms[1] if out else forms[0])
        sentence_left -= 1
        if sentence_left > 2 and draw() < 0.1:
            out.append(",")
    return out[:limit]


@dataclass
class Generation:
    """One choice's output: the streamed deltas, the token count billed, the finish."""

    deltas: list[str]
    completion_tokens: int
    finish_reason: str
    # A tool call answer: {"id", "name"}; its arguments are the deltas.
    tool_call: dict | None = None
    # The stop string that ended the text, if one did (Anthropic reports it).
    stop_sequence: str | None = None
    # Parallel calls after ``tool_call`` (``also_calls``): ({"id", "name"}, the index
    # of the delta where its arguments start).
    more_calls: list[tuple[dict, int]] = field(default_factory=list)

    def calls(self) -> list[tuple[dict, str]]:
        """Each tool call with its arguments' text, in order."""
        if self.tool_call is None:
            return []
        starts = [(self.tool_call, 0), *self.more_calls]
        ends = [start for _, start in starts[1:]] + [len(self.deltas)]
        return [
            (call, "".join(self.deltas[start:end]))
            for (call, start), end in zip(starts, ends, strict=True)
        ]

    def call_at(self, step: int) -> tuple[int, dict | None]:
        """The index of the call delta ``step`` belongs to, and the call when its
        arguments start there (None otherwise)."""
        for k in range(len(self.more_calls), 0, -1):
            call, start = self.more_calls[k - 1]
            if step >= start:
                return k, call if step == start else None
        return 0, None

    @property
    def text(self) -> str:
        return "".join(self.deltas)


def generate(
    prompt_ids: list[int],
    *,
    max_tokens: int,
    seed: int | None = None,
    index: int = 0,
    stop: tuple[str, ...] = (),
    ignore_eos: bool = False,
    lead: str = "",
    said: str | None = None,
) -> Generation:
    """The choice's text for this prompt, starting with ``lead`` when given, or
    exactly ``said`` (a scripted answer, ``tool_plan._script``). Ends at
    ``max_tokens`` ("length"), at a stop string ("stop", the stop text itself left out,
    as vLLM does) or at the natural end ("stop")."""
    if said is not None:
        out = pieces(said)
        if len(out) > max_tokens:
            return Generation(out[:max_tokens], max_tokens, "length")
        return Generation(out, len(out), "stop")
    rng = random.Random(prompt_seed(prompt_ids, seed, index))  # noqa: S311 - reproducible text
    natural = natural_tokens(rng)
    start = pieces(lead) if lead else []
    limit = max_tokens if ignore_eos else min(max_tokens, max(natural, len(start) + 8))
    pieces_out = generate_pieces(rng, limit, start)
    finish = "length" if len(pieces_out) >= max_tokens else "stop"
    if stop:
        cut = _apply_stop(pieces_out, stop)
        if cut is not None:
            return cut
    return Generation(pieces_out, len(pieces_out), finish)


# -- thinking ------------------------------------------------------------------------------

THINKING_INDEX = 0x5EED  # the thinking text's draw differs from every choice's


def generate_thinking(prompt_ids: list[int], *, budget: int, seed: int | None = None) -> Generation:
    """The reasoning that comes before an answer (Anthropic thinking blocks, Gemini
    thoughts): text drawn like an answer, from another seed, at most ``budget`` tokens."""
    return generate(prompt_ids, max_tokens=max(1, budget), seed=seed, index=THINKING_INDEX)


def thinking_signature(text: str) -> str:
    """A stable opaque signature of a thinking text (as vendors sign theirs)."""
    digest = hashlib.blake2b(text.encode(), digest_size=48, salt=b"sim-sig").digest()
    return base64.b64encode(digest).decode()


# -- tool calls ------------------------------------------------------------------------------

RESULT_TOKENS = 24  # how much of each tool result the answer quotes


def results_lead(results: list[tuple[str | None, str]]) -> str:
    """The opening of an answer to tool results, quoting each (shortened)."""
    parts = []
    for name, result in results:
        quoted = "".join(pieces(" ".join(result.split()))[:RESULT_TOKENS]).strip() or "nothing"
        parts.append(f"the result of {name} is {quoted}" if name else f"the tool said {quoted}")
    text = " and ".join(parts)
    return text[:1].upper() + text[1:]


_ID_CHARS = string.ascii_letters + string.digits
_STOP_WORDS = frozenset(WORDS)
MAX_SCHEMA_DEPTH = 8


# The key of a function definition that carries a scripted step's arguments
# (``tool_plan._script``): ``generate_tool_call`` uses them as they are.
SCRIPTED_ARGUMENTS = "sim_scripted_arguments"


def generate_tool_call(
    prompt_ids: list[int],
    function: dict,
    *,
    words: str,
    max_tokens: int,
    seed: int | None = None,
    index: int = 0,
) -> Generation:
    """One call of ``function`` with arguments built from its JSON schema: the required
    properties (all of them when the schema lists none as required), strings drawn from
    the words of ``words`` (the user's message; proper nouns first), small numbers, the
    first value of an enum. The arguments' tokens are the output; past ``max_tokens``
    they are cut ("length"), as a model's would be."""
    rng = random.Random(prompt_seed(prompt_ids, seed, index) ^ 0x7001)  # noqa: S311
    call_id = "call_" + "".join(rng.choice(_ID_CHARS) for _ in range(24))
    schema = function.get("parameters") or {"type": "object", "properties": {}}
    arguments = function.get(SCRIPTED_ARGUMENTS)
    if arguments is None:
        arguments = _ArgumentBuilder(rng, schema, words).value(schema, 0)
    if not isinstance(arguments, dict):
        arguments = {}
    text = json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)
    out = pieces(text)
    finish = "tool_calls"
    if len(out) > max_tokens:
        out, finish = out[:max_tokens], "length"
    return Generation(out, len(out), finish, {"id": call_id, "name": function["name"]})


# What ``response_format: json_object`` (JSON, no schema) answers: an object.
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}


def generate_json(
    prompt_ids: list[int],
    schema: dict | None,
    *,
    words: str,
    max_tokens: int,
    seed: int | None = None,
    index: int = 0,
) -> Generation:
    """JSON output (OpenAI's ``response_format``, Gemini's ``responseMimeType``):
    a value of ``schema`` built as tool arguments are (``generate_tool_call``), or
    with no schema an object whose ``answer`` is the text this prompt would get.
    Valid JSON unless ``max_tokens`` cuts it ("length"), as a model's would be."""
    if schema is None:
        text = generate(prompt_ids, max_tokens=max_tokens, seed=seed, index=index).text
        out = pieces(json.dumps({"answer": text.strip()}, ensure_ascii=False))
    else:
        rng = random.Random(prompt_seed(prompt_ids, seed, index) ^ 0x150A)  # noqa: S311
        value = _ArgumentBuilder(rng, schema, words).value(schema, 0)
        out = pieces(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
    if len(out) > max_tokens:
        return Generation(out[:max_tokens], max_tokens, "length")
    return Generation(out, len(out), "stop")


class _ArgumentBuilder:
    def __init__(self, rng: random.Random, root: dict, words: str):
        self.rng = rng
        self.root = root
        found = [w for w in re.findall(r"[^\W\d_][\w'-]*", words) if len(w) > 2]
        found = [w for w in found if w.lower() not in _STOP_WORDS]
        proper = [w for w in found if w[0].isupper()]
        self.words = proper or found or list(WORDS[40:80])

    def value(self, schema: object, depth: int):
        if not isinstance(schema, dict) or depth > MAX_SCHEMA_DEPTH:
            return None
        ref = schema.get("$ref")
        if isinstance(ref, str):
            return self.value(self._resolve(ref), depth + 1)
        if "const" in schema:
            return schema["const"]
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return enum[0]
        for key in ("anyOf", "oneOf", "allOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                usable = [
                    o for o in options if not (isinstance(o, dict) and o.get("type") == "null")
                ]
                return self.value((usable or options)[0], depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind is None:
            kind = (
                "object" if "properties" in schema else "array" if "items" in schema else "string"
            )
        return getattr(self, "_" + kind, self._string)(schema, depth)

    def _resolve(self, ref: str) -> object:
        node: object = self.root
        if not ref.startswith("#/"):
            return None
        for part in ref[2:].split("/"):
            node = node.get(part) if isinstance(node, dict) else None
        return node

    def _object(self, schema: dict, depth: int) -> dict:
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            return {}
        required = schema.get("required")
        names = required if isinstance(required, list) else list(properties)
        return {
            name: self.value(properties.get(name, {}), depth + 1)
            for name in names
            if isinstance(name, str)
        }

    def _array(self, schema: dict, depth: int) -> list:
        low = schema.get("minItems")
        count = max(1, low if isinstance(low, int) else 1)
        high = schema.get("maxItems")
        if isinstance(high, int):
            count = min(count, high)
        return [
            self.value(schema.get("items", {"type": "string"}), depth + 1) for _ in range(count)
        ]

    def _string(self, schema: dict, depth: int) -> str:
        word = self.rng.choice(self.words)
        fmt = schema.get("format")
        if fmt == "date":
            return "2025-01-15"
        if fmt == "date-time":
            return "2025-01-15T09:30:00Z"
        if fmt == "email":
            return f"{word.lower()}@example.com"
        if fmt in ("uri", "url"):
            return f"https://example.com/{word.lower()}"
        return word

    def _bounds(self, schema: dict, low: float, span: float) -> tuple[float, float]:
        lo = schema.get("minimum", schema.get("exclusiveMinimum", low))
        hi = schema.get("maximum", schema.get("exclusiveMaximum", lo + span))
        lo = lo if isinstance(lo, int | float) else low
        hi = hi if isinstance(hi, int | float) and hi >= lo else lo + span
        return lo, hi

    def _integer(self, schema: dict, depth: int) -> int:
        lo, hi = self._bounds(schema, 1, 9)
        lo = int(lo) + (1 if "exclusiveMinimum" in schema and "minimum" not in schema else 0)
        hi = int(hi) - (1 if "exclusiveMaximum" in schema and "maximum" not in schema else 0)
        return self.rng.randint(lo, max(lo, min(hi, lo + 9)))

    def _number(self, schema: dict, depth: int) -> float:
        lo, hi = self._bounds(schema, 0, 100)
        return round(self.rng.uniform(lo, hi), 1)

    def _boolean(self, schema: dict, depth: int) -> bool:
        return self.rng.random() < 0.5

    def _null(self, schema: dict, depth: int) -> None:
        return None


def _apply_stop(pieces: list[str], stop: tuple[str, ...]) -> Generation | None:
    text = "".join(pieces)
    hits = [(pos, s) for s in stop if s and (pos := text.find(s)) >= 0]
    if not hits:
        return None
    pos, hit = min(hits, key=lambda found: found[0] + len(found[1]))
    end_of_stop = pos + len(hit)
    deltas: list[str] = []
    offset = 0
    used = 0
    for piece in pieces:
        used += 1
        keep = piece[: max(0, pos - offset)]
        if keep:
            deltas.append(keep)
        offset += len(piece)
        if offset >= end_of_stop:
            break
    return Generation(deltas, used, "stop", stop_sequence=hit)
