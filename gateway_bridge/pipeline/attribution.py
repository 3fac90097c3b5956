"""Stage 3, after the body is parsed: the call's cost attribution, its tags
(``x-gateway-tags``) and end user, checked against the limits
(``usage.attribution_rules``) and the key's required tag keys. A violation is a
400 naming the header or field, before anything is reserved or sent
upstream. Apart from ``body`` because the large-body parse workers import
that module without Django set up.
"""

from __future__ import annotations

from typing import Any

from gateway_bridge.pipeline.adapters import parser
from gateway_bridge.pipeline.call import NO_TAGS, Call
from gateway_bridge.protocols.base import INVALID_REQUEST, GatewayError
from usage.facade import (
    END_USER_HEADER,
    TAGS_HEADER,
    AttributionError,
    clean_end_user,
    missing_required,
    parse_tags_header,
)


def _utf8(value: str, source: str) -> str:
    """A header's value as the client wrote it: the server decodes header
    bytes as Latin-1; tags and end users are UTF-8."""
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        raise AttributionError(
            f"{source} is not valid UTF-8.", source=source, code="invalid_header_encoding"
        ) from None


def _body_field(data: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path`` in the parsed body (None when absent)."""
    for name in path:
        if type(data) is not dict:
            return None
        data = data.get(name)
    return data if path else None


def attribute(call: Call, data: Any, headers: dict[str, str]) -> None:
    """Set the call's tags and end user from ``headers`` and the parsed body.

    The end user: the ``x-gateway-end-user`` header when it is present and not
    blank (it overrides the body), else the protocol's body field
    (``END_USER_FIELD``: OpenAI ``user``, Anthropic ``metadata.user_id``;
    Gemini has none). The body itself is never changed: a body field still
    reaches the upstream as sent."""
    try:
        raw_tags = headers.get(TAGS_HEADER)
        tags = parse_tags_header(_utf8(raw_tags, TAGS_HEADER)) if raw_tags else NO_TAGS
        header_user = headers.get(END_USER_HEADER, "").strip()
        if header_user:
            end_user = clean_end_user(_utf8(header_user, END_USER_HEADER), source=END_USER_HEADER)
        else:
            path = parser(call.protocol, call.endpoint).END_USER_FIELD
            end_user = clean_end_user(_body_field(data, path), source=".".join(path))
    except AttributionError as exc:
        raise GatewayError(INVALID_REQUEST, exc.code, exc.message, param=exc.source) from None
    required = call.entry.auth.required_tag_keys if call.entry is not None else ()
    if required:
        missing = missing_required(tags, required)
        if missing:
            names = ", ".join(missing)
            raise GatewayError(
                INVALID_REQUEST,
                "missing_required_tags",
                f"This API key requires the tag(s) {names} in the {TAGS_HEADER} header "
                f"(comma-separated key:value pairs, e.g. '{missing[0]}:value').",
                param=TAGS_HEADER,
            )
    call.tags = tags or NO_TAGS
    call.end_user = end_user
