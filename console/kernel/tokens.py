"""The token rule and chat template shared by the gateway (prompt estimates,
TPM counting, partial-stream billing) and the bundled simulator (what it bills):
a deterministic stand-in for a BPE vocabulary. Neutral ground: it imports no app.

Rule (the gateway uses this module to estimate prompt tokens the same way):

* Whitespace attaches to the token that follows it; whitespace at the very end
  of a text is one token of its own.
* Each CJK character (CJK ideographs and punctuation, Hiragana, Katakana,
  Hangul, full-width forms) is one token.
* Each maximal run of other letters and digits is ``ceil(len / 4)`` tokens:
  the run is cut into pieces of four characters.
* Every other non-space character (punctuation, symbols, ``_``, emoji) is one token.

Token ids are the first four bytes of BLAKE2b of the piece (leading whitespace
included), folded into ``[FIRST_TEXT_ID, VOCAB_SIZE)``; ids below
``FIRST_TEXT_ID`` are reserved for the chat template's markers.

Chat template (``chat_prompt_tokens``): for each message
``<|start|>`` + tokens of the role (and of ``name`` if set) + ``<|sep|>`` +
tokens of the content (text parts joined by newlines) + ``<|end|>``; then the
generation prompt ``<|start|>`` + ``assistant`` + ``<|sep|>``. Each marker is
one token, so a message costs its content and role tokens plus three, and the
generation prompt adds three more (``assistant`` is one token).

Media (images, PDFs and other documents) cost ``media_tokens(n)`` for ``n``
bytes of decoded data: ``MEDIA_BASE_TOKENS`` plus one per ``MEDIA_BYTES_PER_TOKEN``
bytes (a part given only by URL costs the base). Their ids are the marker
``MEDIA_ID`` followed by ids drawn from a hash of the data, so the same picture
gives the same ids (and hits a prefix cache). In OpenAI chat content the media
parts are ``image_url`` (a ``data:`` URL or a URL), ``input_audio`` and
``file`` (``file_data`` as a ``data:`` URL or base64); ``chat_prompt_tokens``
counts them after the message's text, in order.
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import lru_cache

VOCAB_SIZE = 200_000
START_ID, SEP_ID, END_ID = 1, 2, 3
MEDIA_ID = 4
MEDIA_BASE_TOKENS = 85
MEDIA_BYTES_PER_TOKEN = 750
FIRST_TEXT_ID = 16
RUN_PIECE = 4

_WIDE = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u2e80-\u9fff"  # CJK radicals, punctuation, Hiragana, Katakana, compat Jamo, ideographs
    "\ua960-\ua97f"  # Hangul Jamo extended A
    "\uac00-\ud7ff"  # Hangul syllables and Jamo extended B
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uff00-\uffef"  # half-width and full-width forms
    "\U00020000-\U0003ffff"  # CJK extensions B and later
)
_PIECES = re.compile(rf"\s*(?:[{_WIDE}]|[^\W_{_WIDE}]+|\S)|\s+")


@lru_cache(maxsize=65536)
def _piece_id(piece: str) -> int:
    digest = hashlib.blake2b(piece.encode("utf-8", "surrogatepass"), digest_size=4).digest()
    return FIRST_TEXT_ID + int.from_bytes(digest, "little") % (VOCAB_SIZE - FIRST_TEXT_ID)


def _run_length(match: str) -> int:
    """How many letters/digits a piece has after its leading whitespace."""
    return len(match.lstrip())


def pieces(text: str) -> list[str]:
    """The token strings of ``text``; joined they give back ``text`` exactly."""
    out: list[str] = []
    for match in _PIECES.findall(text):
        body = match.lstrip()
        if len(body) <= RUN_PIECE or not body[0].isalnum():
            out.append(match)
            continue
        lead = match[: len(match) - len(body)]
        out.append(lead + body[:RUN_PIECE])
        out.extend(body[i : i + RUN_PIECE] for i in range(RUN_PIECE, len(body), RUN_PIECE))
    return out


def count_tokens(text: str) -> int:
    """Number of tokens in ``text`` by the rule in the module docstring."""
    total = 0
    for match in _PIECES.findall(text):
        size = _run_length(match)
        total += (size + RUN_PIECE - 1) // RUN_PIECE if size > 1 else 1
    return total


def tokenize(text: str) -> list[int]:
    """Deterministic token ids of ``text`` (stable across processes and runs)."""
    return [_piece_id(piece) for piece in pieces(text)]


def content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        ]
        return "\n".join(texts)
    return ""


def media_tokens(data_bytes: int) -> int:
    """Tokens of one image or document of ``data_bytes`` decoded bytes (0: given by URL)."""
    return MEDIA_BASE_TOKENS + max(0, data_bytes) // MEDIA_BYTES_PER_TOKEN


def _data_of(value: object) -> str:
    """The base64 data of a ``data:`` URL (or of bare base64), "" for a plain URL."""
    if not isinstance(value, str):
        return ""
    if value.startswith("data:"):
        return value.partition(",")[2]
    if value.startswith(("http://", "https://", "gs://", "file-")):
        return ""
    return value


def media_parts(content: object) -> list[str]:
    """The base64 data of each media part of OpenAI chat ``content``, in order
    ("" for a part given by URL or file id)."""
    if not isinstance(content, list):
        return []
    out = []
    for part in content:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "image_url":
            image = part.get("image_url")
            out.append(_data_of(image.get("url") if isinstance(image, dict) else image))
        elif kind == "input_audio":
            audio = part.get("input_audio")
            out.append(_data_of(audio.get("data") if isinstance(audio, dict) else ""))
        elif kind == "file":
            file = part.get("file")
            out.append(_data_of(file.get("file_data") if isinstance(file, dict) else ""))
    return out


def media_ids(data: str) -> list[int]:
    """Token ids of one media part (its base64 ``data``; "" for a URL)."""
    size = len(data) * 3 // 4
    count = media_tokens(size)
    seed = hashlib.blake2b(data.encode("ascii", "replace"), digest_size=8).digest()
    base = int.from_bytes(seed, "little")
    span = VOCAB_SIZE - FIRST_TEXT_ID
    return [MEDIA_ID] + [FIRST_TEXT_ID + (base + i * 7919) % span for i in range(count - 1)]


def content_media_tokens(content: object) -> int:
    """How many tokens the media parts of OpenAI chat ``content`` cost."""
    return sum(media_tokens(len(data) * 3 // 4) for data in media_parts(content))


def chat_prompt_tokens(messages: list[dict]) -> list[int]:
    """Token ids of a chat prompt under the documented template, generation prompt included."""
    ids: list[int] = []
    for message in messages:
        ids.append(START_ID)
        ids.extend(tokenize(str(message.get("role", ""))))
        name = message.get("name")
        if isinstance(name, str) and name:
            ids.extend(tokenize(" " + name))
        ids.append(SEP_ID)
        content = message.get("content")
        ids.extend(tokenize(content_text(content)))
        if type(content) is list:
            for data in media_parts(content):
                ids.extend(media_ids(data))
        ids.append(END_ID)
    ids.append(START_ID)
    ids.extend(tokenize("assistant"))
    ids.append(SEP_ID)
    return ids


def template_messages(messages: list[dict], tools: list | None = None) -> list[dict]:
    """The messages as the chat template renders them (``tokenizer.chat_prompt_tokens``
    takes the result): the tool definitions, when there are any, as a leading message
    of role ``tools`` whose content is their compact JSON, and an assistant's tool
    calls as the compact JSON list of their ``{"name", "arguments"}`` after its text.
    The gateway estimates prompt tokens with the same function."""
    if not tools and not any(isinstance(m, dict) and m.get("tool_calls") for m in messages):
        return messages
    out: list[dict] = []
    if tools:
        out.append({"role": "tools", "content": _compact(tools)})
    for message in messages:
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        if calls and isinstance(calls, list):
            shown = [
                {"name": fn.get("name"), "arguments": fn.get("arguments")}
                for call in calls
                if isinstance(call, dict) and isinstance(fn := call.get("function"), dict)
            ]
            text = content_text(message.get("content")) + _compact(shown)
            message = {**message, "content": text}
        out.append(message)
    return out


def _compact(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
