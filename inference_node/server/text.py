"""Deterministic, readable output text.

A generation is a list of token strings drawn from a fixed word list by a PRNG
seeded with a stable hash of the prompt's token ids plus the request seed and
the choice index, so the same request always yields the same text. Words are
cut into pieces with the tokenizer's rule, so ``completion_tokens`` equals
``count_tokens(text)`` for an untruncated generation.
"""

from __future__ import annotations

import hashlib
import random
from array import array
from dataclasses import dataclass

from .tokenizer import RUN_PIECE

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


def generate_pieces(rng: random.Random, limit: int) -> list[str]:
    """Up to ``limit`` token strings of sentence-like text."""
    out: list[str] = []
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
) -> Generation:
    """The choice's text for this prompt. Ends at ``max_tokens`` ("length"), at a stop
    string ("stop", the stop text itself left out, as vLLM does) or at the natural end
    ("stop")."""
    rng = random.Random(prompt_seed(prompt_ids, seed, index))  # noqa: S311 - reproducible text
    natural = natural_tokens(rng)
    limit = max_tokens if ignore_eos else min(max_tokens, natural)
    pieces = generate_pieces(rng, limit)
    finish = "length" if len(pieces) >= max_tokens else "stop"
    if stop:
        cut = _apply_stop(pieces, stop)
        if cut is not None:
            return cut
    return Generation(pieces, len(pieces), finish)


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
    return Generation(deltas, used, "stop")
