"""Gemini ``contents`` → the pivot's OpenAI messages.

* ``user`` turns are user messages, ``model`` turns assistant messages. A
  ``functionCall`` part is an assistant tool call with a gateway id
  (``call_<turn>_<n>``, or the part's own ``id``), and a ``functionResponse``
  part answers the earliest open call of that name (or its ``id``) as a tool
  message whose content is the response's compact JSON.
* ``thought`` parts of earlier model turns are dropped (as Gemini does with
  thoughts it gets back), and so are thought signatures.
* Media in user turns: ``inlineData`` images become ``image_url`` parts with a
  ``data:`` URL, WAV and MP3 audio ``input_audio`` parts, anything else (PDFs,
  text, video, other audio) ``file`` parts with a ``data:`` URL; ``fileData``
  given by an http(s) URL of an image becomes an ``image_url`` with that URL.
  A user turn with media has a list of parts as content (text-only turns keep
  one string, their texts joined by newlines).
* What the pivot cannot carry is left out of it and recorded as
  untranslatable (``CallRequest.untranslatable``): other ``fileData`` (Gemini
  Files API and Cloud Storage URIs, non-image URLs), media in model turns or
  in function responses, ``executableCode`` and ``codeExecutionResult`` parts.
"""

from __future__ import annotations

import mimetypes
import re
from collections.abc import Iterator
from typing import Any

from gateway_bridge.protocols.base import dumps, invalid
from gateway_bridge.protocols.checks import ID_CHARS
from gateway_bridge.protocols.gemini.request import (
    CONTENT,
    NAME,
    PART,
    array,
    bad,
    boolean,
    call_args,
    fields,
    join,
    missing_responses,
    part_text,
    string,
)

_BASE64 = re.compile(r"[A-Za-z0-9+/_-]*={0,2}")
_URL_SAFE = str.maketrans("-_", "+/")
_AUDIO = {  # the audio the pivot's input_audio takes, by MIME type
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/mp3": "mp3",
    "audio/mpeg": "mp3",
}
_MIME = mimetypes.MimeTypes(filenames=())  # the standard library's table only
_CODE_PARTS = {
    "executableCode": "an executable code part",
    "codeExecutionResult": "a code execution result part",
}
BLOB = {"mimeType", "data", "displayName"}
FILE_DATA = {"mimeType", "fileUri", "displayName"}


def _mime(value: object, path: str) -> str:
    mime = string(value, path).strip().lower()
    if "/" not in mime:
        raise bad(path, f'"{mime[:60]}" is not a MIME type.')
    return mime


def _base64(value: object, path: str) -> str:
    data = string(value, path)
    if not _BASE64.fullmatch(data) or len(data.rstrip("=")) % 4 == 1:
        raise invalid(
            f"Invalid value at '{path}' (TYPE_BYTES), Base64 decoding failed.",
            param=path,
            code="invalid_type",
        )
    return data.translate(_URL_SAFE)


def _filename(mime: str, given: object) -> str:
    if isinstance(given, str) and given:
        return given
    return "file" + (_MIME.guess_extension(mime, strict=False) or "")


def inline_part(value: object, path: str) -> dict[str, Any]:
    """An ``inlineData`` blob → the pivot's image, audio or file part."""
    blob = fields(value, path, BLOB)
    for key in ("mimeType", "data"):
        if key not in blob:
            raise bad(join(path, key), f"{join('', key)} is required.")
    mime = _mime(blob["mimeType"], join(path, "mimeType"))
    data = _base64(blob["data"], join(path, "data"))
    if mime.startswith("image/"):
        return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}
    if mime in _AUDIO:
        return {"type": "input_audio", "input_audio": {"data": data, "format": _AUDIO[mime]}}
    name = _filename(mime, blob.get("displayName"))
    return {"type": "file", "file": {"file_data": f"data:{mime};base64,{data}", "filename": name}}


def file_part(value: object, path: str) -> tuple[dict[str, Any] | None, str]:
    """A ``fileData`` reference → (the pivot's image part, or None and why not)."""
    ref = fields(value, path, FILE_DATA)
    if "fileUri" not in ref:
        raise bad(join(path, "fileUri"), "file_uri is required.")
    uri = string(ref["fileUri"], join(path, "fileUri"))
    mime = _mime(ref["mimeType"], join(path, "mimeType")) if "mimeType" in ref else None
    if "generativelanguage.googleapis.com" in uri or uri.startswith("files/"):
        return None, "a file uploaded to the Gemini Files API"
    if not uri.startswith(("https://", "http://")):
        return None, "a file by a URI other vendors cannot read"
    mime = mime or _MIME.guess_type(uri.split("?")[0], strict=False)[0] or ""
    if not mime.startswith("image/"):
        return None, "a file by URL that is not an image"
    return {"type": "image_url", "image_url": {"url": uri}}, ""


class Turns:
    """Gemini contents → OpenAI messages, pairing function calls with responses."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.open: list[tuple[str, str]] = []  # (call id, function name) not answered yet
        self.lost: list[str] = []  # what the pivot cannot carry, as "<path>: <what>"

    def add(self, index: int, content: object) -> None:
        path = f"contents[{index}]"
        content = fields(content, path, CONTENT)
        role = content.get("role") or "user"
        role = string(role, f"{path}.role")
        if role not in ("user", "model", "function", "tool"):
            raise bad(f"{path}.role", f'Please use a valid role: user, model (got "{role}").')
        parts = array(content.get("parts", []), f"{path}.parts")
        if not parts:
            raise bad(f"{path}.parts", "contents.parts must not be empty.")
        if role == "model":
            self._model(index, parts)
        else:
            self._user(index, parts)

    def _parts(
        self, index: int, parts: list[Any], *, media: bool
    ) -> Iterator[tuple[str, dict[str, Any], dict[str, Any] | None]]:
        """Each part (validated) with its path and its media as a pivot part
        (None when it has none, or when the pivot cannot carry it: then it is
        recorded as untranslatable)."""
        for i, part in enumerate(parts):
            ppath = f"contents[{index}].parts[{i}]"
            part = fields(part, ppath, PART)
            for name, what in _CODE_PARTS.items():
                if part.get(name) is not None:
                    self.lost.append(f"{join(ppath, name)}: {what}")
            pivot, why, name = None, "media in a model turn", ""
            if part.get("inlineData") is not None:
                name = "inlineData"
                pivot = inline_part(part["inlineData"], join(ppath, name))
            elif part.get("fileData") is not None:
                name = "fileData"
                pivot, why = file_part(part["fileData"], join(ppath, name))
                why = why or "media in a model turn"
            if name and (pivot is None or not media):
                self.lost.append(f"{join(ppath, name)}: {why}")
                pivot = None
            yield ppath, part, pivot

    def _model(self, index: int, parts: list[Any]) -> None:
        if self.open:
            raise missing_responses(index, self.open)
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for ppath, part, _ in self._parts(index, parts, media=False):
            if part.get("thought") is not None and boolean(part["thought"], f"{ppath}.thought"):
                continue  # earlier thoughts are not sent back to the model
            text = part_text(part, ppath)
            if text:
                texts.append(text)
            if part.get("functionCall") is not None:
                call_id = f"call_{index}_{len(calls)}"
                calls.append(self._call(part["functionCall"], f"{ppath}.function_call", call_id))
        if not texts and not calls:
            return
        message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
        if calls:
            message["tool_calls"] = calls
        self.messages.append(message)

    def _call(self, value: object, fpath: str, default_id: str) -> dict[str, Any]:
        call = fields(value, fpath, {"id", "name", "args"})
        if "name" not in call:
            raise bad(f"{fpath}.name", "Name cannot be empty.")
        name = string(call["name"], f"{fpath}.name")
        if not NAME.match(name):
            raise bad(f"{fpath}.name", f"Invalid function name: {name!r}.")
        own = call.get("id")
        call_id = ID_CHARS.sub("", string(own, f"{fpath}.id")) if own else ""
        call_id = call_id or default_id
        arguments = dumps(call_args(call.get("args"), f"{fpath}.args")).decode()
        self.open.append((call_id, name))
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }

    def _user(self, index: int, parts: list[Any]) -> None:
        content: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        for ppath, part, media in self._parts(index, parts, media=True):
            text = part_text(part, ppath)
            if text:
                content.append({"type": "text", "text": text})
            if media is not None:
                content.append(media)
            if part.get("functionCall") is not None:
                raise bad(
                    f"{ppath}.function_call", "function calls are only allowed in model turns."
                )
            if part.get("functionResponse") is not None:
                results.append(self._response(part["functionResponse"], f"{ppath}"))
        if self.open and not results:
            raise missing_responses(index - 1, self.open)
        self.messages.extend(results)
        if any(p["type"] != "text" for p in content):
            self.messages.append({"role": "user", "content": content})
        elif content:
            self.messages.append({"role": "user", "content": "\n".join(p["text"] for p in content)})

    def _response(self, value: object, ppath: str) -> dict[str, Any]:
        fpath = f"{ppath}.function_response"
        response = fields(
            value, fpath, {"id", "name", "response", "willContinue", "scheduling", "parts"}
        )
        if "name" not in response:
            raise bad(f"{fpath}.name", "Name cannot be empty.")
        name = string(response["name"], f"{fpath}.name")
        own = response.get("id")
        wanted = ID_CHARS.sub("", string(own, f"{fpath}.id")) if own else None
        for i, (call_id, call_name) in enumerate(self.open):
            if (wanted and call_id == wanted) or (not wanted and call_name == name):
                del self.open[i]
                break
        else:
            raise bad(
                fpath,
                f"function response '{name}' does not answer a function call of the previous "
                "model turn.",
            )
        body = response.get("response")
        if body is not None and not isinstance(body, dict):
            raise bad(f"{fpath}.response", "response must be an object (a JSON struct)")
        if response.get("parts"):
            self.lost.append(f"{fpath}.parts: media in a function response")
        return {
            "role": "tool",
            "tool_call_id": call_id,
            "content": dumps(body or {}).decode(),
        }
