"""Anthropic ``image`` and ``document`` blocks → OpenAI chat content parts of
the pivot.

    Anthropic block                         pivot part
    image, base64 source                    image_url with a data: URL
    image, url source                       image_url with the URL
    document, base64 source (a PDF)         file: {"filename", "file_data": a data: URL}
    document, url source                    file: {"filename", "file_data": the URL}

(``file_data`` of a PDF is ``data:application/pdf;base64,...``.)
    document, text source                   text
    document, content source                its text and image blocks, as parts
    image or document, file source          untranslatable (a Files API id)

A document's ``title`` is the file's name (``DEFAULT_FILENAME`` when it has
none), its ``context`` a text part before it; asking for ``citations`` is
untranslatable (the pivot cannot ask for them). ``cache_control`` stays out of
the pivot, as everywhere.
"""

from __future__ import annotations

from typing import Any

from gateway_bridge.protocols.anthropic.request import (
    array,
    bad,
    block_type,
    dictionary,
    string,
    text_block,
)

IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
DEFAULT_FILENAME = "document.pdf"


def _source(block: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    if "source" not in block:
        raise bad(f"{path}.source", "Field required")
    source = dictionary(block["source"], f"{path}.source")
    if "type" not in source:
        raise bad(f"{path}.source.type", "Field required")
    return source, string(source["type"], f"{path}.source.type")


def _field(source: dict[str, Any], name: str, path: str) -> str:
    if name not in source:
        raise bad(f"{path}.source.{name}", "Field required")
    return string(source[name], f"{path}.source.{name}")


def image_part(
    block: dict[str, Any], path: str, untranslatable: list[str]
) -> dict[str, Any] | None:
    """An ``image`` block → an ``image_url`` part (None when untranslatable)."""
    source, kind = _source(block, path)
    if kind == "base64":
        media = _field(source, "media_type", path)
        if media not in IMAGE_TYPES:
            raise bad(
                f"{path}.source.media_type",
                "Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'",
            )
        data = _field(source, "data", path)
        return {"type": "image_url", "image_url": {"url": f"data:{media};base64,{data}"}}
    if kind == "url":
        return {"type": "image_url", "image_url": {"url": _field(source, "url", path)}}
    if kind == "file":
        untranslatable.append(f"{path}: image blocks from an uploaded file (file_id)")
        return None
    raise bad(f"{path}.source.type", "Input should be 'base64', 'url' or 'file'")


def _file(data: str, title: object) -> dict[str, Any]:
    name = title if isinstance(title, str) and title else DEFAULT_FILENAME
    return {"type": "file", "file": {"filename": name, "file_data": data}}


def _content_source(
    source: dict[str, Any], path: str, untranslatable: list[str]
) -> list[dict[str, Any]]:
    if "content" not in source:
        raise bad(f"{path}.source.content", "Field required")
    content = source["content"]
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    parts: list[dict[str, Any]] = []
    for i, item in enumerate(array(content, f"{path}.source.content")):
        ipath = f"{path}.source.content.{i}"
        item, kind = block_type(item, ipath)
        if kind == "text":
            parts.append({"type": "text", "text": text_block(item, ipath)})
        elif kind == "image":
            part = image_part(item, ipath, untranslatable)
            if part is not None:
                parts.append(part)
        else:
            raise bad(f"{ipath}.type", "Input should be 'text' or 'image'")
    return parts


def document_parts(
    block: dict[str, Any], path: str, untranslatable: list[str]
) -> list[dict[str, Any]]:
    """A ``document`` block → pivot parts (none when untranslatable)."""
    source, kind = _source(block, path)
    title = block.get("title")
    if title is not None:
        string(title, f"{path}.title")
    citations = block.get("citations")
    if isinstance(citations, dict) and citations.get("enabled") is True:
        untranslatable.append(f"{path}: citations")
    parts: list[dict[str, Any]] = []
    context = block.get("context")
    if context is not None and string(context, f"{path}.context"):
        parts.append({"type": "text", "text": context})
    if kind == "base64":
        media = _field(source, "media_type", path)
        if media != "application/pdf":
            raise bad(f"{path}.source.media_type", "Input should be 'application/pdf'")
        data = _field(source, "data", path)
        parts.append(_file(f"data:{media};base64,{data}", title))
    elif kind == "url":
        parts.append(_file(_field(source, "url", path), title))
    elif kind == "text":
        if source.get("media_type", "text/plain") != "text/plain":
            raise bad(f"{path}.source.media_type", "Input should be 'text/plain'")
        text = _field(source, "data", path)
        if text:
            parts.append({"type": "text", "text": text})
    elif kind == "content":
        parts.extend(_content_source(source, path, untranslatable))
    elif kind == "file":
        untranslatable.append(f"{path}: document blocks from an uploaded file (file_id)")
        return []
    else:
        raise bad(
            f"{path}.source.type", "Input should be 'base64', 'url', 'text', 'content' or 'file'"
        )
    return parts
