"""The Simplified Chinese catalogue (issue 18) is whole: every string marked
for translation has a Chinese msgstr that is not fuzzy, keeps the English's
placeholders, and the committed ``django.mo`` (what Django reads) says the
same as the ``django.po`` (what people edit). ``.ci/run`` also regenerates the
catalogue with makemessages to catch a marked string missing from it."""

from __future__ import annotations

import ast
import gettext
import re
from pathlib import Path

from django.conf import settings

LOCALE = Path(settings.BASE_DIR) / "locale"
PO = LOCALE / "zh_Hans" / "LC_MESSAGES" / "django.po"
MO = PO.with_suffix(".mo")
PLACEHOLDER = re.compile(r"%\(\w+\)s|%s|%d")
HAN = re.compile(r"[\u4e00-\u9fff]")


def po_entries(path: Path) -> list[dict]:
    """The catalogue's entries: msgctxt (when there is one), msgid, msgstr and
    flags (the header left out); enough of the PO format for what makemessages
    writes."""
    entries, entry, field = [], None, None
    for line in [*path.read_text(encoding="utf-8").splitlines(), ""]:
        if line.startswith("#,"):
            entry = entry if entry and "msgid" not in entry else {}
            entry["flags"] = {f.strip() for f in line[2:].split(",")}
        elif line.startswith(("msgctxt ", "msgid ", "msgstr ", "msgid_plural ", "msgstr[")):
            key, _, value = line.partition(" ")
            if key in ("msgctxt", "msgid") and entry is not None and "msgstr" in entry:
                entries.append(entry)
                entry = None
            entry = entry if entry is not None else {}
            field = key
            entry[field] = ast.literal_eval(value)
        elif line.startswith('"') and entry is not None:
            entry[field] += ast.literal_eval(line)
        elif not line.strip() and entry is not None and "msgstr" in entry:
            entries.append(entry)
            entry = None
    return [e for e in entries if e.get("msgid")]


def test_every_simplified_chinese_entry_is_translated():
    entries = po_entries(PO)
    assert len(entries) > 50  # the frame, sign-in, error pages, pager and overview at least
    untranslated = [e["msgid"] for e in entries if not e.get("msgstr", "").strip()]
    fuzzy = [e["msgid"] for e in entries if "fuzzy" in e.get("flags", set())]
    assert not untranslated, f"empty msgstr in {PO.name}: {untranslated}"
    assert not fuzzy, f"fuzzy entries in {PO.name} (check them, remove the flag): {fuzzy}"
    for e in entries:
        assert sorted(PLACEHOLDER.findall(e["msgid"])) == sorted(
            PLACEHOLDER.findall(e["msgstr"])
        ), e
        # Chinese, not the English copied over.
        assert HAN.search(e["msgstr"]) or e["msgstr"] != e["msgid"], e


def test_the_compiled_catalogue_says_what_the_po_says():
    with MO.open("rb") as f:
        compiled = gettext.GNUTranslations(f)
    for e in po_entries(PO):
        if "msgctxt" in e:
            found = compiled.pgettext(e["msgctxt"], e["msgid"])
        else:
            found = compiled.gettext(e["msgid"])
        assert found == e["msgstr"], (
            f"{MO} is older than {PO.name}: run `python manage.py compilemessages -l zh_Hans`"
        )


def test_the_frame_is_translated_where_django_looks():
    from django.utils import translation

    with translation.override("zh-hans"):
        assert translation.gettext("Overview") == "概览"
        assert translation.gettext("Log out") == "退出登录"
        assert translation.to_locale(translation.get_language()) == "zh_Hans"
    with translation.override("en"):
        assert translation.gettext("Overview") == "Overview"
