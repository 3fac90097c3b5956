"""Which language an invoice or credit-note PDF is written in.

A PDF is the buyer's document, so its language is the organization's
choice (``BillingProfile.document_language``), not that of whoever happens
to download it: frozen on the invoice at finalization (``Invoice.buyer``),
so its stored PDF and the credit notes that correct it all speak the same
language; a draft, and an invoice finalized before the choice existed,
follow the profile as it is now (English when there is none).

Every label of a PDF goes through gettext while ``translation.override``
holds the document's language, and ``console.kernel.money`` formats its amounts
with that language's locale."""

from __future__ import annotations

from django.conf import settings

from invoicing.models import DocumentLanguage

# The PDF's /Lang entry (BCP 47) for each document language.
PDF_LANG: dict[str, str] = {DocumentLanguage.EN: "en", DocumentLanguage.ZH_HANS: "zh-Hans"}


def document_language(buyer: dict) -> str:
    """The buyer's document language, one the console has a catalogue for."""
    language = buyer.get("language") or DocumentLanguage.EN
    known = {code for code, _name in settings.LANGUAGES}
    return language if language in DocumentLanguage.values and language in known else "en"


def pdf_lang(language: str) -> str:
    return PDF_LANG.get(language, "en")
