"""The first line of every CSV the console serves: a UTF-8 byte-order mark
(so Excel reads UTF-8, Chinese included) and one header row.

An export names its columns with stable snake_case keys (``request_id``,
``amount_due``): what scripts and the REST API read, in every language,
forever. Next to those keys it keeps a table of labels for people
(``pgettext_lazy("CSV header", …)``). ``header_line`` writes:

* the keys for the REST API (it passes no request), for a console download
  in English (the labels would only restate them), and for any console
  download that asks for them with ``?header=keys``;
* the labels in the active language for a console download in another
  language (a user who reads the console in Chinese gets a Chinese header
  row); a key without a label stays the key.

The data rows are the same whatever the header. A key may carry a
placeholder that the export fills in (``spend_{currency}`` → ``spend_USD``,
``created_at ({tz})``); its label names it as ``%(currency)s``/``%(tz)s``."""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache

from django.utils.translation import get_language

BOM = "\ufeff"
HEADER_PARAM = "header"  # ?header=keys
KEYS = "keys"
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


class _Echo:
    def write(self, text: str) -> str:
        return text


def wants_labels(request) -> bool:
    """A console download whose header row is in the reader's language:
    a request (never the API's own, which passes none), not ``?header=keys``,
    and a language other than English active."""
    if request is None or request.GET.get(HEADER_PARAM) == KEYS:
        return False
    language = get_language() or "en"
    return not language.lower().startswith("en")


@lru_cache(maxsize=512)
def _template(pattern: str) -> re.Pattern:
    parts = _PLACEHOLDER.split(pattern)
    return re.compile(
        "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>.+?)" for i, p in enumerate(parts))
    )


def label_for(key: str, labels: Mapping[str, object]) -> str:
    """``key``'s label in the active language (the key itself when it has none)."""
    label = labels.get(key)
    if label is not None:
        return str(label)
    for pattern, text in labels.items():
        if "{" in pattern and (found := _template(pattern).fullmatch(key)):
            return str(text) % found.groupdict()
    return key


def header_row(keys: Sequence[str], labels: Mapping[str, object], *, request=None) -> list[str]:
    """The header cells: ``keys``, or their labels (see the module's note)."""
    if not wants_labels(request):
        return list(keys)
    return [label_for(k, labels) for k in keys]


def header_line(keys: Sequence[str], labels: Mapping[str, object], *, request=None) -> str:
    """The file's first line: the byte-order mark and the header row, as
    ``csv.writer`` writes a row (the exports' dialect). Call it while the
    request's language is active (before a streamed body starts)."""
    return BOM + csv.writer(_Echo()).writerow(header_row(keys, labels, request=request))
